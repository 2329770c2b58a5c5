"""The summaries of a file that may use a distributed API (text index role "d") are made once
per run: the lint pass makes both (the summary and the scale summary, from one parse), as a
wrapper rule's view of the file does, and the cross-file pass reads them instead of parsing the
file again. A file whose only role is "d" gets its scale summary from the lint and its project
summary only if the cross-file pass asks for it (most such files are never asked: a second parse
then, for that file only). The findings are those the cross-file pass gives when it computes
every summary itself."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from amplint.core.config import Config
from amplint.engine import crossfile
from amplint.engine.run import lint_paths
from amplint.model.project import scale, summary, text_index, wrappers

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"
#: the fixture projects whose files use a distributed API (text index role "d")
DISTRIBUTED = ["fsdp_clip", "fsdp_precision", "deepspeed_engine", "deepspeed_config", "fabric_clip"]


def _diagnostics(root: Path):
    result = lint_paths([str(root)], Config(root=str(root)), jobs=1)
    return [(d.filename, d.code, d.location.row, d.location.column, d.message, len(d.related)) for d in result.diagnostics]


@pytest.mark.parametrize("name", DISTRIBUTED)
def test_each_file_is_summarised_once_and_the_findings_do_not_change(name, monkeypatch):
    root = PROJECTS / name
    parses: Counter = Counter()
    real = scale.parse

    def counted(source):
        parses[source] += 1
        return real(source)

    monkeypatch.setattr(scale, "parse", counted)
    monkeypatch.setattr(summary, "parse", counted)
    summarised: Counter = Counter()
    run = summary._Summarizer.run

    def made(self, tree):
        summarised[self.source] += 1
        return run(self, tree)

    monkeypatch.setattr(summary._Summarizer, "run", made)
    handed = _diagnostics(root)
    distributed = [p.read_text() for p in root.rglob("*.py") if "d" in text_index(p.read_text())["r"]]
    assert distributed, "the project has a file with a distributed API"
    most = [1 if text_index(text)["r"] != "d" else 2 for text in distributed]  # "d" alone: the pass may ask
    assert all(parses[text] <= n for text, n in zip(distributed, most)), "parsed again for its summaries"
    assert all(n == 1 for n in summarised.values()), "a project summary made twice"
    assert any(crossfile.reads_scale([r]) for r in _selected())

    # the cross-file pass computing every summary itself finds the same
    monkeypatch.setattr(crossfile, "reads_scale", lambda rules: False)
    monkeypatch.setattr(wrappers, "made_for", lambda path, source: None)
    assert _diagnostics(root) == handed


def _selected():
    from amplint.engine.pipeline import selected_rules

    return selected_rules(Config())[1]


def test_the_summaries_handed_over_are_not_kept_in_the_lint_entry():
    from amplint.engine.cache import encode_result
    from amplint.engine.pipeline import FileResult

    result = FileResult(path="train.py", summaries=crossfile.summaries_of("import deepspeed\n"))
    assert result.summaries is not None
    assert encode_result(result) == encode_result(FileResult(path="train.py"))


_FAKES = [
    # a fake in the body, as a decorator, in a nested function, through mock.patch.object
    'import torch\nfrom torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n\n'
    'def test_a(monkeypatch):\n    monkeypatch.setattr(fsdp, "fully_shard", lambda m, **k: m)\n'
    '    p = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float16)\n',
    'from unittest import mock\n\n@mock.patch("torch.distributed.fsdp.fully_shard")\n'
    'def test_b(fake):\n    return 1\n',
    'def outer():\n    def inner():\n        with patch.object(fsdp_mod, "FSDP"):\n            pass\n    return inner\n',
    'def test_c():\n    """No fake here: ü."""\n    setattr(obj, "fully_shard", f)\n',
    'def test_d():\n    x = 1\r    monkeypatch.setattr("a.FullyShardedDataParallel", f)\n',
    '@decorate(\n    mock.patch("x.fully_shard"),\n)\nasync def test_e():\n    pass\n',
    'def plain(x):\n    return x + 1\n\nclass A:\n    def m(self):\n        return object()\n',
]


@pytest.mark.parametrize("source", _FAKES)
def test_the_scale_summary_is_the_same_when_every_function_is_searched_for_fakes(source, monkeypatch):
    # `_Reader._may_fake` only skips functions whose lines cannot hold a fake: the summary is the
    # one every function walked for fakes gives
    quick = scale.summarize(source)
    monkeypatch.setattr(scale._Reader, "_may_fake", lambda self, node: True)
    assert repr(quick) == repr(scale.summarize(source))


def test_a_fake_in_a_function_or_its_decorator_is_found():
    found = {}
    for source in _FAKES:
        reader = scale._Reader(source)
        reader.run(scale.parse(source))
        found.update({q: f["fakes"] for q, f in reader.functions.items() if "fakes" in f})
    assert found == {
        "test_a": ["fully_shard"], "test_b": ["fully_shard"], "outer": ["FSDP"], "outer.inner": ["FSDP"],
        "test_d": ["FullyShardedDataParallel"], "test_e": ["fully_shard"],
    }


_DISTRIBUTED_TEXT = "import deepspeed\n\ndef train(model, loss):\n    engine, *_ = deepspeed.initialize(model=model)\n    engine.backward(loss)\n"


@pytest.mark.parametrize("roles", ["d", "dc", "b"])
def test_the_summaries_handed_over_are_one_bytes_object_holding_the_same_data(roles):
    # one object the collector never traverses and a pool worker pickles whole (crossfile.packed)
    made = crossfile.summaries_ahead(_DISTRIBUTED_TEXT, roles, _selected())
    assert isinstance(made, bytes)
    if roles == "b":
        assert crossfile.unpacked(made) == (summary.summarize(_DISTRIBUTED_TEXT), None)
    else:
        assert crossfile.unpacked(made) == crossfile.summaries_of(_DISTRIBUTED_TEXT, roles)
    pair = (None, {"s": [1, (2, 3)]})
    assert crossfile.unpacked(pair) is pair


@pytest.mark.parametrize("name", DISTRIBUTED)
def test_the_project_model_is_no_cycle_left_to_the_collector_after_the_pass(name):
    # crossfile._unlinked: the model and the wrapper rules' view freed by reference counting
    import gc

    from amplint.model.project.graph import Project

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        _diagnostics(PROJECTS / name)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (Project, wrappers.ScaleView, crossfile._Store))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not left
