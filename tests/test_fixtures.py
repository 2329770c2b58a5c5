"""The realistic training scripts in fixtures/ produce exactly their sidecar findings."""
from __future__ import annotations

import pytest

from .fixture_expectations import FIXTURES, current_findings, read_sidecar

SCRIPTS = sorted(FIXTURES.glob("*.py"))


@pytest.fixture(scope="module")
def findings():
    return current_findings()


def test_there_are_enough_fixtures():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_fixture_findings_match_sidecar(script, findings):
    sidecar = script.with_suffix(".py.expected")
    assert sidecar.exists(), f"{sidecar.name} missing: run scripts/update_fixture_expectations.py and review"
    assert findings.get(script.name, []) == read_sidecar(sidecar)
