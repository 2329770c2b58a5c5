"""One line per diagnostic, nothing else (for grep and editors)."""
from __future__ import annotations

from typing import Sequence

from ..core.diagnostics import Diagnostic
from .text import headline


def render(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False, color: bool = False, **_: object) -> str:
    return "".join(headline(d, unsafe_fixes, color) + "\n" for d in diagnostics)
