"""Notebooks: cells as one program, IPython lines, cell positions, fixes written back intact."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from amplint import Config
from amplint.cli import main
from amplint.engine.notebook import Notebook, NotebookError, lint_notebook


def cell(source, kind="code", **extra):
    c = {"cell_type": kind, "metadata": extra.pop("metadata", {}), "source": source}
    if kind == "code":
        c.update(execution_count=extra.pop("execution_count", None), outputs=extra.pop("outputs", []))
    c.update(extra)
    return c


def notebook(*cells, language="python"):
    nb = {
        "cells": list(cells),
        "metadata": {"kernelspec": {"display_name": "Python 3", "name": "python3"}, "language_info": {"name": language}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


SETUP = ["%matplotlib inline\n", "import torch\n", "!pip install -q accelerate\n", 'scaler = torch.amp.GradScaler("cuda")']
LOOP = [
    "for x, y in loader:\n",
    "    with torch.autocast(\"cuda\"):\n",
    "        loss = model(x, y)\n",
    "    scaler.scale(loss).backward()\n",
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "    scaler.step(optimizer)\n",
    "    scaler.update()\n",
]
OUTPUTS = [{"name": "stdout", "output_type": "stream", "text": ["loss 0.25 — ok\n"]}]


def training_notebook():
    return notebook(
        cell(["# Training\n", "Text with `%` and `!`."], kind="markdown"),
        cell(SETUP, execution_count=1, outputs=OUTPUTS),
        cell(["%%bash\n", "echo clip_grad_norm_\n"], execution_count=2),
        cell(LOOP, execution_count=3, metadata={"tags": ["train"]}),
    )


def test_cells_are_one_program_and_positions_name_the_cell():
    found = lint_notebook(training_notebook(), "nb.ipynb")
    assert [(d.code, d.cell, d.location.row, d.location.column) for d in found] == [("AMP101", 4, 5, 5)]
    assert found[0].to_json()["cell"] == 4
    assert found[0].noqa_row == 5


def test_text_output_names_the_cell(tmp_path):
    (tmp_path / "nb.ipynb").write_text(training_notebook())
    r = CliRunner().invoke(main, [str(tmp_path), "--isolated"])
    assert r.exit_code == 1
    assert f"{tmp_path / 'nb.ipynb'}:cell 4:5:5: AMP101" in r.output


def test_ipython_lines_become_placeholders_that_keep_rows():
    nb = Notebook.from_text(
        notebook(
            cell(["%time x = 1\n", "files = !ls\n", "if True:\n", "    !echo hi\n", "obj?\n", "y = 2"]),
            cell(["%%timeit\n", "z = 3\n"]),
            cell(["%%writefile out.py\n", "this is not python(\n"]),
        )
    )
    lines = nb.source.splitlines()
    assert lines[0] == "# %% amplint cell 1 %%"
    assert lines[1].startswith("# amplint-ipython") and lines[2].startswith("# amplint-ipython")
    assert lines[4] == "    pass  # amplint-ipython 2", "an indented shell line keeps the block valid"
    assert lines[6] == "y = 2"
    assert lines[7] == "# %% amplint cell 2 %%" and lines[9] == "z = 3"
    assert "writefile" not in nb.source and "not python" not in nb.source
    import libcst

    libcst.parse_module(nb.source)  # the program parses


def test_a_shell_line_continued_by_a_backslash_stays_one_placeholder():
    source = ["!python run.py --save_to_csv \\\n", "        --models a b \\\n", "        --fp16\n", "if True:\n",
              "    !echo a \\\n", "      b\n", "x = 1"]
    raw = notebook(cell(source))
    nb = Notebook.from_text(raw)
    lines = nb.source.splitlines()
    assert lines[2] == "        # amplint-ipython 1" and lines[3] == "        # amplint-ipython 2"
    assert lines[5] == "    pass  # amplint-ipython 3" and lines[6] == "      # amplint-ipython 4"
    assert lines[7] == "x = 1"
    import libcst

    libcst.parse_module(nb.source)  # IPython joins the continued lines: the program parses
    assert nb.render(nb.source) == raw


def test_unchanged_render_is_byte_identical():
    raw = training_notebook()
    nb = Notebook.from_text(raw)
    assert nb.render(nb.source) == raw


def test_fix_writes_a_valid_notebook_keeping_outputs_and_metadata(tmp_path):
    path = tmp_path / "nb.ipynb"
    raw = training_notebook()
    path.write_text(raw, encoding="utf-8")
    r = CliRunner().invoke(main, [str(path), "--isolated", "--fix", "--unsafe-fixes"])
    assert r.exit_code == 0, r.output
    before, after = json.loads(raw), json.loads(path.read_text(encoding="utf-8"))
    assert after["metadata"] == before["metadata"]
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert after["cells"][3]["source"] == LOOP[:4] + ["    scaler.unscale_(optimizer)\n"] + LOOP[4:]
    assert after["cells"][1]["source"] == SETUP, "IPython lines are restored verbatim"
    assert after["cells"][2]["source"] == before["cells"][2]["source"]
    assert "loss 0.25 — ok" in path.read_text(encoding="utf-8"), "non-ASCII kept unescaped, like nbformat"
    assert lint_notebook(path.read_text(encoding="utf-8"), "nb.ipynb") == []
    # fixing again changes nothing
    again = path.read_text(encoding="utf-8")
    r = CliRunner().invoke(main, [str(path), "--isolated", "--fix", "--unsafe-fixes"])
    assert r.exit_code == 0 and path.read_text(encoding="utf-8") == again


def test_diff_is_per_cell_and_writes_nothing(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(training_notebook())
    r = CliRunner().invoke(main, [str(path), "--isolated", "--diff", "--unsafe-fixes"])
    assert r.exit_code == 1
    assert f"--- {path}:cell 4\n+++ {path}:cell 4\n" in r.stdout
    assert "+    scaler.unscale_(optimizer)\n" in r.stdout
    assert path.read_text() == training_notebook()


def test_string_sources_stay_strings():
    raw = notebook(cell("".join(SETUP)), cell("".join(LOOP)))
    nb = Notebook.from_text(raw)
    program = nb.source.replace("    torch.nn.utils", "    scaler.unscale_(optimizer)\n    torch.nn.utils")
    data = json.loads(nb.render(program))
    assert isinstance(data["cells"][1]["source"], str) and "unscale_" in data["cells"][1]["source"]


def test_broken_markers_refuse_to_render():
    nb = Notebook.from_text(training_notebook())
    assert nb.render(nb.source.replace("# %% amplint cell 4 %%", "")) is None


def test_invalid_and_foreign_notebooks():
    found = lint_notebook("{not json", "bad.ipynb", Config())
    assert [d.code for d in found] == ["AMP000"] and "invalid notebook JSON" in found[0].message
    assert lint_notebook(notebook(cell(LOOP), language="R"), "r.ipynb") == []
    with pytest.raises(NotebookError):
        Notebook.from_text('{"cells": 3}')


def test_stdin_notebook():
    r = CliRunner().invoke(main, ["-", "--stdin-filename", "nb.ipynb", "--isolated"], input=training_notebook())
    assert r.exit_code == 1 and "nb.ipynb:cell 4:5:5: AMP101" in r.output
    fixed = CliRunner().invoke(main, ["-", "--stdin-filename", "nb.ipynb", "--isolated", "--fix", "--unsafe-fixes"], input=training_notebook())
    assert fixed.exit_code == 0
    assert "scaler.unscale_(optimizer)" in "".join(json.loads(fixed.stdout)["cells"][3]["source"])


def test_noqa_in_a_cell():
    loop = LOOP[:4] + ["    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP101\n"] + LOOP[5:]
    assert lint_notebook(notebook(cell(SETUP), cell(loop)), "nb.ipynb") == []
