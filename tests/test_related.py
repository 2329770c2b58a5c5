"""One bug, one finding: `Diagnostic.related` (a finding's other sites) survives every path a
diagnostic takes (cache, noqa, --jobs, notebooks) and every output format that can carry it."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import amplint.engine.parallel as parallel
from amplint import Config
from amplint.engine.run import lint_paths, lint_source
from amplint.engine.notebook import lint_notebook
from amplint.engine.parallel import open_cache
from amplint.report import sarif, text
from amplint.report.json_format import objects

TRAINER = textwrap.dedent(
    """\
    import torch
    from torch.cuda.amp import GradScaler


    class Trainer:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer
            self.scaler = GradScaler()

        def save(self, path, epoch, best):
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch}
            torch.save(state, path + "/last.pt")
            if best:
                torch.save(state, path + "/best.pt")
            torch.save(state, path + f"/epoch{epoch}.pt")

        def resume(self, path):
            ckpt = torch.load(path)
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
    """
)
CONFIG = Config(select=("AMP402",))


def _402(found):
    return [d for d in found if d.code == "AMP402"]


def test_one_finding_with_the_other_saves_and_the_resume_as_related():
    [d] = _402(lint_source(TRAINER, "trainer.py", CONFIG))
    assert d.location.row == 13  # the first save: where the scaler's state is added
    assert [(r.location.row, r.message) for r in d.related] == [
        (15, "also saved"),
        (16, "also saved"),
        (21, "restored without it"),
    ]
    assert all(r.filename is None and r.location.column > 1 for r in d.related)


def test_a_resume_alone_is_reported_at_the_resume_without_related():
    source = TRAINER.replace('torch.save(state, path + "/last.pt")', "pass").replace(
        "torch.save(state, path + \"/best.pt\")", "pass"
    ).replace('torch.save(state, path + f"/epoch{epoch}.pt")', "pass")
    [d] = _402(lint_source(source, "trainer.py", CONFIG))
    assert d.location.row == 21 and d.related == ()


def test_text_groups_the_notes():
    [d] = _402(lint_source(TRAINER, "trainer.py", CONFIG))
    out = text.render([d])
    assert "\n    also saved at 15, 16; restored without it at 21\n" in out
    from dataclasses import replace

    alone = replace(d, related=())
    # headline, help, the blank line after the finding, the summary (no file: no source frame)
    assert text.related_line(alone) is None and text.render([alone]).count("\n") == 4


def test_json_carries_related_with_absolute_paths(tmp_path):
    [d] = _402(lint_source(TRAINER, "trainer.py", CONFIG))
    [obj] = objects([d])
    assert [r["location"]["row"] for r in obj["related"]] == [15, 16, 21]
    assert {r["filename"] for r in obj["related"]} == {obj["filename"]}
    assert Path(obj["filename"]).is_absolute()
    assert obj["related"][2]["message"] == "restored without it"
    # findings without related sites keep the ruff-compatible shape
    plain = lint_source("import torch\nwith torch.cuda.amp.autocast():\n    y = f(x)\n", "a.py", Config(select=("AMP001",)))
    assert plain and all("related" not in o for o in objects(plain))


def test_sarif_related_locations_validate_against_the_schema():
    import jsonschema

    [d] = _402(lint_source(TRAINER, "trainer.py", CONFIG))
    document = sarif.document([d])
    result = document["runs"][0]["results"][0]
    assert [r["physicalLocation"]["region"]["startLine"] for r in result["relatedLocations"]] == [15, 16, 21]
    assert [r["id"] for r in result["relatedLocations"]] == [0, 1, 2]
    assert result["relatedLocations"][0]["message"]["text"] == "also saved"
    assert result["relatedLocations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "trainer.py", "uriBaseId": "%SRCROOT%"}
    schema = Path(__file__).resolve().parents[2] / "shared" / "data" / "sarif-schema-2.1.0.json"
    local = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
    schema = local if local.is_file() else schema
    jsonschema.Draft4Validator(json.loads(schema.read_text(encoding="utf-8"))).validate(document)


def test_a_related_site_in_another_file_names_the_file():
    from dataclasses import replace

    from amplint import Location, Related

    [d] = _402(lint_source(TRAINER, "trainer.py", CONFIG))
    other = replace(d, related=(Related(Location(106, 5), Location(106, 20), "called from", "loop.py"),))
    assert text.related_line(other) == "    called from at loop.py:106"
    assert sarif.document([other])["runs"][0]["results"][0]["relatedLocations"][0]["physicalLocation"][
        "artifactLocation"
    ]["uri"] == "loop.py"


def _project(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "trainer.py").write_text(TRAINER)
    for i in range(3):
        (root / f"plain_{i}.py").write_text(f"x = {i}\n")
    return root


def _view(result):
    return [(Path(d.filename).name, d.location, d.related) for d in result.diagnostics]


def test_related_survives_the_cache(tmp_path):
    root = _project(tmp_path)
    views = []
    for _ in range(2):
        cache = open_cache(CONFIG, str(tmp_path / "cache"))
        views.append(_view(lint_paths([str(root)], CONFIG, cache=cache)))
        cache.save()
    assert cache.hits >= 1
    assert views[0] == views[1] and views[0][0][2]


def test_related_survives_parallel_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_FILES", 1)
    root = _project(tmp_path)
    serial = _view(lint_paths([str(root)], CONFIG, jobs=1))
    assert serial and serial[0][2]
    assert _view(lint_paths([str(root)], CONFIG, jobs=2)) == serial


def test_noqa_at_the_finding_silences_it_and_elsewhere_keeps_it_whole():
    silenced = TRAINER.replace('path + "/last.pt")', 'path + "/last.pt")  # noqa: AMP402')
    assert _402(lint_source(silenced, "trainer.py", CONFIG)) == []
    elsewhere = TRAINER.replace('path + "/best.pt")', 'path + "/best.pt")  # noqa: E501')
    [d] = _402(lint_source(elsewhere, "trainer.py", CONFIG))
    assert [r.location.row for r in d.related] == [15, 16, 21]


def test_notebook_related_sites_name_their_cells():
    def cell(source):
        return {"cell_type": "code", "metadata": {}, "source": source, "execution_count": None, "outputs": []}

    lines = TRAINER.splitlines(keepends=True)
    cells = [cell(lines[:11]), cell(lines[11:17]), cell(lines[17:])]
    nb = json.dumps({"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5})
    [d] = _402(lint_notebook(nb, "train.ipynb", CONFIG))
    assert (d.cell, d.location.row) == (2, 2)  # cells count from 1
    assert [(r.cell, r.location.row) for r in d.related] == [(2, 4), (2, 5), (3, 4)]
    assert text.related_line(d) == "    also saved at 4, 5; restored without it at cell 3:4"


def test_the_fixture_trainer_reports_each_bug_once():
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "npu_trainer.py"
    found = lint_source(fixture.read_text(), str(fixture), Config(select=("AMP402", "AMP204", "AMP104")))
    assert [(d.code, d.location.row, [r.location.row for r in d.related]) for d in found] == [
        ("AMP204", 29, [41]),
        ("AMP402", 77, [79, 81, 86]),
    ]


def test_a_helper_called_with_fp16_from_two_places_is_one_finding_naming_both_calls():
    source = textwrap.dedent(
        """\
        import torch
        import torch.nn.functional as F


        def stable_logits(h, weight):
            with torch.autocast("cuda", enabled=False):
                return F.linear(h, weight)


        def forward(x, w1, weight):
            with torch.autocast("cuda"):
                h = F.linear(x, w1)
                return stable_logits(h, weight)


        def forward_inline(x, w1, weight):
            with torch.autocast("cuda"):
                return stable_logits(F.linear(x, w1), weight)


        def forward_fp32(x, weight):
            with torch.autocast("cuda"):
                return stable_logits(x, weight)
        """
    )
    [d] = lint_source(source, "head.py", Config(select=("AMP204",)))
    assert d.location.row == 7 and d.message == "`h` is passed in still fp16 from `linear`: `autocast(enabled=False)` casts nothing back"
    assert [(r.location.row, r.message) for r in d.related] == [(13, "passed in"), (18, "passed in")]
