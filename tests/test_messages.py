"""Messages in ruff's shape: one short sentence in the user's own names, the fix in `help`.

Checked on every rule's own INVALID examples and on the realistic fixtures, so a
new message that grows into an essay, cites a document amplint does not ship,
or names a line number fails here.
"""
from __future__ import annotations

import re
import statistics

import pytest

from amplint import Config, lint_paths, lint_source
from amplint.engine.registry import all_rules
from amplint.core.rule import example_source

from .fixture_expectations import FIXTURES

#: documents and citations the user cannot open
UNSHIPPED = re.compile(r"amp-facts|docs/configuration\.md|§|\bE\d\d\b")


def _examples():
    for rule in all_rules():
        for i, case in enumerate(rule.INVALID):
            yield pytest.param(rule, case, id=f"{rule.code}-{i}")


@pytest.mark.parametrize("rule, case", list(_examples()))
def test_each_finding_is_one_short_sentence_with_help(rule, case):
    found = [d for d in lint_source(example_source(case.code), "example.py", Config(select=("ALL",))) if d.code == rule.code]
    assert found
    for d in found:
        assert len(d.message) <= 110, d.message
        assert "\n" not in d.message and not UNSHIPPED.search(d.message), d.message
        assert not re.search(r"\bline \d+", d.message), d.message  # positions belong to the location
        advice = d.help or (d.fix.message if d.fix else None)
        assert advice and not UNSHIPPED.search(advice), (d.code, advice)


def test_median_message_length_on_the_fixtures_is_under_100():
    found = lint_paths([str(FIXTURES)], Config(root=str(FIXTURES))).diagnostics
    assert len(found) >= 20
    assert statistics.median(len(d.message) for d in found) < 100


def test_amp101_help_names_the_optimizer_in_scope():
    source = """\
from torch.cuda.amp import GradScaler
import torch

class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer, self.scaler = model, optimizer, GradScaler()

    def step(self, loss):
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""
    d = next(d for d in lint_source(source) if d.code == "AMP101")
    assert d.help == "Call `self.scaler.unscale_(self.optimizer)` before the clip"
    assert "unscale_(optimizer)" not in d.message + d.help


def test_explain_pages_cite_nothing_unshipped():
    from amplint.explain import explain_text

    for rule in all_rules():
        page = explain_text(rule.code)
        assert not re.search(r"amp-facts", page), rule.code
