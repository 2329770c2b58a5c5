"""Text utilities shared by the engine, the fixer and the rules' edit builders:
line splitting as Python sees lines, and applying text edits by row/column."""
from __future__ import annotations

import re
from typing import Iterable, List

from .diagnostics import Edit, Location


#: line breaks as Python's tokenizer and libcst count rows; `str.splitlines`
#: also breaks at form feeds, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which
#: would shift every row after one of them
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(source: str, keepends: bool = False) -> List[str]:
    """`source.splitlines()`, counting rows the way libcst positions do."""
    if keepends:
        out = [m for m in re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source)]
        return out
    lines = _LINE_BREAK.split(source)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# ----------------------------------------------------------------- applying


def _offsets(source: str) -> List[int]:
    """Offset of the start of each 1-based row (index 0 unused)."""
    starts = [0, 0]
    pos = 0
    for line in split_lines(source, keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _offset(starts: List[int], loc: Location, length: int) -> int:
    if loc.row >= len(starts):
        return length
    return min(starts[loc.row] + loc.column - 1, length)


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits. The text is joined from the pieces between them, in one
    pass: splicing each edit into the whole text copied it once per edit (quadratic in a file
    with many fixes). Edits at the same offset land in the order splicing from the end gave."""
    starts = _offsets(source)
    spans = sorted(
        ((_offset(starts, e.location, len(source)), _offset(starts, e.end_location, len(source)), e.content) for e in edits),
        key=lambda s: (s[0], s[1]),
        reverse=True,
    )
    pieces: List[str] = []
    tail = len(source)
    for begin, end, content in spans:  # from the end, as splicing did
        pieces.append(source[end:tail])
        pieces.append(content)
        tail = begin
    pieces.append(source[:tail])
    return "".join(reversed(pieces))


def first_row_span(line: str, start: Location, end: Location) -> Location:
    """The end of a finding's underline: `end` when the span is one row, else the end of the
    code on its first row (`line`, that row's text): a multi-line call is underlined on its name
    and the first line of its arguments, not on every row of the statement (ruff draws one line
    of carets for the common case; six rows of them hide the code they point at)."""
    if end.row <= start.row:
        return end
    code = line.rstrip("\r\n")
    stripped = code.rstrip()
    cut = _comment_start(stripped, start.column - 1)
    if cut is not None:
        stripped = stripped[:cut].rstrip()
    return Location(start.row, max(len(stripped), start.column - 1) + 1)


def _comment_start(line: str, begin: int) -> "int | None":
    """Where a `#` comment starts in `line` at or after `begin`, outside string quotes that
    open on this line (a string that began on an earlier row is not seen: the row is the
    first of the finding, whose start is code)."""
    quote = None
    i = begin
    while i < len(line):
        ch = line[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
        elif ch in "'\"":
            quote = ch * 3 if line.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        elif ch == "#":
            return i
        i += 1
    return None
