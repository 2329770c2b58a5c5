"""Output formats: one module each, each a pure `render(diagnostics, **context) -> str`."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable, Dict, List

if TYPE_CHECKING:  # `amplint --help` reads FORMATS and needs no diagnostics
    from ..core.diagnostics import Diagnostic

#: format name -> module under amplint.report
FORMATS: Dict[str, str] = {
    "text": "text",
    "concise": "concise",
    "json": "json_format",
    "json-lines": "json_lines",
    "sarif": "sarif",
    "github": "github",
    "gitlab": "gitlab",
    "junit": "junit",
}


def renderer(name: str) -> Callable[..., str]:
    module = importlib.import_module(f"{__name__}.{FORMATS[name]}")
    return module.render
