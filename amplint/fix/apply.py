"""Applying fixes: a set of edits is applied only when the result still parses (`parses`),
so a fix can never turn working code into a syntax error, and kept only when the
re-linted result has no finding the source lacked; fixes are applied until the
source is stable."""
from __future__ import annotations

import bisect
import re
from typing import Iterable, List, Optional, Sequence, Tuple

from ..core.diagnostics import Applicability, Diagnostic, Location
from ..core.text import apply_edits


def parses(source: str) -> bool:
    """Whether a fix may leave `source`: CPython's own parser accepts it (the interpreter the
    code runs on; read in pieces when big, `excerpt.python_parses`), or, for a text CPython
    refuses, libcst does (the lint parses with it: code newer than this interpreter). A text
    that CPython accepts and libcst cannot read where the lint needs it gets AMP000 from the
    re-lint, a new finding that keeps such a fix out. libcst's tree of a whole file (~60 KB a
    line against CPython's ~8 KB; 5 GB at 70,000 lines) is built only for a text CPython refuses."""
    from ..engine.excerpt import python_parses
    from ..engine.pipeline import gc_paused

    with gc_paused():  # each piece's tree is freed by reference counting
        if python_parses(source):
            return True
    return _libcst_parses(source)


def _libcst_parses(source: str) -> bool:
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


def apply_fixes(
    source: str, diagnostics: Sequence[Diagnostic], unsafe: bool = False, rejected: Optional[List[Tuple[Diagnostic, str]]] = None
) -> Tuple[str, List[Diagnostic]]:
    """Apply the fixes of `diagnostics` that do not overlap; return (new source, fixed ones).

    A fix whose edits overlap an already chosen fix waits for the next pass;
    a fix that would break parsing is dropped (and listed in `rejected` with why).

    The fixes that do not overlap are first checked together, with one parse: each rule's
    fix is a local edit that keeps its statement whole, so that is the common case, and
    checking each fix on the text so far (a parse of the whole file per fix) made a file
    with n fixes cost n parses of itself: quadratic, 92 s for 500 findings on one module.
    Only when the text with all of them does not parse is each one checked in turn, in
    order, on the text with the fixes kept before it.
    """
    ordered = sorted(applicable(diagnostics, unsafe), key=lambda d: d.location)
    chosen: List[Diagnostic] = []
    taken = _Taken()
    for d in ordered:  # what the check in turn chooses when every fix keeps the text parsing
        spans = [(e.location, e.end_location) for e in d.fix.edits]
        if not any(taken.overlaps(s) for s in spans):
            chosen.append(d)
            taken.extend(spans)
    if not chosen:
        return source, []
    together = apply_edits(source, [e for c in chosen for e in c.fix.edits])
    if parses(together):
        return together, chosen
    chosen, taken = [], _Taken()
    for d in ordered:
        spans = [(e.location, e.end_location) for e in d.fix.edits]
        if any(taken.overlaps(s) for s in spans):
            continue
        candidate = apply_edits(source, [e for c in chosen for e in c.fix.edits] + list(d.fix.edits))
        if not parses(candidate):
            if rejected is not None:
                rejected.append((d, "the fixed code would not parse"))
            continue
        chosen.append(d)
        taken.extend(spans)
    if not chosen:
        return source, []
    return apply_edits(source, [e for c in chosen for e in c.fix.edits]), chosen


class _Taken:
    """The spans of the fixes chosen so far, sorted by start, for `_overlaps` against each: no
    two of them overlap, so their ends rise with their starts, and only the spans starting at
    or before a span's end and ending at or after its start, the last few before that point,
    can overlap it (a scan of every chosen span per fix was quadratic in a file's fixes)."""

    def __init__(self) -> None:
        self._starts: List[Tuple[int, int]] = []
        self._ends: List[Tuple[int, int]] = []  # (row, column) keys: `Location` compares as they do

    def overlaps(self, span: Tuple[Location, Location]) -> bool:
        a0, a1 = (span[0].row, span[0].column), (span[1].row, span[1].column)
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(starts, a1) - 1
        while i >= 0 and ends[i] >= a0:
            if _overlaps(a0, a1, starts[i], ends[i]):
                return True
            i -= 1
        return False

    def extend(self, spans: Iterable[Tuple[Location, Location]]) -> None:
        for span in spans:
            start = (span[0].row, span[0].column)
            i = bisect.bisect_right(self._starts, start)
            self._starts.insert(i, start)
            self._ends.insert(i, (span[1].row, span[1].column))


def _overlaps(a0: Tuple[int, int], a1: Tuple[int, int], b0: Tuple[int, int], b1: Tuple[int, int]) -> bool:
    # insertions at the same point (empty spans) conflict too, to keep order defined
    return not (a1 < b0 or b1 < a0) and not (a1 == b0 and a0 != a1 and b0 != b1) and not (
        b1 == a0 and a0 != a1 and b0 != b1
    )


def fix_source(source: str, lint, unsafe: bool = False, max_passes: int = 10) -> Tuple[str, int]:
    """Lint and fix repeatedly until no applicable fix remains; returns (source, fixes applied)."""
    source, fixed, _ = fix_until_stable(source, lint, unsafe, max_passes)
    return source, len(fixed)


def fix_until_stable(
    source: str, lint, unsafe: bool = False, max_passes: int = 10, rejected: Optional[List[Tuple[Diagnostic, str]]] = None
) -> Tuple[str, List[Diagnostic], List[Diagnostic]]:
    """`fix_source` that also returns the fixed diagnostics and those of the final source.

    `lint(source)` returns the diagnostics of a text; every pass applies the
    non-overlapping applicable fixes whose result parses, then lints again.
    A fix is kept only if the fixed text has no finding the text before it
    lacked (see `new_findings`); when a pass creates one, its fixes are
    retried one at a time and each that creates one is dropped, with the reason
    appended to `rejected` as (diagnostic, why).
    """
    fixed_all: List[Diagnostic] = []
    refused: set = set()
    diagnostics = lint(source)
    for _ in range(max_passes):
        candidates = [d for d in diagnostics if fix_key(d) not in refused]
        dropped: List[Tuple[Diagnostic, str]] = []
        source_new, fixed = apply_fixes(source, candidates, unsafe, dropped)
        if fixed and source_new != source:
            after = lint(source_new)
            if new_findings(diagnostics, after):
                source_new, fixed, after = _one_at_a_time(source, diagnostics, fixed, lint, dropped)
        refused.update(fix_key(d) for d, _ in dropped)
        if rejected is not None:
            rejected.extend(dropped)
        if not fixed or source_new == source:
            break
        source = source_new
        fixed_all.extend(fixed)
        diagnostics = after
    return source, fixed_all, diagnostics


def fix_key(d: Diagnostic) -> tuple:
    """What identifies a fix across passes (rows move as other fixes land)."""
    return (d.code, d.fix.message if d.fix else "", tuple(e.content for e in d.fix.edits) if d.fix else ())


def _finding_key(d: Diagnostic) -> tuple:
    return (d.code, re.sub(r"\d+", "#", d.message))


def new_findings(before: Sequence[Diagnostic], after: Sequence[Diagnostic]) -> List[Diagnostic]:
    """The findings of `after` that `before` did not have (compared by code and the message
    without numbers, counted, so moved rows do not matter)."""
    from collections import Counter

    have = Counter(_finding_key(d) for d in before)
    out = []
    for d in after:
        key = _finding_key(d)
        if have[key] > 0:
            have[key] -= 1
        else:
            out.append(d)
    return out


def _one_at_a_time(source: str, before: List[Diagnostic], fixed: List[Diagnostic], lint, dropped: List[Tuple[Diagnostic, str]]):
    """Apply `fixed` one by one, keeping each only if the text so far gains no finding."""
    kept: List[Diagnostic] = []
    current, current_findings = source, before
    for d in fixed:
        candidate = apply_edits(source, [e for c in kept for e in c.fix.edits] + list(d.fix.edits))
        after = lint(candidate)
        created = new_findings(before, after)
        if created:
            first = created[0]
            dropped.append((d, f"the fix would create {first.code} ({first.message})"))
            continue
        kept.append(d)
        current, current_findings = candidate, after
    return current, kept, current_findings
