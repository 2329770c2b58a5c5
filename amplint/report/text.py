"""`path:line:col: CODE message [*]`, a source excerpt, and a summary line."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..core.diagnostics import Applicability, Diagnostic


def location(d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.filename}:{cell}{d.location.row}:{d.location.column}"


def fix_available(d: Diagnostic, unsafe_fixes: bool = False) -> bool:
    """Whether `--fix` would apply the diagnostic's fix under the current settings (ruff's `[*]`)."""
    return d.fix is not None and (unsafe_fixes or d.fix.applicability is Applicability.SAFE)


def headline(d: Diagnostic, unsafe_fixes: bool = False) -> str:
    mark = " [*]" if fix_available(d, unsafe_fixes) else ""
    return f"{location(d)}: {d.code}{mark} {d.message}"


def verification_line(d: Diagnostic) -> Optional[str]:
    v = d.verification
    if not v:
        return None
    verdict = v.get("verdict", "?")
    reason = f" ({v['reason']})" if v.get("reason") else ""
    evidence = v.get("summary") or ", ".join(f"{k}={val}" for k, val in (v.get("evidence") or {}).items())
    where = ", ".join(x for x in (v.get("device"), f"torch {v['torch']}" if v.get("torch") else None) if x)
    method = v.get("method")
    parts = [f"verify: {verdict}{reason}"]
    if method:
        parts.append(f"[{method}]")
    if evidence:
        parts.append(evidence)
    if where:
        parts.append(f"({where})")
    return "    " + " ".join(parts)


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def summary(diagnostics: Sequence[Diagnostic], fixed: int = 0, unsafe_fixes: bool = False) -> str:
    """ruff's closing lines: counts, what was fixed, and what `--fix` / `--unsafe-fixes` would do."""
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


def render(diagnostics: Sequence[Diagnostic], fixed: int = 0, unsafe_fixes: bool = False, **_: object) -> str:
    out: List[str] = []
    for d in diagnostics:
        out.append(headline(d, unsafe_fixes))
        v = verification_line(d)
        if v:
            out.append(v)
    out.append(summary(diagnostics, fixed, unsafe_fixes))
    return "\n".join(out) + "\n"
