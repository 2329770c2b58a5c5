"""GitLab Code Quality report (`artifacts:reports:codequality`).

A JSON list of issues with `description`, `check_name`, `fingerprint`,
`severity` and `location.path` / `location.lines.begin`.

The fingerprint says which finding this is, so GitLab can tell a new finding
from one that moved: a hash of the path, the rule code, the message with every
number taken out (`template`), the flagged source text (whitespace-normalised),
the notebook cell, and which occurrence of all that the finding is. Never a
line number, in or out of the message: inserting lines above a finding keeps
its fingerprint; editing the flagged code makes it a new finding.

A notebook finding's `lines` are rows of the .ipynb file (its JSON), the rows
holding the cell's lines; the description names the cell.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Dict, Optional, Sequence, Tuple

from ..core.diagnostics import Diagnostic, Severity
from .common import relative_path, severity_of
from .source import Sources

SEVERITIES = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


_NUMBER = re.compile(r"\d+")


def template(message: str) -> str:
    """The message with its numbers taken out: `line 12` and `line 13` are one template."""
    return _NUMBER.sub("#", message)


def fingerprint(key: Tuple[str, ...], occurrence: int) -> str:
    return hashlib.sha256("\0".join((*key, str(occurrence))).encode("utf-8")).hexdigest()


def render(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, sources: Optional[dict] = None, **_: object) -> str:
    files = Sources(sources)
    seen: Dict[Tuple[str, ...], int] = {}
    issues = []
    for d in diagnostics:
        path = relative_path(d.filename, root)
        key = (path, d.code, template(d.message), files.span_text(d) or "", str(d.cell or 0))
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        where = f"cell {d.cell}: " if d.cell is not None else ""
        begin, end = d.location.row, max(d.end_location.row, d.location.row)
        if d.cell is not None:
            begin, end = d.raw_rows or (1, 1)
        issues.append(
            {
                "description": f"{where}{d.code} {d.message}",
                "check_name": d.code,
                "fingerprint": fingerprint(key, occurrence),
                "severity": SEVERITIES[severity_of(d)],
                "location": {
                    "path": path,
                    "lines": {"begin": begin, "end": end},
                },
            }
        )
    return json.dumps(issues, indent=2) + "\n"
