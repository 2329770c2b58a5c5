"""One line per diagnostic, nothing else (for grep and editors)."""
from __future__ import annotations

from typing import Sequence

from ..diagnostics import Diagnostic
from .text import headline


def render(diagnostics: Sequence[Diagnostic], **_: object) -> str:
    return "".join(headline(d) + "\n" for d in diagnostics)
