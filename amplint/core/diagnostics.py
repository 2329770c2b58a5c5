"""The values amplint produces: diagnostics, their locations and their fixes.

Everything here is plain data (no libcst, no torch) so reporters, the cache and
the verifier can pass diagnostics around, pickle them and turn them into JSON.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Tuple


class Severity(str, enum.Enum):
    """How sure a rule is that the code misbehaves at run time."""

    ERROR = "error"  # fails or is certainly wrong at run time
    WARNING = "warning"  # very likely wrong
    INFO = "info"  # advice; rules of this severity are off by default


class Applicability(str, enum.Enum):
    """Whether a fix may be applied without a human looking (ruff's terms)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Location:
    """A 1-based row and 1-based column, as ruff and editors count them."""

    row: int
    column: int


@dataclass(frozen=True)
class Edit:
    """Replace the text between two locations (end exclusive) with `content`."""

    location: Location
    end_location: Location
    content: str


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    message: str
    edits: Tuple[Edit, ...]


@dataclass
class Diagnostic:
    """One finding of one rule in one file.

    `condition` names a project fact (see `amplint.model.facts`) that must hold for
    the diagnostic to be reported; the engine resolves it after every file has
    been read. `data` carries what the detector extracted (literal, dtype,
    snippet source, ...) for the verifier.
    """

    code: str
    name: str
    message: str
    severity: Severity
    filename: str
    location: Location
    end_location: Location
    fix: Optional[Fix] = None
    noqa_row: Optional[int] = None
    url: Optional[str] = None
    condition: Optional[str] = None
    cell: Optional[int] = None
    data: dict = field(default_factory=dict)
    verification: Optional[dict] = None

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    def sort_key(self) -> tuple:
        return (self.filename, self.cell or 0, self.location, self.code, self.message)

    def to_json(self) -> dict[str, Any]:
        """The ruff-compatible JSON object (`--output-format json`)."""
        out: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "filename": self.filename,
            "location": asdict(self.location),
            "end_location": asdict(self.end_location),
            "fix": None,
            "url": self.url,
            "noqa_row": self.noqa_row,
        }
        if self.cell is not None:
            out["cell"] = self.cell
        if self.fix is not None:
            out["fix"] = {
                "applicability": self.fix.applicability.value,
                "message": self.fix.message,
                "edits": [
                    {
                        "content": e.content,
                        "location": asdict(e.location),
                        "end_location": asdict(e.end_location),
                    }
                    for e in self.fix.edits
                ],
            }
        if self.verification is not None:
            out["verification"] = self.verification
        return out
