"""Every command docs/ci.md documents, run as written in a fresh virtualenv, and the GitHub
Action (action.yml) run step by step as GitHub would.

One wheel is built from this checkout; the virtualenv sees the site-packages of the environment
the tests run in (not the base Python's, which need not hold anything) for amplint's dependencies
(libcst, click) and pip, so nothing is fetched from a package index. Marked slow: it builds a
wheel and installs it twice (about a minute).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CI_DOC = REPO / "docs" / "ci.md"
WHEEL_NAME = "dist/amplint-0.1.0-py3-none-any.whl"

pytestmark = pytest.mark.slow

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""


def _blocks(kind):
    return re.findall(rf"```{kind}\n(.*?)```", CI_DOC.read_text(), re.S)


def documented_commands():
    """Shell lines of ```bash blocks, `run:` steps and GitLab `script:` items, in order."""
    out = []
    for block in _blocks("bash"):
        out += [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    for block in _blocks("yaml"):
        out += re.findall(r"^\s*- run: (.+)$", block, re.M)
        m = re.search(r"^\s*script:\n((?:\s+- .+\n)+)", block, re.M)
        if m:
            out += [line.strip()[2:] for line in m.group(1).splitlines()]
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    venv = root / "venv"
    # --without-pip: this environment's pip and setuptools (a bundled old setuptools cannot build wheels)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    _see_this_environment(bin_dir / "python")
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "PIP_NO_INDEX": "1",  # offline: the dependencies come from the system site-packages
        "PIP_NO_BUILD_ISOLATION": "0",  # (sic) pip's spelling of "build in this environment"
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "NO_COLOR": "1",
    }
    environ.pop("PYTHONPATH", None)
    project = root / "project"
    project.mkdir()
    (project / "train.py").write_text(BAD)
    return {"root": root, "venv": venv, "bin": bin_dir, "env": environ, "project": project}


def _see_this_environment(python):
    """A `.pth` line in the new venv naming the site-packages this test runs with (where
    `pip install -e ".[test]"` put libcst, click, pip and setuptools), whatever the base Python
    holds. A plain path line: the `.pth` files in that folder (this checkout's editable install)
    are not run, so the venv imports the amplint it installs, not this checkout."""
    import sysconfig

    here = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site).mkdir(parents=True, exist_ok=True)
    (Path(site) / "amplint-test-environment.pth").write_text("".join(f"{p}\n" for p in here))


def _sh(command, env, cwd):
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_doc_documents_install_lint_and_every_ci_format():
    commands = documented_commands()
    assert any("pip wheel" in c for c in commands) and any("pip install /path/to/amplint" in c for c in commands)
    assert "pip install amplint" not in CI_DOC.read_text()  # no package index has it
    for fmt in ("github", "sarif", "gitlab", "junit"):
        assert any(f"--output-format {fmt}" in c for c in commands), fmt


def test_every_documented_command_works_in_a_fresh_venv(env):
    project, environ = env["project"], env["env"]
    for command in documented_commands():
        command = command.replace("/path/to/amplint", str(REPO))
        r = _sh(command, environ, project)
        if command.startswith("amplint"):
            assert r.returncode in (0, 1), (command, r.stderr)
            assert "amplint: error" not in r.stderr, (command, r.stderr)
        else:
            assert r.returncode == 0, (command, r.stdout, r.stderr)
    python = env["bin"] / "python"
    installed = subprocess.run([str(python), "-c", "import amplint, pathlib; print(pathlib.Path(amplint.__file__).parent)"],
                               capture_output=True, text=True, env=environ, cwd=env["root"]).stdout.strip()
    assert installed.startswith(str(env["venv"]))  # the wheel, not this checkout
    assert (Path(installed) / "py.typed").is_file() and (Path(installed) / "_evidence" / "evidence.md").is_file()
    assert (project / WHEEL_NAME).is_file()
    doc = json.loads((project / "amplint.sarif").read_text())
    assert doc["runs"][0]["results"][0]["ruleId"] == "AMP101"
    assert json.loads((project / "gl-code-quality-report.json").read_text())[0]["check_name"] == "AMP101"
    assert ET.parse(project / "amplint-junit.xml").getroot().get("failures") == "1"
    explain = _sh("amplint --explain AMP101", environ, env["root"]).stdout
    assert "## Evidence (measured)" in explain and "torch 2.13.0+cpu" in explain


def test_the_local_pre_commit_hook_as_documented(env, tmp_path):
    exe = shutil.which("pre-commit", path=os.path.dirname(sys.executable)) or shutil.which("pre-commit")
    if exe is None or shutil.which("git") is None:
        pytest.skip("pre-commit or git is not installed")
    config = next(b for b in _blocks("yaml") if "repo: local" in b)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".pre-commit-config.yaml").write_text(config)
    (repo / "train.py").write_text(BAD)
    environ = {**env["env"], "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    for args in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=environ, capture_output=True)
    if not (env["bin"] / "amplint").exists():
        _sh(f"python -m pip install {REPO}", environ, repo)
    r = subprocess.run([exe, "run", "--all-files"], cwd=repo, env=environ, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "AMP101" in r.stdout, r.stdout + r.stderr
    (repo / "train.py").write_text(BAD.replace("torch.nn.utils", "scaler.unscale_(optimizer)\ntorch.nn.utils"))
    subprocess.run(["git", "add", "."], cwd=repo, check=True, env=environ)
    assert subprocess.run([exe, "run", "--all-files"], cwd=repo, env=environ, capture_output=True, timeout=600).returncode == 0


def test_the_github_action_installs_from_its_own_path_and_runs(env, tmp_path):
    """action.yml's steps run as GitHub runs a composite action: `${{ ... }}` filled in, `if:`
    evaluated, `uses:` steps (the SARIF upload) checked but not run."""
    import yaml

    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    workspace = tmp_path / "workspace"
    shutil.copytree(env["project"], workspace, ignore=shutil.ignore_patterns("dist", "*.sarif", "*.json", "*.xml"))
    for sarif in ("false", "true"):
        inputs = {"args": ".", "sarif": sarif, "python": str(env["bin"] / "python")}
        context = {"inputs": inputs, "github": {"action_path": str(REPO)}}
        codes = []
        for step in action["runs"]["steps"]:
            cond = step.get("if")
            if cond and not _condition(cond, inputs):
                continue
            if "uses" in step:
                assert step["uses"].startswith("github/codeql-action/upload-sarif") and step["with"]["sarif_file"] == "amplint.sarif"
                continue
            environ = {**env["env"], **{k: _expand(v, context) for k, v in step.get("env", {}).items()}}
            r = _sh(_expand(step["run"], context), environ, workspace)
            codes.append((step["name"], r.returncode, r.stdout))
        if sarif == "false":
            name, code, out = codes[-1]
            assert code == 1 and out.startswith("::error file=train.py,line=4"), codes
        else:
            assert all(code == 0 for _, code, _ in codes), codes
            assert json.loads((workspace / "amplint.sarif").read_text())["runs"][0]["results"][0]["ruleId"] == "AMP101"


def _expand(text, context):
    def value(m):
        scope, key = m.group(1).split(".", 1)
        return context[scope][key]

    return re.sub(r"\$\{\{\s*([a-z_]+\.[a-z_]+)\s*\}\}", value, text)


def _condition(cond, inputs):
    m = re.fullmatch(r"inputs\.(\w+) (==|!=) '([^']*)'", cond.strip())
    assert m, cond
    equal = inputs[m.group(1)] == m.group(3)
    return equal if m.group(2) == "==" else not equal
