"""A plain run checks the fixes it offers (notebooks too), and keeps the check's outcome with
the file's cache entry: a warm run of a file that offers a fix parses nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.core.diagnostics import Diagnostic, Location, Severity
from amplint.fix import fixer

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP001, with a safe fix


def _notebook(source: str) -> str:
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source.splitlines(keepends=True)}
    meta = {"kernelspec": {"language": "python", "name": "python3"}}
    return json.dumps({"cells": [cell], "metadata": meta, "nbformat": 4, "nbformat_minor": 5})


def _backdate(path) -> None:
    """Older than the cache's racy window, so a warm run trusts the file by its stat."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))


def _amplint_importing(args, cwd):
    """(stdout, the top-level modules imported) of `amplint ARGS` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "amplint._start", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    modules = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in out.stderr.splitlines() if line.startswith("import time:") and "|" in line}
    return out.stdout, modules


def test_a_warm_run_of_files_that_offer_a_fix_parses_nothing(tmp_path):
    (tmp_path / "t.py").write_text(DEPRECATED)
    (tmp_path / "nb.ipynb").write_text(_notebook(DEPRECATED))
    for name in ("t.py", "nb.ipynb"):
        _backdate(tmp_path / name)
    args = [str(tmp_path), "--isolated", "--cache-dir", str(tmp_path / "cache"), "--output-format", "concise"]
    cold, modules = _amplint_importing(args, tmp_path)
    assert cold.count("AMP001 [*]") == 2 and "libcst" in modules  # linted, and each fix checked
    warm, modules = _amplint_importing(args, tmp_path)
    assert warm == cold
    assert "libcst" not in modules, "the fix checks come from the cache"


def _withdrawing_linter(calls):
    """A stand-in for the check's linter: the real one, plus a new finding in any text that
    no longer spells the deprecated GradScaler (a fixed one), so every fix the check tries is
    dropped; counts its calls. (The check's first lint, of the file's own text, is the run's
    lint of it where the run linted that text: `LintResult.linted`.)"""
    real = fixer._linter

    def make(path, config, facts):
        lint = real(path, config, facts)

        def stand_in(source):
            calls.append(path)
            found = lint(source)
            if "torch.cuda.amp.GradScaler" not in source:
                found.append(Diagnostic("AMP104", "x", "created", Severity.ERROR, path, Location(1, 1), Location(1, 2)))
            return found

        return stand_in

    return make


def _plain_run(folder, *extra):
    old = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(main, [".", "--isolated", "--output-format", "concise", *extra], catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.mark.parametrize("name, text", [("t.py", DEPRECATED), ("nb.ipynb", _notebook(DEPRECATED))], ids=["py", "notebook"])
def test_a_fix_that_would_not_relint_clean_is_not_offered(tmp_path, monkeypatch, name, text):
    (tmp_path / name).write_text(text)
    assert "AMP001 [*]" in _plain_run(tmp_path, "--no-cache").stdout  # offered while it re-lints clean
    monkeypatch.setattr(fixer, "_linter", _withdrawing_linter([]))
    r = _plain_run(tmp_path, "--no-cache")
    assert "AMP001 " in r.stdout and "[*]" not in r.stdout
    where = "cell 1:2:10" if name.endswith(".ipynb") else "2:10"
    assert f"{name}:{where}: AMP001 fix withdrawn: the fix would create AMP104 (created)" in r.stderr


def test_the_checks_outcome_is_cached_per_file_bytes_and_key(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(fixer, "_linter", _withdrawing_linter(calls))
    (tmp_path / "t.py").write_text(DEPRECATED)
    (tmp_path / "nb.ipynb").write_text(_notebook(DEPRECATED))
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = _plain_run(tmp_path, *cache)
    assert {os.path.basename(p) for p in calls} == {"t.py", "nb.ipynb"} and "[*]" not in first.stdout
    calls.clear()
    warm = _plain_run(tmp_path, *cache)  # within the racy window: re-hashed, not re-checked
    assert calls == [] and (warm.stdout, warm.stderr) == (first.stdout, first.stderr)
    _backdate(tmp_path / "t.py")
    _backdate(tmp_path / "nb.ipynb")
    assert _plain_run(tmp_path, *cache).stderr == first.stderr and calls == []  # trusted by its stat
    (tmp_path / "t.py").write_text(DEPRECATED + "x = 1\n")
    _plain_run(tmp_path, *cache)
    assert {os.path.basename(p) for p in calls} == {"t.py"}  # changed bytes: checked again
    calls.clear()
    _plain_run(tmp_path, *cache, "--unsafe-fixes")  # another check key
    assert {os.path.basename(p) for p in calls} == {"t.py", "nb.ipynb"}
