"""ruff's `full` format: `path:line:col: CODE [*] message`, the source lines with the
span underlined, a `help:` line, and a summary.

`concise` prints the headline alone. Rows the finding spans are shown with
`CONTEXT` lines around them; a file that cannot be read (stdin not handed
over, a file gone since) is reported without a frame. `color` adds ANSI
styles (the CLI decides: a terminal, `NO_COLOR`, `FORCE_COLOR`).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

from ..core.diagnostics import Applicability, Diagnostic
from .source import Sources, clean
from .verification import VerificationLines, verdict_summary

CONTEXT = 2  # lines shown before and after the span, as ruff does
MAX_SPAN_ROWS = 6  # a longer span shows its first rows only

_STYLES = {"bold": "1", "red": "1;31", "cyan": "36", "blue": "1;34", "yellow": "33"}


def style(text: str, name: str, color: bool) -> str:
    return f"\x1b[{_STYLES[name]}m{text}\x1b[0m" if color else text


def location(d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{clean(d.filename)}:{cell}{d.location.row}:{d.location.column}"


def fix_available(d: Diagnostic, unsafe_fixes: bool = False) -> bool:
    """Whether `--fix` would apply the diagnostic's fix under the current settings (ruff's `[*]`)."""
    return d.fix is not None and (unsafe_fixes or d.fix.applicability is Applicability.SAFE)


def headline(d: Diagnostic, unsafe_fixes: bool = False, color: bool = False) -> str:
    mark = " " + style("[*]", "cyan", color) if fix_available(d, unsafe_fixes) else ""
    return f"{style(location(d), 'bold', color)}: {style(d.code, 'red', color)}{mark} {clean(d.message)}"


def help_text(d: Diagnostic) -> Optional[str]:
    """The `help:` line: the rule's advice, else the fix's title."""
    if d.help:
        return d.help
    return d.fix.message if d.fix is not None else None


def frame(d: Diagnostic, lines: Optional[List[str]], color: bool = False) -> List[str]:
    """The source lines around `d` with its span underlined, and its help (ruff's layout)."""
    out: List[str] = []
    row = d.location.row
    if lines is not None and 0 < row <= len(lines):
        end_row = min(max(d.end_location.row, row), len(lines), row + MAX_SPAN_ROWS - 1)
        first, last = max(1, row - CONTEXT), min(len(lines), end_row + CONTEXT)
        width = len(str(last))
        gutter = style(" " * width + " |", "blue", color)
        out.append(gutter)
        for r in range(first, last + 1):
            line = lines[r - 1]
            out.append(f"{style(f'{r:>{width}} |', 'blue', color)} {clean(line)}".rstrip())
            if row <= r <= end_row:
                start = d.location.column if r == row else len(line) - len(line.lstrip()) + 1
                stop = d.end_location.column if r == d.end_location.row else len(line) + 1
                lead = len(clean(line[: start - 1]))
                marks = max(1, len(clean(line[start - 1 : stop - 1])))
                label = f" {d.code}" if r == end_row else ""
                out.append(f"{gutter} {' ' * lead}{style('^' * marks + label, 'red', color)}")
        out.append(gutter)
        pad = " " * width
    else:
        pad = " "
    advice = help_text(d)
    if advice:
        out.append(f"{pad} = {style('help', 'cyan', color)}: {clean(advice)}")
    return out


def related_line(d: Diagnostic) -> Optional[str]:
    """The finding's other sites, notes grouped in order: "    also saved at 468, 470; restored at 520"
    (another cell: "cell 3:12", another file: "trainer.py:106")."""
    if not d.related:
        return None
    groups: List[List[str]] = []
    last = None
    for r in d.related:
        where = str(r.location.row)
        if r.cell is not None and r.cell != d.cell:
            where = f"cell {r.cell}:{where}"
        if r.filename is not None and r.filename != d.filename:
            where = f"{r.filename}:{where}"
        if r.message == last:
            groups[-1].append(where)
        else:
            groups.append([r.message, where])
            last = r.message
    return "    " + "; ".join(f"{g[0]} at {', '.join(g[1:])}" for g in groups)


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


#: `FileResult.read` outcomes (engine/pipeline.py) in the order and words of the summary
_READ = (
    ("analysed", "analysed"),
    ("no-amp", "without AMP code (not parsed)"),
    ("exempt", "exempt (`# amplint: noqa`)"),
    ("failed", "could not be analysed (AMP000)"),
    ("unreadable", "could not be read (AMP000)"),
)


def files_line(read: Mapping[str, int]) -> str:
    """What the run read: "Checked 12 files: 3 analysed, 8 without AMP code (not parsed), 1 could
    not be read (AMP000)." A file no rule could flag is not parsed, so a syntax error in it is not
    seen; this line says how many such files there were."""
    total = sum(read.values())
    if not total:
        return "No Python files found."
    parts = [f"{read.get(key, 0)} {words}" for key, words in _READ if read.get(key) or key == "analysed"]
    return f"Checked {_plural(total, 'file')}: {', '.join(parts)}."


def summary(diagnostics: Sequence[Diagnostic], fixed: int = 0, unsafe_fixes: bool = False, read: Optional[Mapping[str, int]] = None) -> str:
    """ruff's closing lines: counts, what was fixed, and what `--fix` / `--unsafe-fixes` would do;
    with `read` (`LintResult.read`), what the run read."""
    n = len(diagnostics)
    lines = []
    if fixed:
        lines.append(f"Found {_plural(n + fixed, 'error')} ({fixed} fixed, {n} remaining).")
    elif n:
        lines.append(f"Found {_plural(n, 'error')}.")
    if n:
        fixable = sum(1 for d in diagnostics if fix_available(d, unsafe_fixes))
        hidden = sum(1 for d in diagnostics if d.fix is not None and not fix_available(d, unsafe_fixes))
        hint = f" ({_plural(hidden, 'hidden fix', 'hidden fixes')} can be enabled with the `--unsafe-fixes` option)" if hidden else ""
        if fixable:
            lines.append(f"[*] {fixable} fixable with the `--fix` option{hint}.")
        elif hidden:
            lines.append(f"No fixes available{hint}.")
    elif not fixed:
        lines.append("All checks passed!")
    if read is not None:
        lines.append(files_line(read))
    return "\n".join(lines)


def fixes_summary(changes: Sequence[object]) -> str:
    """`--show-fixes`: what was fixed, per file and code."""
    total = sum(len(c.fixed) for c in changes)  # type: ignore[attr-defined]
    if not total:
        return "No errors fixed.\n"
    out = [f"Fixed {_plural(total, 'error')}:"]
    for change in changes:
        out.append(f"- {change.path}:")  # type: ignore[attr-defined]
        counts: Dict[str, List[Diagnostic]] = {}
        for d in change.fixed:  # type: ignore[attr-defined]
            counts.setdefault(d.code, []).append(d)
        for code in sorted(counts):
            out.append(f"    {len(counts[code])} \u00d7 {code} ({counts[code][0].name})")
    return "\n".join(out) + "\n"


def render(
    diagnostics: Sequence[Diagnostic],
    fixed: int = 0,
    unsafe_fixes: bool = False,
    color: bool = False,
    sources: Optional[Mapping[str, str]] = None,
    quiet: bool = False,
    read: Optional[Mapping[str, int]] = None,
    **_: object,
) -> str:
    out: List[str] = []
    files = Sources(sources)
    verified = VerificationLines()  # one verdict line per finding, a rule's reference result once
    for d in diagnostics:
        out.append(headline(d, unsafe_fixes, color))
        out.extend(frame(d, files.lines(d), color))
        for extra in (related_line(d), *verified.lines(d)):
            if extra:
                out.append(clean(extra))
        out.append("")
    if quiet:
        return "\n".join(out[:-1]) + "\n" if out else ""
    out.append(summary(diagnostics, fixed, unsafe_fixes, read))
    verdicts = verdict_summary(diagnostics)  # `--verify` only
    if verdicts:
        out.append(verdicts)
    return "\n".join(out) + "\n"
