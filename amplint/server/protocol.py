"""amplint values -> LSP values: positions (amplint counts 1-based code points,
LSP 0-based UTF-16 units), diagnostics, edits. Pure functions over lsprotocol
types, so they are tested without a server."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from lsprotocol import types as lsp

from ..core.diagnostics import Diagnostic, Edit, Location, Severity
from ..core.text import split_lines
from .verdicts import data_of, message_suffix

SOURCE = "amplint"

SEVERITIES = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
}


class Lines:
    """A text's lines, to turn amplint locations into LSP positions and back."""

    def __init__(self, text: str) -> None:
        self.lines = split_lines(text)

    def position(self, loc: Location) -> lsp.Position:
        row = max(loc.row - 1, 0)
        line = self.lines[row] if row < len(self.lines) else ""
        prefix = line[: max(loc.column - 1, 0)]
        return lsp.Position(line=row, character=len(prefix.encode("utf-16-le")) // 2)

    def range(self, start: Location, end: Location) -> lsp.Range:
        return lsp.Range(start=self.position(start), end=self.position(end))

    def location(self, pos: lsp.Position) -> Location:
        """An LSP position -> amplint's 1-based row and code-point column."""
        line = self.lines[pos.line] if pos.line < len(self.lines) else ""
        units = 0
        for i, ch in enumerate(line):
            if units >= pos.character:
                return Location(pos.line + 1, i + 1)
            units += 2 if ord(ch) > 0xFFFF else 1
        return Location(pos.line + 1, len(line) + 1)


def to_lsp(d: Diagnostic, lines: Lines, uri: str, related_uri: Dict[Optional[int], str]) -> lsp.Diagnostic:
    """One finding. `related_uri`: a related site's cell (None: the file) -> its document."""
    related: Optional[List[lsp.DiagnosticRelatedInformation]] = None
    if d.related:
        related = []
        for r in d.related:
            if r.filename is not None:
                from pathlib import Path

                target = Path(r.filename).resolve().as_uri()
                rng = lsp.Range(start=lsp.Position(line=r.location.row - 1, character=r.location.column - 1), end=lsp.Position(line=r.end_location.row - 1, character=r.end_location.column - 1))
            else:
                target = related_uri.get(r.cell, uri)
                rng = lines.range(r.location, r.end_location) if r.cell == d.cell else _plain_range(r.location, r.end_location)
            related.append(lsp.DiagnosticRelatedInformation(location=lsp.Location(uri=target, range=rng), message=r.message))
    data = {"code": d.code, "row": d.location.row, "column": d.location.column}
    verification = data_of(d)
    if verification is not None:
        data["verification"] = verification
    return lsp.Diagnostic(
        range=lines.range(d.location, d.end_location),
        message=d.message + message_suffix(d),
        severity=SEVERITIES.get(d.severity, lsp.DiagnosticSeverity.Warning),
        code=d.code,
        code_description=lsp.CodeDescription(href=d.url) if d.url else None,
        source=SOURCE,
        related_information=related,
        data=data,
    )


def _plain_range(start: Location, end: Location) -> lsp.Range:
    """A range in a text we do not hold (another cell or file): code points taken as UTF-16 units."""
    return lsp.Range(start=lsp.Position(line=start.row - 1, character=start.column - 1), end=lsp.Position(line=end.row - 1, character=end.column - 1))


def text_edits(edits: Sequence[Edit], lines: Lines) -> List[lsp.TextEdit]:
    return [lsp.TextEdit(range=lines.range(e.location, e.end_location), new_text=e.content) for e in edits]


def whole_document(old: str, new: str) -> lsp.TextEdit:
    """Replace all of `old` with `new` (one edit for fix-all)."""
    lines = Lines(old)
    end_row = len(lines.lines)
    last = lines.lines[-1] if lines.lines else ""
    end = lsp.Position(line=end_row, character=0) if old.endswith("\n") or not lines.lines else lines.position(Location(end_row, len(last) + 1))
    return lsp.TextEdit(range=lsp.Range(start=lsp.Position(line=0, character=0), end=end), new_text=new)
