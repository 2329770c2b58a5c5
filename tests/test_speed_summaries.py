"""The summaries of a file that may use a distributed API (text index role "d") are made once
per run: the lint pass makes both (the summary and the scale summary, from one parse), as a
wrapper rule's view of the file does, and the cross-file pass reads them instead of parsing the
file again. The findings are those the cross-file pass gives when it computes every summary
itself."""
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
    handed = _diagnostics(root)
    distributed = [p.read_text() for p in root.rglob("*.py") if "d" in text_index(p.read_text())["r"]]
    assert distributed, "the project has a file with a distributed API"
    assert [parses[text] for text in distributed] == [1] * len(distributed), "parsed twice for its summaries"
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
