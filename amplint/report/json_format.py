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
        if not d.filename.startswith("<") and d.filename != "-":
            obj["filename"] = os.path.abspath(d.filename)
        items.append(obj)
    return items


def render(diagnostics: Sequence[Diagnostic], **_: object) -> str:
    return json.dumps(objects(diagnostics), indent=2) + "\n"
