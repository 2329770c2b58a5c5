"""GitLab Code Quality report (`artifacts:reports:codequality`).

A JSON list of issues with `description`, `check_name`, `fingerprint`,
`severity` and `location.path` / `location.lines.begin`. The fingerprint is a
hash of the path, code, message and which occurrence of that triple the
finding is, and never of the line number, so a finding keeps its fingerprint
when code above it moves and GitLab does not report it as new.
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, Optional, Sequence, Tuple

from ..core.diagnostics import Diagnostic, Severity
from .common import relative_path, severity_of

SEVERITIES = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


def fingerprint(path: str, d: Diagnostic, occurrence: int) -> str:
    key = "\0".join((path, d.code, d.message, str(d.cell or 0), str(occurrence)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def render(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, **_: object) -> str:
    seen: Dict[Tuple[str, str, str, int], int] = {}
    issues = []
    for d in diagnostics:
        path = relative_path(d.filename, root)
        key = (path, d.code, d.message, d.cell or 0)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        where = f"cell {d.cell}: " if d.cell is not None else ""
        issues.append(
            {
                "description": f"{where}{d.code} {d.message}",
                "check_name": d.code,
                "fingerprint": fingerprint(path, d, occurrence),
                "severity": SEVERITIES[severity_of(d)],
                "location": {
                    "path": path,
                    "lines": {"begin": d.location.row, "end": max(d.end_location.row, d.location.row)},
                },
            }
        )
    return json.dumps(issues, indent=2) + "\n"
