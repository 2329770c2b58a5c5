"""The source lines a finding points at, for the text format's frames and stable fingerprints.

Read on demand (most runs report few findings) and once per file. A notebook
finding's rows are within its cell, so a notebook yields that cell's lines.
Text from the linted file is untrusted: `clean` makes it safe to print.
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, List, Mapping, Optional, Tuple

from ..core.diagnostics import Diagnostic
from ..core.safe_read import read_bytes

#: C0/C1 control characters (ANSI escapes, newlines, ...) other than tab
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` with control and bidi-override characters shown as escapes, tabs as spaces."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text.replace("\t", "    "))


class Sources:
    """Lines of the files diagnostics name; `given` maps a name (stdin's) to its text."""

    def __init__(self, given: Optional[Mapping[str, str]] = None) -> None:
        self._given = dict(given or {})
        self._files: Dict[str, Optional[List[str]]] = {}
        self._cells: Dict[Tuple[str, int], Optional[List[str]]] = {}

    def lines(self, d: Diagnostic) -> Optional[List[str]]:
        """The lines `d`'s rows count in (its cell's for a notebook), or None when unreadable."""
        if d.cell is None:
            if d.filename not in self._files:
                self._files[d.filename] = _split(self._text(d.filename))
            return self._files[d.filename]
        key = (d.filename, d.cell)
        if key not in self._cells:
            self._cells[key] = _split(_cell_text(self._text(d.filename), d.cell))
        return self._cells[key]

    def span_text(self, d: Diagnostic) -> Optional[str]:
        """The text of the rows `d` spans, whitespace-normalised (None when unreadable)."""
        lines = self.lines(d)
        if lines is None or not 0 < d.location.row <= len(lines):
            return None
        end = min(max(d.end_location.row, d.location.row), len(lines))
        return " ".join(" ".join(lines[d.location.row - 1 : end]).split())

    def _text(self, filename: str) -> Optional[str]:
        if filename in self._given:
            return self._given[filename]
        if filename.startswith("<") or filename == "-":
            return None
        try:
            data = read_bytes(filename)  # a pipe or device named like a source is never opened
            if filename.lower().endswith(".ipynb"):
                return data.decode("utf-8-sig")
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # the coding cookie, as Python reads it
            return data.decode(encoding).lstrip("\ufeff")
        except (OSError, UnicodeDecodeError, SyntaxError, LookupError):
            return None


#: rows as Python's tokenizer and libcst count them (not `str.splitlines`, which
#: also breaks at form feeds and other separators and would shift every row after one)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _split(text: Optional[str]) -> Optional[List[str]]:
    if text is None:
        return None
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _cell_text(raw: Optional[str], cell: int) -> Optional[str]:
    if raw is None:
        return None
    import json

    try:
        cells = json.loads(raw).get("cells")
        source = cells[cell - 1].get("source", "")
    except (ValueError, AttributeError, IndexError, TypeError, RecursionError):
        return None
    return "".join(source) if isinstance(source, list) else source if isinstance(source, str) else None
