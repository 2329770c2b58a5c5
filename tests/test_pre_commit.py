"""The pre-commit hooks, run for real with `pre-commit try-repo` on a throwaway git repository.

pre-commit installs amplint from this checkout into its own virtualenv (from
the package index pip is configured with), so the test is marked slow.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""


def _pre_commit():
    exe = shutil.which("pre-commit", path=os.path.dirname(sys.executable)) or shutil.which("pre-commit")
    if exe is None:
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not (REPO / ".git").exists():
        pytest.skip("try-repo needs amplint's own git checkout (this is not one)")
    return exe


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_hooks_file_declares_both_hooks():
    import yaml  # pre-commit depends on pyyaml

    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"amplint", "amplint-fix"}
    for hook in hooks.values():
        assert hook["require_serial"] is True
        assert {"python", "jupyter"} <= set(hook["types_or"])
        assert "--force-exclude" in hook["entry"]
    assert "--fix" in hooks["amplint-fix"]["entry"]


def test_try_repo(tmp_path):
    """Both hooks in one try-repo run (each run installs amplint into a fresh virtualenv)."""
    exe = _pre_commit()
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    _git(project, "config", "user.email", "t@example.com")
    _git(project, "config", "user.name", "t")
    (project / "train.py").write_text(BAD + "x = 1  # noqa: AMP101\n")
    (project / "clean.py").write_text("import torch\nx = torch.ones(2)\n")
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-select = ["AMP900"]\nextend-exclude = ["vendored"]\n')
    (project / "vendored").mkdir()
    (project / "vendored" / "bad.py").write_text(BAD)
    _git(project, "add", ".")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"), PRE_COMMIT_COLOR="never")
    env.pop("VIRTUAL_ENV", None)
    run = subprocess.run(
        [exe, "try-repo", str(REPO), "--all-files", "--verbose"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    # amplint: both findings, the excluded folder skipped although pre-commit passed its file by name
    assert "train.py:4:1: AMP101" in out, out
    assert "train.py:7:8: AMP900" in out, out
    assert "vendored/bad.py" not in out, "--force-exclude did not apply"
    # amplint-fix: the safe AMP900 fix was written, the unsafe AMP101 fix was not
    assert (project / "train.py").read_text() == BAD + "x = 1\n"
    assert "files were modified by this hook" in out
