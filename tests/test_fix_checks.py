"""Fixes are checked before they are offered: re-linted, one unscale_ per optimizer per
step, the project's torch floor, imports made unused removed, and the fixed code runs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import Config, lint_source
from amplint.cli import main
from amplint.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
from amplint.fix.apply import fix_until_stable, new_findings
from amplint.core.torchfloor import floor_of, infer

from .fixture_expectations import FIXTURES

pytest.importorskip("torch")


def _finding(code, row, message, fix=None):
    return Diagnostic(code, "x", message, Severity.ERROR, "f.py", Location(row, 1), Location(row, 2), fix=fix)


def test_a_fix_that_creates_a_finding_is_dropped_with_the_reason():
    """A stand-in linter: `bad` lines are findings with a fix; the fix for row 1 writes a line
    that is itself a new finding (`boom`), the fix for row 2 is clean."""

    def lint(source):
        out = []
        for row, line in enumerate(source.splitlines(), start=1):
            if line == "bad1":
                out.append(_finding("AMP900", row, "bad one", Fix(Applicability.SAFE, "fix1", (Edit(Location(row, 1), Location(row, 5), "boom"),))))
            elif line == "bad2":
                out.append(_finding("AMP900", row, "bad two", Fix(Applicability.SAFE, "fix2", (Edit(Location(row, 1), Location(row, 5), "good"),))))
            elif line == "boom":
                out.append(_finding("AMP104", row, "created"))
        return out

    rejected = []
    source, fixed, remaining = fix_until_stable("bad1\nbad2\n", lint, rejected=rejected)
    assert source == "bad1\ngood\n"
    assert [d.fix.message for d in fixed] == ["fix2"]
    assert [(d.fix.message, why) for d, why in rejected] == [("fix1", "the fix would create AMP104 (created)")]
    assert [d.message for d in remaining] == ["bad one"]


def test_new_findings_ignore_moved_rows_and_numbers():
    before = [_finding("AMP101", 4, "clip at 4"), _finding("AMP101", 9, "clip at 9")]
    after = [_finding("AMP101", 5, "clip at 5"), _finding("AMP104", 7, "unscale twice")]
    assert [d.code for d in new_findings(before, after)] == ["AMP104"]


TWO_CLIPS = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(8, 4)).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model[0].parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(model[1].parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print("ran")
"""


def _run_python(path, cwd=None):
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_two_clips_of_one_optimizer_get_one_unscale_before_the_first(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TWO_CLIPS)
    r = CliRunner().invoke(main, [str(path), "--fix", "--unsafe-fixes", "--no-cache"], catch_exceptions=False)
    fixed = path.read_text()
    assert fixed.count("scaler.unscale_(optimizer)") == 1
    assert fixed.index("scaler.unscale_(optimizer)") < fixed.index("clip_grad_norm_(model[0]")
    assert r.exit_code == 0, r.output  # nothing left: no AMP104 of its own making
    run = _run_python(path)
    assert run.returncode == 0 and run.stdout.strip() == "ran", run.stderr


@pytest.mark.parametrize(
    "requirement, floor",
    [("torch>=1.12", (1, 12)), ("torch==2.1.*", (2, 1)), ("torch ~= 2.3.1", (2, 3)), ("torch[cuda]>2.2; python_version>'3.8'", (2, 2)),
     ("torch", None), ("torch<3", None), ("torchvision>=0.15", None), ("torch-geometric>=2.0", None)],
)
def test_floor_of_a_requirement(requirement, floor):
    assert floor_of(requirement) == floor


@pytest.mark.parametrize(
    "name, text",
    [
        ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["numpy", "torch>=1.12"]\n'),
        ("setup.cfg", "[options]\ninstall_requires =\n    numpy\n    torch>=1.12\n"),
        ("setup.py", "from setuptools import setup\nsetup(name='p', install_requires=['numpy', 'torch>=1.12'])\n"),
        ("requirements-train.txt", "# pinned\nnumpy\ntorch==1.12.*\n"),
    ],
)
def test_the_floor_is_inferred_from_each_kind_of_project_file(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert infer(tmp_path)[0] == (1, 12)


def _lint_cli(folder, *extra):
    old = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(main, ["t.py", "--no-cache", "--output-format", "json", *extra], catch_exceptions=False)
    finally:
        os.chdir(old)


def test_fixes_newer_than_the_projects_torch_are_not_offered(tmp_path):
    import json

    (tmp_path / "t.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\nd = torch.get_autocast_gpu_dtype()\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=1.12"]\n')
    found = json.loads(_lint_cli(tmp_path).output)
    assert [(d["code"], d["fix"]) for d in found] == [("AMP001", None), ("AMP001", None)]
    assert json.loads(_lint_cli(tmp_path, "--torch-version", "2.4").output)[0]["fix"] is not None  # the setting wins
    (tmp_path / "pyproject.toml").unlink()
    titles = [d["fix"]["message"] for d in json.loads(_lint_cli(tmp_path).output)]
    assert titles[0] == "Use `torch.amp.GradScaler` ('cuda') (needs torch >= 2.3)"
    assert titles[1].endswith("(needs torch >= 2.4)")


def test_a_function_local_import_made_unused_is_removed(tmp_path):
    source = textwrap.dedent(
        """\
        import argparse


        def build():
            from torch.cuda.amp import GradScaler
            return GradScaler(enabled=False)


        print(type(build()).__name__)
        """
    )
    path = tmp_path / "t.py"
    path.write_text(source)
    CliRunner().invoke(main, [str(path), "--fix", "--no-cache"], catch_exceptions=False)
    fixed = path.read_text()
    assert "torch.cuda.amp" not in fixed and fixed.startswith("import torch\nimport argparse\n")
    assert 'return torch.amp.GradScaler("cuda", enabled=False)' in fixed
    run = _run_python(path)
    assert run.returncode == 0 and run.stdout.strip() == "GradScaler", run.stderr


# ------------------------------------------------------------ every fix on the fixtures


_RUNNER = """
import json, runpy, sys, traceback
sys.argv = ["x"]
out = {}
for path in json.loads(sys.stdin.read()):
    try:
        runpy.run_path(path, run_name="amplint_fixture")
        out[path] = [0, []]
    except ModuleNotFoundError as exc:
        out[path] = None if exc.name and not exc.name.startswith("torch") else [1, [repr(exc)]]
    except BaseException as exc:  # noqa: BLE001
        out[path] = [1, [f"{type(exc).__name__}: {exc}"]]
print(json.dumps(out))
"""


def _import_outcomes(paths):
    """Run each script's top level (definitions, decorators, imports) under a non-main name, in
    one torch process: path name -> (0, []) or (1, [error]); None when it needs a package that
    is not installed here (it cannot run on this machine)."""
    import json

    r = subprocess.run(
        [sys.executable, "-c", _RUNNER], input=json.dumps([str(p) for p in paths]), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return {Path(k).name: ((v[0], tuple(v[1])) if v is not None else None) for k, v in json.loads(r.stdout.splitlines()[-1]).items()}


def test_every_fix_on_the_fixtures_keeps_the_code_parsing_quiet_and_runnable(tmp_path):
    import ast

    project = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, project, ignore=shutil.ignore_patterns("*.expected"))
    before = _import_outcomes(sorted(project.glob("*.py")))
    r = CliRunner().invoke(main, [str(project), "--fix", "--unsafe-fixes", "--no-cache", "--output-format", "json"], catch_exceptions=False)
    assert "fix not applied" not in r.output
    changed = [p for p in sorted(project.glob("*.py")) if p.read_text() != (FIXTURES / p.name).read_text()]
    assert len(changed) >= 8  # most fixtures have a fix
    for path in changed:
        ast.parse(path.read_text())
    after = _import_outcomes(changed)
    ran = [p.name for p in changed if after[p.name] is not None and before[p.name] is not None]
    assert len(ran) >= 4
    for name in ran:  # the fixed file runs at least as far as the original did
        assert after[name][0] == 0 or before[name][0] != 0, (name, after[name])
    # AMP503's fix turns a TypeError at import into a module that loads
    assert before["custom_ops.py"][0] != 0 and after["custom_ops.py"] == (0, ())


@pytest.mark.slow
def test_every_fix_on_real_code_is_kept_and_parses():
    """A drill package (benchmarks/corpus.py), when fetched: every fix amplint offers there
    (unsafe ones too) survives the re-lint check, and each fixed file parses."""
    import ast

    from amplint import lint_paths
    from amplint.fix.fixer import fix_files, fix_text

    folder = Path(os.environ.get("AMPLINT_CORPUS_DIR", Path.home() / ".cache" / "amplint-corpus")) / "diffusers-0.42.1"
    if not (folder / ".unpacked").exists():
        pytest.skip("diffusers is not fetched (python benchmarks/drill.py --packages diffusers fetches it)")
    config = Config(exclude=(".git", "__pycache__"), root=str(folder))
    result = lint_paths([str(folder)], config)
    outcome = fix_files(result.diagnostics, result.facts, config, unsafe=True, write=False)
    assert outcome.rejected == [] and outcome.errors == []
    assert outcome.changes  # diffusers 0.42.1 has a -1e9 fill that amplint rewrites
    for change in outcome.changes:
        old = Path(change.path).read_text(encoding="utf-8")
        new, fixed, _ = fix_text(old, change.path, config, result.facts, True)
        assert fixed and new != old
        ast.parse(new)


def test_a_plain_run_withdraws_the_fix_it_would_drop(tmp_path, monkeypatch):
    """What `[*]` and JSON offer is checked like --fix: the same stand-in linter as above, on
    a real file; the fix that would create a finding loses its `fix`, the other keeps it."""
    from amplint.fix import fixer

    path = tmp_path / "t.py"
    path.write_text("bad1\nbad2\n")

    def lint(source):
        out = []
        for row, line in enumerate(source.splitlines(), start=1):
            if line in ("bad1", "bad2"):
                new = "boom" if line == "bad1" else "good"
                fix = Fix(Applicability.SAFE, f"fix{line[-1]}", (Edit(Location(row, 1), Location(row, 5), new),))
                out.append(Diagnostic("AMP900", "x", line, Severity.ERROR, str(path), Location(row, 1), Location(row, 5), fix=fix))
            elif line == "boom":
                out.append(_finding("AMP104", row, "created"))
        return out

    monkeypatch.setattr(fixer, "_linter", lambda *a: lint)
    found = lint(path.read_text())
    warnings = fixer.withdraw_failing_fixes(found, None, Config())  # unsafe ones too (JSON shows them)
    assert [d.fix is None for d in found] == [True, False]
    assert warnings == [f"{path}:1:1: AMP900 fix withdrawn: the fix would create AMP104 (created)"]
