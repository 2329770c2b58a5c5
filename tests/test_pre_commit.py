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
    exe = _pre_commit()
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    _git(project, "config", "user.email", "t@example.com")
    _git(project, "config", "user.name", "t")
    (project / "train.py").write_text(BAD)
    (project / "clean.py").write_text("import torch\nx = torch.ones(2)\n")
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["vendored"]\n')
    (project / "vendored").mkdir()
    (project / "vendored" / "bad.py").write_text(BAD)
    _git(project, "add", ".")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"), PRE_COMMIT_COLOR="never")
    env.pop("VIRTUAL_ENV", None)

    def run(hook):
        return subprocess.run(
            [exe, "try-repo", str(REPO), hook, "--all-files", "--verbose"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    lint = run("amplint")
    out = lint.stdout + lint.stderr
    assert lint.returncode == 1, out
    assert "train.py:4:1: AMP101" in out
    assert "vendored/bad.py" not in out, "--force-exclude did not apply"

    # the safe-fix hook: AMP101's fix is unsafe, so the file is untouched and the hook still fails
    fixed = run("amplint-fix")
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr
    assert (project / "train.py").read_text() == BAD

    (project / "train.py").write_text(BAD.replace("torch.nn.utils.clip_grad_norm_", "scaler.unscale_(optimizer)\ntorch.nn.utils.clip_grad_norm_"))
    _git(project, "add", ".")
    clean = run("amplint")
    assert clean.returncode == 0, clean.stdout + clean.stderr
