"""Shared by tests/test_fixtures.py and scripts/update_fixture_expectations.py."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def current_findings() -> Dict[str, List[str]]:
    """path relative to fixtures/ -> ["row:col CODE", ...] for the whole fixtures folder (default rules)."""
    result = lint_paths([str(FIXTURES)], Config(root=str(FIXTURES)))
    out: Dict[str, List[str]] = {}
    for d in result.diagnostics:
        out.setdefault(Path(d.filename).relative_to(FIXTURES).as_posix(), []).append(f"{d.location.row}:{d.location.column} {d.code}")
    return out


def sidecar_text(lines: List[str]) -> str:
    header = "# expected findings: row:col CODE (default rules, fixtures/ linted as one project)\n"
    return header + "".join(f"{line}\n" for line in lines)


def read_sidecar(path: Path) -> List[str]:
    return [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]
