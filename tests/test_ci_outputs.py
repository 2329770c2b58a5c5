"""CI outputs that stay put: GitLab fingerprints survive moved code, and notebook findings
point at the right row of the .ipynb file in every format."""
from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

from click.testing import CliRunner

from amplint import Config, lint_paths
from amplint.cli import main
from amplint.report import renderer

from .fixture_expectations import FIXTURES
from .test_notebook import training_notebook


def _fingerprints(folder):
    found = lint_paths([str(folder)], Config(root=str(folder))).diagnostics
    report = json.loads(renderer("gitlab")(found, root=str(folder)))
    return sorted((i["location"]["path"], i["check_name"], i["fingerprint"]) for i in report), report


def test_fingerprints_do_not_move_when_lines_are_inserted_above(tmp_path):
    a, b = tmp_path / "a" / "fixtures", tmp_path / "b" / "fixtures"
    # the single-file fixtures (fixtures/projects/ are multi-file projects, tested on their own)
    skip = shutil.ignore_patterns("*.expected", "projects")
    shutil.copytree(FIXTURES, a, ignore=skip)
    shutil.copytree(FIXTURES, b, ignore=skip)
    for path in b.glob("*.py"):
        text = path.read_text()
        head = "".join(line for line in text.splitlines(keepends=True)[:1] if line.startswith("#!"))
        path.write_text(head + "# moved\n# down\n\n" + text[len(head):])
    before, report_a = _fingerprints(a)
    after, report_b = _fingerprints(b)
    assert len(before) >= 20 and len({f for _, _, f in before}) == len(before)  # unique
    assert before == after
    rows_a = sorted(i["location"]["lines"]["begin"] for i in report_a)
    rows_b = sorted(i["location"]["lines"]["begin"] for i in report_b)
    assert rows_b == [r + 3 for r in rows_a]  # the lines did move


def test_editing_the_flagged_code_makes_a_new_fingerprint(tmp_path):
    (tmp_path / "t.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (first,), _ = _fingerprints(tmp_path)
    (tmp_path / "t.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler(enabled=True)\n")
    (second,), _ = _fingerprints(tmp_path)
    assert first[:2] == second[:2] and first[2] != second[2]


def _notebook(tmp_path):
    raw = training_notebook()
    (tmp_path / "nb.ipynb").write_text(raw)
    row = 1 + raw.splitlines().index('    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\\n",')
    return row


def _report(tmp_path, fmt):
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(main, ["nb.ipynb", "--no-cache", "--output-format", fmt], catch_exceptions=False).output
    finally:
        os.chdir(old)


def test_notebook_findings_point_at_the_cells_row_in_the_ipynb(tmp_path):
    row = _notebook(tmp_path)
    assert row > 40  # far from the cell-relative row 5

    (result,) = json.loads(_report(tmp_path, "sarif"))["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": row, "endLine": row}
    assert result["properties"]["cell"] == 4 and result["properties"]["cellLine"] == 5

    (issue,) = json.loads(_report(tmp_path, "gitlab"))
    assert issue["location"]["lines"] == {"begin": row, "end": row} and issue["description"].startswith("cell 4: ")

    case = ET.fromstring(_report(tmp_path, "junit").split("\n", 1)[1]).find("testsuite/testcase")
    assert case.get("line") == str(row) and "cell 4:line 5" in case.find("failure").text

    github = _report(tmp_path, "github")
    assert f"line={row},endLine={row}" in github and "::cell 4:5:5: " in github

    text = _report(tmp_path, "text")  # the text format keeps the cell's own coordinates and lines
    assert "nb.ipynb:cell 4:5:5: AMP101" in text and "5 |     torch.nn.utils.clip_grad_norm_" in text


def test_notebook_with_a_one_string_source_maps_every_line_to_its_row(tmp_path):
    from amplint.engine.notebook_rows import source_rows

    raw = '{"cells": [{"cell_type": "markdown", "source": "x"},\n {"cell_type": "code",\n  "source": "a\\nb\\n"}]}'
    assert source_rows(raw) == {1: [1], 2: [3, 3, 3]}
    assert source_rows("[1, 2]") is None
