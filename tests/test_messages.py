"""Messages in ruff's shape: one short sentence in the user's own names, the fix in `help`.

Checked on every rule's own INVALID examples and on the realistic fixtures, so a
new message that grows into an essay, cites a document amplint does not ship,
or names a line number fails here.
"""
from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1)
def _fixture_findings():
    return tuple(lint_paths([str(FIXTURES)], Config(root=str(FIXTURES))).diagnostics)


def test_median_message_length_on_the_fixtures_is_under_100():
    found = _fixture_findings()
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


PROJECTS = FIXTURES / "projects"


def _cross_file():
    """Every finding of the fixture projects whose cause lies in another file."""
    out = []
    for project in sorted(p for p in PROJECTS.iterdir() if (p / "pyproject.toml").exists()):
        for d in lint_paths([str(project)], Config()).diagnostics:
            if any(r.filename is not None for r in d.related):
                out.append(pytest.param(d, id=f"{project.name}-{d.code}-{d.location.row}"))
    return out


@pytest.mark.parametrize("d", _cross_file())
def test_a_cross_file_finding_is_a_short_sentence_with_its_cause_related_and_help(d):
    """The project model's findings in the per-file shape (issue 25: AMP303's was one sentence of
    ~420 characters with the advice folded in): under 100 characters, no file:line in the
    message (the cause is a related site), the advice in `help`."""
    assert len(d.message) < 100, d.message
    assert not re.search(r"[\w/]+\.py:\d+", d.message), d.message
    assert ";" not in d.message, d.message  # one sentence, no advice after a semicolon
    assert d.help and not UNSHIPPED.search(d.help), (d.code, d.help)
    assert any(r.filename is not None for r in d.related)


def test_every_message_on_the_fixtures_is_under_100_characters():
    found = _fixture_findings()
    assert [d.message for d in found if len(d.message) >= 100] == []


MULTI_LINE_SAVE = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.save(  # every epoch
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
        },
        "ckpt.pt",
    )
"""


def test_a_multi_line_call_is_underlined_on_its_name_and_first_row():
    from amplint.report.text import render

    (d,) = [d for d in lint_source(MULTI_LINE_SAVE, "t.py") if d.code == "AMP402"]
    assert (d.location.row, d.location.column, d.end_location.row, d.end_location.column) == (10, 5, 10, 16)
    out = render([d], sources={"t.py": MULTI_LINE_SAVE})
    assert [line for line in out.splitlines() if "^" in line] == ["   |     ^^^^^^^^^^^ AMP402"]


def test_a_multi_line_cross_file_call_is_underlined_on_its_first_row(tmp_path):
    import shutil

    root = tmp_path / "p"
    shutil.copytree(PROJECTS / "bce_loss_module", root)
    losses = root / "segkit" / "losses.py"
    one = "bce = F.binary_cross_entropy(probs, target.float())"
    losses.write_text(losses.read_text().replace(one, "bce = F.binary_cross_entropy(\n            probs,\n            target.float(),\n        )"))
    (d,) = lint_paths([str(root)], Config()).diagnostics
    assert d.code == "AMP303" and d.location.row == d.end_location.row == 22
    assert d.end_location.column == len("        bce = F.binary_cross_entropy(") + 1


def test_first_row_span_ends_before_a_comment_and_keeps_one_row_spans():
    from amplint.core.diagnostics import Location
    from amplint.core.text import first_row_span

    assert first_row_span("    f(a,  # why '#'\n", Location(1, 5), Location(3, 6)) == Location(1, 9)
    assert first_row_span("    f('#', b,\n", Location(1, 5), Location(2, 3)) == Location(1, 14)
    assert first_row_span("f(a)\n", Location(1, 1), Location(1, 5)) == Location(1, 5)


def test_amp101_help_reads_the_order_of_the_step():
    late = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
"""
    (d,) = [d for d in lint_source(late) if d.code == "AMP101"]
    assert d.help == "Move `scaler.unscale_(optimizer)` before the clip: it runs after it now"
    assert [(r.location.row, r.message) for r in d.related] == [(5, "unscaled only here, after the clip")]
    assert d.fix.message == "Move `scaler.unscale_(optimizer)` before the clip"
    boundary = """\
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
"""
    (d,) = [d for d in lint_source(boundary) if d.code == "AMP101"]
    assert d.help == "Call `scaler.unscale_(optimizer)` and then clip inside the block that runs `scaler.step(optimizer)`"
