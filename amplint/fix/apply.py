"""Applying fixes: a set of edits is applied only when the result still parses,
so a fix can never turn working code into a syntax error; fixes are applied
until the source is stable."""
from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

from ..core.diagnostics import Applicability, Diagnostic, Location
from ..core.text import apply_edits


def parses(source: str) -> bool:
    import libcst as cst

    from ..engine.pipeline import run_guarded, too_deep

    if too_deep(source) is not None:
        return False
    try:
        run_guarded(cst.parse_module, source)  # a big stack: libcst recursion never kills the process
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
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
