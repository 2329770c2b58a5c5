"""Move findings computed for one version of a text onto a later version.

The project model is too costly to rebuild on every keystroke in a large
project, so the server computes cross-file findings for the text a buffer had
when it was opened or saved, and carries them along while it is edited: a
finding keeps its place when every line it spans is unchanged (shifted by the
lines inserted or deleted above it) and is dropped as soon as one of its lines
is edited; the next save decides again. Its fix goes with it only when every
edited line is also unchanged; related places in the same file likewise.
"""
from __future__ import annotations

import bisect
import dataclasses
import difflib
from typing import List, Optional, Sequence, Tuple

from ..core.diagnostics import Diagnostic, Edit, Fix, Location, Related
from ..core.text import split_lines


class LineMap:
    """Old row -> new row for the rows the edit left alone (1-based; None: changed)."""

    def __init__(self, old: str, new: str) -> None:
        a, b = split_lines(old), split_lines(new)
        # an edit touches one place: only the lines between the common head and tail are diffed
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
            tail += 1
        middle = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)
        #: (first old row, first new row, how many rows), old rows ascending
        self.blocks: List[Tuple[int, int, int]] = [(1, 1, head)] if head else []
        self.blocks += [(head + i + 1, head + j + 1, n) for i, j, n in middle.get_matching_blocks() if n]
        if tail:
            self.blocks.append((len(a) - tail + 1, len(b) - tail + 1, tail))
        self._starts = [blk[0] for blk in self.blocks]

    def row(self, old_row: int) -> Optional[int]:
        k = bisect.bisect_right(self._starts, old_row) - 1
        if k < 0:
            return None
        first_old, first_new, n = self.blocks[k]
        return first_new + old_row - first_old if old_row < first_old + n else None

    def span(self, start: Location, end: Location) -> Optional[Tuple[Location, Location]]:
        """The span moved, if none of its rows changed (a span ending at column 1 of a row
        does not include that row)."""
        last = end.row - 1 if end.column == 1 and end.row > start.row else end.row
        rows = [self.row(r) for r in range(start.row, last + 1)]
        if any(r is None for r in rows) or any(b != a + 1 for a, b in zip(rows, rows[1:])):
            return None
        delta = rows[0] - start.row  # type: ignore[operator]
        return Location(start.row + delta, start.column), Location(end.row + delta, end.column)


def relocate(diagnostics: Sequence[Diagnostic], old: str, new: str) -> List[Diagnostic]:
    """`diagnostics` of the text `old`, placed in the text `new` (those on changed lines dropped)."""
    if old == new or not diagnostics:
        return list(diagnostics)
    lines = LineMap(old, new)
    out = []
    for d in diagnostics:
        moved = lines.span(d.location, d.end_location)
        if moved is None:
            continue
        delta = moved[0].row - d.location.row
        out.append(dataclasses.replace(
            d,
            location=moved[0],
            end_location=moved[1],
            noqa_row=d.noqa_row + delta if d.noqa_row is not None else None,
            fix=_fix(d.fix, lines),
            related=tuple(r for r in (_related(r, lines) for r in d.related) if r is not None),
        ))
    return out


def _fix(fix: Optional[Fix], lines: LineMap) -> Optional[Fix]:
    if fix is None:
        return None
    edits = []
    for e in fix.edits:
        moved = lines.span(e.location, e.end_location)
        if moved is None:
            return None
        edits.append(Edit(moved[0], moved[1], e.content))
    return dataclasses.replace(fix, edits=tuple(edits))


def _related(r: Related, lines: LineMap) -> Optional[Related]:
    if r.filename is not None:
        return r  # another file: the buffer's edits do not move it
    moved = lines.span(r.location, r.end_location)
    return dataclasses.replace(r, location=moved[0], end_location=moved[1]) if moved is not None else None
