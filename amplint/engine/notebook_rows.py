"""Where each line of each notebook cell sits in the .ipynb file itself.

SARIF, GitLab and JUnit can only point at a row of a file, and a notebook's
file is JSON: a finding on row 3 of cell 4 belongs on the row of the JSON
string holding that line. nbformat writes `source` as a list of strings, one
per line, each on its own JSON row; a `source` written as one string puts the
whole cell on one row, and then every line of the cell maps to that row.

A small scanner over the JSON text (strings decoded by `json.decoder.scanstring`),
since `json.loads` keeps no positions.
"""
from __future__ import annotations

import json
import re
from typing import Dict, List, Optional, Tuple

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def row(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def expect(self, char: str) -> None:
        self.ws()
        if self.text[self.pos : self.pos + 1] != char:
            raise ValueError(f"expected {char!r} at {self.pos}")
        self.pos += 1

    def string(self) -> Tuple[str, int]:
        """(the decoded string, the offset of its opening quote)."""
        self.ws()
        start = self.pos
        if self.text[start : start + 1] != '"':
            raise ValueError(f"expected a string at {start}")
        value, self.pos = json.decoder.scanstring(self.text, start + 1)
        return value, start

    def skip(self) -> None:
        """Skip any value."""
        self.ws()
        char = self.text[self.pos : self.pos + 1]
        if char == '"':
            self.string()
        elif char in "[{":
            closing = "]" if char == "[" else "}"
            self.pos += 1
            self.ws()
            if self.text[self.pos : self.pos + 1] == closing:
                self.pos += 1
                return
            while True:
                if char == "{":
                    self.string()
                    self.expect(":")
                self.skip()
                self.ws()
                nxt = self.text[self.pos : self.pos + 1]
                self.pos += 1
                if nxt == closing:
                    return
                if nxt != ",":
                    raise ValueError(f"expected ',' at {self.pos - 1}")
        else:
            m = _SCALAR.match(self.text, self.pos)
            if m is None:
                raise ValueError(f"unexpected value at {self.pos}")
            self.pos = m.end()

    def members(self):
        """Yield each key of the object at the cursor, leaving the cursor on its value."""
        self.expect("{")
        self.ws()
        if self.text[self.pos : self.pos + 1] == "}":
            self.pos += 1
            return
        while True:
            key, _ = self.string()
            self.expect(":")
            self.ws()
            start = self.pos
            yield key
            if self.pos == start:
                self.skip()
            self.ws()
            nxt = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if nxt == "}":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' at {self.pos - 1}")

    def elements(self):
        """Yield once per element of the array at the cursor, leaving the cursor on it."""
        self.expect("[")
        self.ws()
        if self.text[self.pos : self.pos + 1] == "]":
            self.pos += 1
            return
        while True:
            self.ws()
            start = self.pos
            yield
            if self.pos == start:
                self.skip()
            self.ws()
            nxt = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if nxt == "]":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' at {self.pos - 1}")


def source_rows(raw: str) -> Optional[Dict[int, List[int]]]:
    """cell index (1-based, every cell counted) -> the file row of each of its source lines;
    None when the text is not the JSON shape of a notebook."""
    s = _Scanner(raw)
    out: Dict[int, List[int]] = {}
    try:
        for key in s.members():
            if key != "cells":
                continue
            for index, _ in enumerate(s.elements(), start=1):
                if s.text[s.pos : s.pos + 1] != "{":
                    continue
                for cell_key in s.members():
                    if cell_key != "source":
                        continue
                    if s.text[s.pos : s.pos + 1] == '"':
                        text, at = s.string()
                        out[index] = [s.row(at)] * max(1, text.count("\n") + 1)
                    elif s.text[s.pos : s.pos + 1] == "[":
                        rows: List[int] = []
                        for _ in s.elements():
                            piece, at = s.string()
                            lines = piece.count("\n") + (0 if piece.endswith("\n") else 1)
                            rows.extend([s.row(at)] * max(1, lines))
                        out[index] = rows
    except (ValueError, IndexError, TypeError):
        return None
    return out


def file_rows(rows: Optional[Dict[int, List[int]]], cell: Optional[int], first: int, last: int) -> Optional[Tuple[int, int]]:
    """The file rows of rows `first`..`last` of `cell`, or None when unknown."""
    if rows is None or cell is None or cell not in rows or not rows[cell]:
        return None
    lines = rows[cell]
    at = lambda r: lines[min(max(r, 1), len(lines)) - 1]  # noqa: E731
    return at(first), max(at(last), at(first))
