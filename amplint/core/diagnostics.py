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


@dataclass(frozen=True)
class Related:
    """Another place that belongs to a finding: a second site of the same bug,
    or the cause that lives elsewhere (SARIF's `relatedLocations`).

    `message` is a short note in the user's terms ("also saved", "restored");
    the text output groups consecutive notes: "also saved at 468, 470".
    `filename` None: the diagnostic's own file. `cell`: a notebook cell, as
    `Diagnostic.cell`.
    """

    location: Location
    end_location: Location
    message: str
    filename: Optional[str] = None
    cell: Optional[int] = None

    def to_json(self, filename: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message": self.message,
            "filename": self.filename or filename,
            "location": asdict(self.location),
            "end_location": asdict(self.end_location),
        }
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass
class Diagnostic:
    """One finding of one rule in one file.

    `condition` names a project fact (see `amplint.model.facts`) that must hold for
    the diagnostic to be reported; the engine resolves it after every file has
    been read. `data` carries what the detector extracted (literal, dtype,
    snippet source, ...) for the verifier. `related`: the finding's other
    sites (`Related`), in source order; one bug is reported once.
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
    related: Tuple[Related, ...] = ()
    #: ruff's `help:` line: what to write instead, in the user's names
    help: Optional[str] = None
    #: a notebook finding's first and last row in the .ipynb file itself (its JSON
    #: lines), for formats that can only point into the file (SARIF, GitLab, JUnit)
    raw_rows: Optional[Tuple[int, int]] = None

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    def __copy__(self) -> "Diagnostic":
        """What `copy.copy` makes of it (a new object sharing the fields' values), without the
        reduce protocol: the run copies every finding of a file that offers fixes, twice
        (140,000 findings of one file: ~3x cheaper)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

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
        if self.help is not None:
            out["help"] = self.help
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
        if self.related:
            out["related"] = [r.to_json(self.filename) for r in self.related]
        if self.verification is not None:
            out["verification"] = self.verification
        return out
