"""Building and applying fixes.

Rules build edits from nodes (`replace_node`, `insert_line_before`); the
engine applies them as text edits. A set of edits is applied only when the
result still parses, so a fix can never turn working code into a syntax error.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple

from .diagnostics import Applicability, Diagnostic, Edit, Fix, Location

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from .context import ModuleContext


# ----------------------------------------------------------------- building


def replace_node(ctx: "ModuleContext", node: "cst.CSTNode", text: str) -> Edit:
    start, end = ctx.position(node)
    return Edit(start, end, text)


def insert_line_before(ctx: "ModuleContext", statement: "cst.CSTNode", line: str) -> Edit:
    """Insert `line` as a new statement before `statement`, at its indentation."""
    start, _ = ctx.position(statement)
    indent = _indent_of_row(ctx.source, start.row)
    return Edit(Location(start.row, 1), Location(start.row, 1), f"{indent}{line}\n")


def _indent_of_row(source: str, row: int) -> str:
    lines = source.splitlines()
    if 0 < row <= len(lines):
        line = lines[row - 1]
        return line[: len(line) - len(line.lstrip(" \t"))]
    return ""


def make_fix(message: str, edits: Sequence[Edit], safe: bool) -> Fix:
    return Fix(Applicability.SAFE if safe else Applicability.UNSAFE, message, tuple(edits))


# ----------------------------------------------------------------- applying


def _offsets(source: str) -> List[int]:
    """Offset of the start of each 1-based row (index 0 unused)."""
    starts = [0, 0]
    pos = 0
    for line in source.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _offset(starts: List[int], loc: Location, length: int) -> int:
    if loc.row >= len(starts):
        return length
    return min(starts[loc.row] + loc.column - 1, length)


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (sorted from the end so offsets stay valid)."""
    starts = _offsets(source)
    spans = sorted(
        ((_offset(starts, e.location, len(source)), _offset(starts, e.end_location, len(source)), e.content) for e in edits),
        key=lambda s: (s[0], s[1]),
        reverse=True,
    )
    out = source
    for begin, end, content in spans:
        out = out[:begin] + content + out[end:]
    return out


def parses(source: str) -> bool:
    import libcst as cst

    try:
        cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError):
        return False
    return True


def applicable(diagnostics: Iterable[Diagnostic], unsafe: bool) -> List[Diagnostic]:
    return [
        d for d in diagnostics if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)
    ]


def apply_fixes(source: str, diagnostics: Sequence[Diagnostic], unsafe: bool = False) -> Tuple[str, List[Diagnostic]]:
    """Apply the fixes of `diagnostics` that do not overlap; return (new source, fixed ones).

    A fix whose edits overlap an already chosen fix waits for the next pass;
    a fix that would break parsing is dropped.
    """
    chosen: List[Diagnostic] = []
    taken: List[Tuple[Location, Location]] = []
    for d in sorted(applicable(diagnostics, unsafe), key=lambda d: d.location):
        spans = [(e.location, e.end_location) for e in d.fix.edits]
        if any(_overlaps(s, t) for s in spans for t in taken):
            continue
        candidate = apply_edits(source, [e for c in chosen for e in c.fix.edits] + list(d.fix.edits))
        if not parses(candidate):
            continue
        chosen.append(d)
        taken.extend(spans)
    if not chosen:
        return source, []
    return apply_edits(source, [e for c in chosen for e in c.fix.edits]), chosen


def _overlaps(a: Tuple[Location, Location], b: Tuple[Location, Location]) -> bool:
    # insertions at the same point (empty spans) conflict too, to keep order defined
    return not (a[1] < b[0] or b[1] < a[0]) and not (a[1] == b[0] and a[0] != a[1] and b[0] != b[1]) and not (
        b[1] == a[0] and a[0] != a[1] and b[0] != b[1]
    )


def fix_source(source: str, lint, unsafe: bool = False, max_passes: int = 10) -> Tuple[str, int]:
    """Lint and fix repeatedly until no applicable fix remains; returns (source, fixes applied)."""
    source, fixed, _ = fix_until_stable(source, lint, unsafe, max_passes)
    return source, len(fixed)


def fix_until_stable(
    source: str, lint, unsafe: bool = False, max_passes: int = 10
) -> Tuple[str, List[Diagnostic], List[Diagnostic]]:
    """`fix_source` that also returns the fixed diagnostics and those of the final source.

    `lint(source)` returns the diagnostics of a text; every pass applies the
    non-overlapping applicable fixes whose result parses, then lints again.
    """
    fixed_all: List[Diagnostic] = []
    diagnostics = lint(source)
    for _ in range(max_passes):
        source_new, fixed = apply_fixes(source, diagnostics, unsafe)
        if not fixed or source_new == source:
            break
        source = source_new
        fixed_all.extend(fixed)
        diagnostics = lint(source)
    return source, fixed_all, diagnostics
