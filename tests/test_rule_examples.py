"""Every rule's VALID and INVALID examples, run as test cases."""
from __future__ import annotations

import textwrap

import pytest

from amplint import Config, lint_source
from amplint.core.rule import example_source
from amplint.engine.registry import all_rules
from amplint.fix.apply import apply_fixes, fix_source


def _config(rule) -> Config:
    # select the rule alone (info rules are off by default)
    return Config(select=(rule.code,))


def _cases(kind):
    for rule in all_rules():
        for i, case in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, case, id=f"{rule.code}-{kind.lower()}-{i}")


def _lint(rule, code):
    return [d for d in lint_source(example_source(code), "example.py", _config(rule)) if d.code == rule.code]


@pytest.mark.parametrize("rule,case", list(_cases("VALID")))
def test_valid(rule, case):
    found = _lint(rule, case.code)
    assert not found, [f"{d.location.row}:{d.location.column} {d.message}" for d in found]


@pytest.mark.parametrize("rule,case", list(_cases("INVALID")))
def test_invalid(rule, case):
    found = _lint(rule, case.code)
    assert found, f"{rule.code} did not flag:\n{case.code}"
    if case.count is not None:
        assert len(found) == case.count
    if case.line is not None:
        assert found[0].location.row == case.line
    for d in found:
        assert d.message and d.name == rule.name and d.severity == rule.severity


@pytest.mark.parametrize("rule,case", [p for p in _cases("INVALID") if p.values[1].fixed is not None])
def test_fix(rule, case):
    source = example_source(case.code)
    fixed, n = fix_source(source, lambda s: _lint(rule, s), unsafe=True)
    assert n >= 1
    assert fixed == example_source(case.fixed)
    assert not _lint(rule, fixed), "the fixed source still has the finding"
    again, n2 = fix_source(fixed, lambda s: _lint(rule, s), unsafe=True)
    assert again == fixed and n2 == 0


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_anatomy(rule):
    import re

    assert re.fullmatch(r"AMP\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.triggers or rule.gate_regex is not None or rule.gate_check is not None, "every rule needs a gate"
    docs = rule.docs()
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "References"):
        assert f"## {section}" in docs, f"{rule.code} docs lack '{section}'"
    assert len(rule.INVALID) >= 3, "at least 3 INVALID examples"
    assert len(rule.VALID) >= 4, "at least 4 VALID examples"


@pytest.mark.parametrize("rule,case", list(_cases("INVALID")))
def test_gate_is_sound(rule, case):
    """The gate is a necessary condition: it passes for every INVALID example."""
    assert rule.passes_gate(example_source(case.code))
