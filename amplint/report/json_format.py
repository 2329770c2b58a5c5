"""ruff-compatible JSON: a list of diagnostic objects."""
from __future__ import annotations

import json
import os
from typing import List, Sequence

from ..core.diagnostics import Diagnostic


def objects(diagnostics: Sequence[Diagnostic]) -> List[dict]:
    items = []
    for d in diagnostics:
        obj = d.to_json()
        obj["filename"] = _absolute(d.filename)
        for related in obj.get("related", ()):
            related["filename"] = _absolute(related["filename"])
        items.append(obj)
    return items


def _absolute(filename: str) -> str:
    return filename if filename.startswith("<") or filename == "-" else os.path.abspath(filename)


def render(diagnostics: Sequence[Diagnostic], **_: object) -> str:
    return json.dumps(objects(diagnostics), indent=2) + "\n"
