"""What ruff users reach for: -V, -o, -q, --show-settings, --add-noqa, file-level noqa,
amplint.toml / .amplint.toml, --exit-non-zero-on-fix, --explain NAME, py.typed,
`torch-version` as a string, JUnit counts, python -m amplint."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import __version__
from amplint.cli import main

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
CLIP = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""


def run(*args, cwd=None, input=None):
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(main, [*map(str, args), "--no-cache"], input=input, catch_exceptions=False)
    finally:
        os.chdir(old)


def test_short_version_flag():
    assert run("-V").output.strip() == f"amplint {__version__}"


def test_python_dash_m_amplint(tmp_path):
    out = subprocess.run([sys.executable, "-m", "amplint", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"amplint {__version__}"


def test_output_file_gets_the_report_and_stdout_stays_empty(tmp_path):
    (tmp_path / "t.py").write_text(CLIP)
    r = run(tmp_path / "t.py", "-o", tmp_path / "out.json", "--output-format", "json")
    assert r.exit_code == 1 and r.output == ""
    assert '"code": "AMP101"' in (tmp_path / "out.json").read_text()
    bad = run(tmp_path / "t.py", "-o", tmp_path / "missing" / "out.txt")
    assert bad.exit_code == 2 and "cannot write" in bad.output


def test_quiet_prints_findings_without_summary(tmp_path):
    (tmp_path / "t.py").write_text(CLIP)
    r = run(tmp_path / "t.py", "-q")
    assert "AMP101" in r.output and "Found" not in r.output and r.exit_code == 1
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert run(tmp_path / "ok.py", "-q").output == ""


def test_config_files_in_ruffs_order(tmp_path):
    (tmp_path / "t.py").write_text(CLIP)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP2"]\n')
    assert "AMP101" not in run(tmp_path / "t.py").output
    (tmp_path / "amplint.toml").write_text('select = ["AMP1"]\n')
    assert "AMP101" in run(tmp_path / "t.py").output
    (tmp_path / ".amplint.toml").write_text('select = ["AMP3"]\n')
    assert "AMP101" not in run(tmp_path / "t.py").output
    settings = run("--show-settings", tmp_path / "t.py").output
    assert f"# config file: {tmp_path / '.amplint.toml'}" in settings and 'select = ["AMP3"]' in settings


def test_unquoted_torch_version_is_rejected(tmp_path):
    (tmp_path / "amplint.toml").write_text("torch-version = 2.10\n")
    (tmp_path / "t.py").write_text(DEPRECATED)
    r = run(tmp_path / "t.py")
    assert r.exit_code == 2 and 'must be a quoted string like "2.1"' in r.output


def test_show_settings_names_the_inferred_torch_floor(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["numpy", "torch>=1.12"]\n')
    (tmp_path / "t.py").write_text(DEPRECATED)
    out = run("--show-settings", tmp_path / "t.py").output
    assert f'torch-version = "1.12"  # inferred from {tmp_path / "pyproject.toml"}' in out


def test_add_noqa_silences_each_finding_once(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(CLIP.replace("1.0)", "1.0)  # noqa: AMP301") + 'x = f("""\n' + "\"\"\")\n")
    r = run("--add-noqa", path)
    assert r.exit_code == 0 and "Added 1 noqa directive." in r.output
    assert "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP301, AMP101\n" in path.read_text()
    assert run(path).exit_code == 0
    assert "Added 0 noqa directives." in run("--add-noqa", path).output  # idempotent


def test_file_level_noqa(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("# amplint: noqa\n" + CLIP)
    assert run(path).exit_code == 0
    path.write_text("# amplint: noqa: AMP301\n" + CLIP)
    assert run(path).exit_code == 1
    path.write_text("# amplint: noqa: AMP101\n" + CLIP)
    assert run(path).exit_code == 0
    path.write_text('s = """\n# amplint: noqa\n"""\n' + CLIP)  # inside a string: not a directive
    assert run(path).exit_code == 1


def test_exit_non_zero_on_fix(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(DEPRECATED)
    assert run(path, "--fix").exit_code == 0
    path.write_text(DEPRECATED)
    assert run(path, "--fix", "--exit-non-zero-on-fix").exit_code == 1
    assert run(path, "--fix", "--exit-non-zero-on-fix").exit_code == 0  # nothing left to fix


def test_explain_by_rule_name():
    by_name = run("--explain", "clip-grad-before-unscale")
    assert by_name.exit_code == 0 and by_name.output.startswith("AMP101 clip-grad-before-unscale")
    assert run("--explain", "unused-noqa").output.startswith("AMP900 unused-noqa")
    typo = run("--explain", "clip-grad-before-unscal")
    assert typo.exit_code == 2 and "did you mean 'clip-grad-before-unscale'" in typo.output


def test_package_is_typed():
    import amplint

    assert (Path(amplint.__file__).parent / "py.typed").is_file()


def test_clean_junit_counts_one_passing_test_everywhere(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    root = ET.fromstring(run(tmp_path / "ok.py", "--output-format", "junit").output.split("\n", 1)[1])
    suite = root.find("testsuite")
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")


def test_add_noqa_leaves_rows_that_end_inside_a_string():
    from amplint.fix.add_noqa import add_noqa_text

    source = 'x = f("""\nbody\n""")\ny = 1\n'
    new, added, refused = add_noqa_text(source, {1: {"AMP301"}, 4: {"AMP301"}})
    assert (added, refused) == (1, [1])
    assert new == 'x = f("""\nbody\n""")\ny = 1  # noqa: AMP301\n'
