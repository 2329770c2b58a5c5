"""The `amplint` command: exit codes, flags, stdin, fixes, discovery flags."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import __version__
from amplint.cli import main

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
GOOD = BAD.replace("torch.nn.utils.clip_grad_norm_", "scaler.unscale_(optimizer)\ntorch.nn.utils.clip_grad_norm_")
UNUSED_NOQA = "import torch\nx = torch.ones(2)  # noqa: AMP101\n"


def run(*args, input=None, cwd=None):
    runner = CliRunner()
    if cwd is not None:
        old = os.getcwd()
        os.chdir(cwd)
    try:
        result = runner.invoke(main, list(args), input=input, catch_exceptions=False)
    finally:
        if cwd is not None:
            os.chdir(old)
    return result


@pytest.fixture
def project(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(GOOD)
    return tmp_path


# ------------------------------------------------------------------ exit codes


def test_exit_0_when_clean(project):
    r = run(str(project / "good.py"), "--isolated")
    assert r.exit_code == 0 and "All checks passed!" in r.output


def test_exit_1_with_findings(project):
    r = run(str(project), "--isolated")
    assert r.exit_code == 1
    assert f"{project / 'bad.py'}:4:1: AMP101" in r.output
    assert "good.py" not in r.output


def test_exit_zero_flag(project):
    assert run(str(project), "--isolated", "--exit-zero").exit_code == 0


def test_unknown_code_exits_2_with_hint(project):
    r = run(str(project), "--select", "AMP10l")
    assert r.exit_code == 2
    assert "unknown rule selector 'AMP10L'" in r.output


def test_unknown_code_hint_did_you_mean(project):
    r = run(str(project), "--ignore", "AMP1011")
    assert r.exit_code == 2 and "did you mean 'AMP101'" in r.output


def test_unknown_config_key_exits_2_with_did_you_mean(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nselekt = ["AMP1"]\n')
    r = run(str(project))
    assert r.exit_code == 2
    assert "unknown key 'selekt'" in r.output and "did you mean 'select'" in r.output


def test_missing_config_file_exits_2(project):
    r = run(str(project), "--config", str(project / "nope.toml"))
    assert r.exit_code == 2 and "config file not found" in r.output


def test_bad_flag_exits_2(project):
    r = run(str(project), "--no-such-flag")
    assert r.exit_code == 2 and "amplint: error:" in r.output


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.output.strip() == f"amplint {__version__}"


def test_explain():
    r = run("--explain", "AMP101")
    assert r.exit_code == 0 and r.output.startswith("AMP101 clip-grad-before-unscale (error)")
    assert "## Why is this bad?" in r.output
    table = run("--explain")
    assert table.exit_code == 0 and "AMP101" in table.output
    pseudo = run("--explain", "AMP900")
    assert pseudo.exit_code == 0 and pseudo.output.startswith("AMP900 unused-noqa (warning, off by default)")
    unknown = run("--explain", "AMP1O1")
    assert unknown.exit_code == 2 and "unknown rule code or name" in unknown.output


def test_syntax_error_is_amp000_and_the_run_goes_on(project):
    # the file passes AMP107's gate (it mentions GradScaler), so it is parsed
    (project / "broken.py").write_text("def f(:\n    scaler = torch.amp.GradScaler()\n")
    r = run(str(project), "--isolated")
    assert r.exit_code == 1
    assert "broken.py:" in r.output and "AMP000 SyntaxError" in r.output
    assert "bad.py:4:1: AMP101" in r.output


def test_missing_path_is_a_usage_error_with_a_close_name(project):
    r = run(str(project / "bda.py"), "--isolated")
    assert r.exit_code == 2
    assert f"amplint: error: {project / 'bda.py'}: no such file or directory; did you mean `{project / 'bad.py'}`?" in r.output
    assert "AMP000" not in r.output


def test_missing_path_without_a_close_name(project):
    r = run(str(project / "elsewhere" / "nope.py"), "--isolated")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "nope.py: no such file or directory (see 'amplint --help')" in r.output


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["lint", "bad.py"], "`lint` is neither a command nor a file; amplint lints without a command: did you mean `amplint bad.py`?"),
        (["check", "."], "did you mean `amplint .`?"),
        (["rnu"], "`rnu` is neither a command nor a file; did you mean `amplint run`?"),
        (["sever"], "did you mean `amplint server`?"),
    ],
)
def test_a_word_like_a_subcommand_is_a_usage_error_with_did_you_mean(project, argv, hint):
    r = run(*argv, "--isolated", cwd=project)
    assert r.exit_code == 2 and hint in r.output, r.output


def test_a_folder_named_like_a_lint_word_is_linted(project):
    (project / "lint").mkdir()
    (project / "lint" / "t.py").write_text(BAD)
    r = run("lint", "--isolated", cwd=project)
    assert r.exit_code == 1 and "AMP101" in r.output


def test_help_lists_the_subcommands_the_console_script_runs():
    from amplint._start import SUBCOMMANDS as dispatched
    from amplint.cli import SUBCOMMANDS as described

    assert list(described) == list(dispatched)
    r = run("--help")
    assert r.exit_code == 0
    commands = r.output.split("Commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in commands] == list(dispatched)  # one line each
    assert " COMMAND [ARGS]..." in r.output.split("\n")[1]


# ------------------------------------------------------------------ selection


@pytest.mark.parametrize(
    "flags,expected",
    [
        ((), True),
        (("--select", "AMP101"), True),
        (("--select", "AMP1"), True),
        (("--select", "ALL"), True),
        (("--ignore", "AMP101"), False),
        (("--ignore", "AMP1"), False),
        (("--select", "AMP000"), False),
        (("--select", "AMP000", "--extend-select", "AMP101"), True),
        (("--select", "amp101"), True),
        (("--select", "AMP000,AMP101"), True),
    ],
)
def test_selection(project, flags, expected):
    r = run(str(project / "bad.py"), "--isolated", *flags)
    assert ("AMP101" in r.output) is expected, r.output


# ------------------------------------------------------------------ stdin


def test_stdin(project):
    r = run("-", "--stdin-filename", "train.py", "--isolated", input=BAD)
    assert r.exit_code == 1 and "train.py:4:1: AMP101" in r.output
    clean = run("-", "--isolated", input=GOOD)
    assert clean.exit_code == 0


def test_stdin_with_other_paths_is_an_error(project):
    r = run("-", str(project), input=BAD)
    assert r.exit_code == 2 and "cannot be combined" in r.output


def test_stdin_fix_prints_the_fixed_source(project):
    r = run("-", "--stdin-filename", "t.py", "--isolated", "--fix", "--extend-select", "AMP900", input=UNUSED_NOQA)
    assert r.exit_code == 0
    assert r.stdout == "import torch\nx = torch.ones(2)\n"


# ------------------------------------------------------------------ fixes


def test_fix_needs_unsafe_for_unsafe_fixes(project):
    r = run(str(project / "bad.py"), "--isolated", "--fix")
    assert r.exit_code == 1
    assert (project / "bad.py").read_text() == BAD
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option" in r.output


def test_unsafe_fixes_mark_and_apply(project):
    marked = run(str(project / "bad.py"), "--isolated", "--unsafe-fixes")
    assert "AMP101 [*]" in marked.output
    plain = run(str(project / "bad.py"), "--isolated")
    assert "AMP101 [*]" not in plain.output
    r = run(str(project / "bad.py"), "--isolated", "--fix", "--unsafe-fixes", "--show-fixes")
    assert r.exit_code == 0, r.output
    assert (project / "bad.py").read_text() == GOOD
    assert "Found 1 error (1 fixed, 0 remaining)." in r.output
    assert "1 × AMP101 (clip-grad-before-unscale)" in r.output
    # a second run changes nothing
    again = run(str(project / "bad.py"), "--isolated", "--fix", "--unsafe-fixes")
    assert again.exit_code == 0 and (project / "bad.py").read_text() == GOOD
    assert "All checks passed!" in again.output


def test_safe_fix_counts(project):
    (project / "n.py").write_text(UNUSED_NOQA)
    r = run(str(project / "n.py"), str(project / "bad.py"), "--isolated", "--fix", "--extend-select", "AMP900")
    assert r.exit_code == 1  # AMP101 remains (unsafe fix)
    assert "Found 2 errors (1 fixed, 1 remaining)." in r.output
    assert (project / "n.py").read_text() == "import torch\nx = torch.ones(2)\n"


def test_diff_writes_nothing_and_exits_1(project):
    r = run(str(project / "bad.py"), "--isolated", "--diff", "--unsafe-fixes")
    assert r.exit_code == 1
    assert (project / "bad.py").read_text() == BAD
    assert "+scaler.unscale_(optimizer)" in r.stdout
    assert r.stdout.startswith(f"--- {project / 'bad.py'}\n+++ {project / 'bad.py'}\n")
    assert "Would fix 1 error." in r.stderr
    none = run(str(project / "good.py"), "--isolated", "--diff")
    assert none.exit_code == 0 and none.stdout == ""


def test_fix_keeps_the_other_output_formats_working(project):
    r = run(str(project / "bad.py"), "--isolated", "--fix", "--output-format", "json")
    assert r.exit_code == 1 and json.loads(r.output)[0]["code"] == "AMP101"


# ------------------------------------------------------------------ discovery flags


def test_statistics(project):
    (project / "bad2.py").write_text(BAD)
    r = run(str(project), "--isolated", "--statistics")
    assert r.exit_code == 1
    assert r.output == "2\tAMP101\t[ ] clip-grad-before-unscale\n"


def test_show_files(project):
    (project / "notes.txt").write_text("x")
    (project / "nb.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    r = run(str(project), "--isolated", "--show-files")
    assert r.exit_code == 0
    names = [Path(line).name for line in r.output.splitlines()]
    assert names == ["bad.py", "good.py", "nb.ipynb"]


def test_gitignore_respected_by_default(project):
    (project / ".git").mkdir()
    (project / ".gitignore").write_text("bad.py\n")
    r = run(str(project), "--isolated")
    assert r.exit_code == 0, r.output
    r = run(str(project), "--isolated", "--no-respect-gitignore")
    assert r.exit_code == 1 and "AMP101" in r.output
    # a file named explicitly is linted even if ignored
    assert run(str(project / "bad.py"), "--isolated").exit_code == 1


def test_force_exclude(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["bad.py"]\n')
    assert run(str(project / "bad.py")).exit_code == 1
    r = run(str(project / "bad.py"), "--force-exclude")
    assert r.exit_code == 0 and "All checks passed!" in r.output


def test_per_file_ignores_from_config(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "b*.py" = ["AMP1"] }\n')
    assert run(str(project)).exit_code == 0


def test_output_format_sarif_from_the_cli(project):
    r = run(str(project / "bad.py"), "--isolated", "--output-format", "sarif", cwd=project)
    doc = json.loads(r.output)
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "bad.py"


# ------------------------------------------------------------------ the real entry point


def test_import_keeps_torch_out():
    code = "import sys, amplint.cli, amplint.engine.run, amplint.engine.parallel, amplint.report.sarif; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_console_script(project):
    exe = Path(sys.executable).with_name("amplint")
    if not exe.exists():
        pytest.skip("the amplint console script is not installed next to this interpreter")
    out = subprocess.run([str(exe), str(project / "bad.py"), "--isolated"], capture_output=True, text=True)
    assert out.returncode == 1 and "AMP101" in out.stdout
