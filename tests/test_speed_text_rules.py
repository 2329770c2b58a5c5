"""Text-only rules (the wrapper rules: `ast` scale summaries) in a file whose other rules can be
answered from an excerpt: libcst parses the excerpt, not the whole file, and the findings are
those one whole-file parse running every rule gives. Within one file's lint the text is parsed
by CPython once (`pyast.remembered`): the docstring look, the wrapper rules' view and the
summaries for the cross-file pass share the tree."""
from __future__ import annotations

import ast
import textwrap

from amplint.core import pyast
from amplint.core.config import Config
from amplint.core.gating import passing
from amplint.engine import crossfile, pipeline
from amplint.engine.pipeline import FileResult, _lint_file_source, lint_active, selected_rules
from amplint.model import parse as model_parse

SOURCE = textwrap.dedent('''\
    """Distillation helpers."""
    import deepspeed
    import torch


    def masked(scores, mask):
        return scores.masked_fill(mask == 0, -1e9)


    class Unrelated:
        def a(self, x):
            return x + 1

        def b(self, y):
            return [y] * 3


    def train(args, model, params, loader, criterion):
        model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    ''')


def _key(d):
    return (d.code, d.location.row, d.location.column, d.end_location.row, d.end_location.column, d.message, d.help, repr(d.fix), repr(d.data), d.condition)


def test_text_only_rules_leave_the_others_their_excerpt(monkeypatch):
    config = Config()
    codes, rules = selected_rules(config)
    active = passing(rules, SOURCE)
    assert any(getattr(r, "text_only", False) for r in active) and any(r.code == "AMP301" for r in active)
    parsed = []
    real = model_parse.parse_module

    def counted(text):
        parsed.append(len(text))
        return real(text)

    monkeypatch.setattr(model_parse, "parse_module", counted)
    split = _lint_file_source(SOURCE, "t.py", config, rules, codes)
    assert parsed and max(parsed) < len(SOURCE), "libcst parsed the whole file"
    parsed.clear()
    # every rule in one whole-file parse (as before): the same findings, in the same order
    whole = lint_active(SOURCE, "t.py", config, active, codes, None, FileResult(path="t.py"))
    assert max(parsed) == len(SOURCE)
    assert {d.code for d in split.diagnostics} >= {"AMP301", "AMP806"}
    assert [_key(d) for d in split.diagnostics] == [_key(d) for d in whole.diagnostics]


def test_a_file_that_cannot_be_analysed_gives_no_text_rule_finding():
    config = Config()
    codes, rules = selected_rules(config)
    broken = SOURCE + "\ndef (:\n"
    result = _lint_file_source(broken, "t.py", config, rules, codes)
    assert result.read == pipeline.FAILED
    assert [d.code for d in result.diagnostics] == ["AMP000"]


def test_one_cpython_parse_of_a_text_within_its_lint(monkeypatch, tmp_path):
    from amplint.engine.dispatch import lint_path

    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    config = Config()
    codes, rules = selected_rules(config)
    calls = []
    real = ast.parse

    def counted(text, *a, **k):
        if text == SOURCE:
            calls.append(1)
        return real(text, *a, **k)

    monkeypatch.setattr(ast, "parse", counted)
    result = lint_path(str(path), config, rules, codes)
    assert result.summaries is not None and crossfile.unpacked(result.summaries)[0] is not None  # summarised for the cross-file pass
    assert len(calls) == 1
    assert not pyast._LAST  # nothing kept after the file
    with pyast.remembered():
        assert pyast.parse(SOURCE) is pyast.parse(SOURCE)
    assert pyast.parse(SOURCE) is not pyast.parse(SOURCE)
