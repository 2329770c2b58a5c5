"""One ruff-compatible JSON object per line (`--output-format json-lines`)."""
from __future__ import annotations

import json
from typing import Sequence

from ..core.diagnostics import Diagnostic
from .json_format import objects


def render(diagnostics: Sequence[Diagnostic], **_: object) -> str:
    return "".join(json.dumps(obj) + "\n" for obj in objects(diagnostics))
