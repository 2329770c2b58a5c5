"""The server's side of cached verdicts, without a client: a verdict `--verify` kept for a
saved file (or notebook) is found for the editor's buffer of it, rendered inert."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("lsprotocol")

from amplint.server.documents import lint_notebook_cells, lint_python, notebook_json  # noqa: E402
from amplint.server.project import Projects  # noqa: E402
from amplint.server.protocol import Lines, to_lsp  # noqa: E402
from amplint.server.verdicts import Verdicts  # noqa: E402
from amplint.verify.store import FileDigests, VerdictStore  # noqa: E402

CELLS = [
    ("code", 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'),
    ("markdown", "# notes"),
    ("code", "scaler.scale(loss).backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"),
]
CLIP = "".join(text for kind, text in CELLS if kind == "code")


@pytest.fixture(autouse=True)
def machine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("AMPLINT_CACHE_DIR", raising=False)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")


def keep(path, diagnostics, verdict):
    """What `amplint --verify` does: the verdict under the saved file's digest."""
    store = VerdictStore.for_config(Projects().config_for(str(path)))
    for d in diagnostics:
        assert store.record(d, FileDigests().of(str(path)), verdict)
    store.save()


def test_a_notebook_verdict_reaches_its_cell_in_the_editor(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(notebook_json(CELLS))
    projects = Projects(str(tmp_path))
    cells = [(f"cell{i}", kind, text) for i, (kind, text) in enumerate(CELLS)]
    linted = lint_notebook_cells(cells, str(path), projects)
    keep(path, linted.diagnostics, {"verdict": "not-reproduced", "method": "snippet", "summary": "the norm was below 1"})
    shown = Verdicts().attach(lint_notebook_cells(cells, str(path), projects), str(path))
    (d,) = shown.diagnostics
    assert d.cell == 3 and d.verification["verdict"] == "not-reproduced"
    edited = [*cells[:2], ("cell2", "code", CELLS[2][1] + "print(1)\n")]
    (d,) = Verdicts().attach(lint_notebook_cells(edited, str(path), projects), str(path)).diagnostics
    assert d.verification is None


def test_a_verdict_is_rendered_inert_in_message_data_and_hover(tmp_path):
    from amplint.server.actions import hover_text

    path = tmp_path / "train.py"
    path.write_text(CLIP)
    projects = Projects(str(tmp_path))
    linted = lint_python(CLIP, str(path), projects)
    hostile = {"verdict": "inconclusive", "reason": "could not run this code: x\n[click](http://evil)\x1b[2J", "method": "snippet",
               "summary": "*bold* <img src=x>", "device": "cpu", "torch": "2.13.0+cpu"}
    keep(path, linted.diagnostics, hostile)
    (d,) = Verdicts().attach(lint_python(CLIP, str(path), projects), str(path)).diagnostics
    out = to_lsp(d, Lines(CLIP), path.as_uri(), {})
    assert out.message.endswith(" [verify: inconclusive]")
    assert "\n" not in out.data["verification"]["reason"] and "\x1b" not in out.data["verification"]["reason"]
    hover = hover_text(d)
    assert "[click](http" not in hover and "\\[click\\]\\(http" in hover
    assert not re.search(r"(?<!\\)<img", hover) and "\\*bold\\*" in hover
    assert "\x1b" not in hover


def test_no_store_no_change(tmp_path):
    path = tmp_path / "train.py"
    linted = lint_python(CLIP, str(path), Projects(str(tmp_path)))
    assert Verdicts().attach(linted, str(path)) is linted
