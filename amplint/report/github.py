"""GitHub Actions workflow commands: one annotation per finding.

`::error file=src/train.py,line=4,col=1,endLine=4,endColumn=58,title=amplint (AMP101)::message`

Escaping follows @actions/core (`toCommandValue` / `escapeData` /
`escapeProperty`): `%`, CR and LF in the message; additionally `:` and `,` in
property values. GitHub only places columns on single-line annotations, so
`col`/`endColumn` are left out when a finding spans several lines. A finding in
a notebook names its cell in the message and points at the .ipynb rows holding
the cell's lines (the file's own lines are JSON), without columns.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from ..core.diagnostics import Diagnostic, Severity
from .common import relative_path, severity_of

LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def command(d: Diagnostic, root: Optional[str] = None) -> str:
    props: List[str] = [f"file={escape_property(relative_path(d.filename, root))}"]
    message = d.message
    if d.cell is not None:
        message = f"cell {d.cell}:{d.location.row}:{d.location.column}: {message}"
        if d.raw_rows is not None:
            props.append(f"line={d.raw_rows[0]}")
            props.append(f"endLine={d.raw_rows[1]}")
    else:
        props.append(f"line={d.location.row}")
        single = d.end_location.row == d.location.row
        if single:
            props.append(f"col={d.location.column}")
        props.append(f"endLine={max(d.end_location.row, d.location.row)}")
        if single:
            props.append(f"endColumn={max(d.end_location.column, d.location.column)}")
    props.append(f"title={escape_property(f'amplint ({d.code})')}")
    return f"::{LEVELS[severity_of(d)]} {','.join(props)}::{escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, **_: object) -> str:
    return "".join(command(d, root) + "\n" for d in diagnostics)
