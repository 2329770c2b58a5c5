"""`amplint --verify` from the command line: flags, config, output, and the user's tree untouched."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from amplint import Diagnostic, Location, Severity
from amplint.cli import main
from amplint.report import renderer

TRAIN = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
)
CLEAN = "import torch\nprint(torch.ones(1))\n"


def _amplint(args, prelude="", **kwargs):
    """Run the CLI in a fresh interpreter (exit codes as a user sees them)."""
    code = f"import sys\n{prelude}\nfrom amplint.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, **kwargs)


def test_verify_without_torch_exits_2_with_hint(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    proc = _amplint(["--verify", str(tmp_path)], prelude="import amplint.verify as v; v.torch_available = lambda: False")
    assert proc.returncode == 2, proc
    assert "pip install 'amplint[verify]'" in proc.stderr
    assert proc.stdout == ""  # fails before linting


@pytest.mark.parametrize(
    "args,message",
    [(["--device", "tpu"], "use auto, cpu, cuda or cuda:N"), (["--verify-timeout", "0"], "positive")],
)
def test_bad_verify_flags_exit_2(tmp_path, args, message):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    (tmp_path / "train.py").write_text(TRAIN)
    proc = _amplint(["--verify", *args, str(tmp_path)])
    assert proc.returncode == 2 and message in proc.stderr, proc


def test_verify_with_no_findings_starts_no_worker(tmp_path, monkeypatch):
    import amplint.verify.runner as runner

    def boom(*a, **k):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(runner.Runner, "start", boom)
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    (tmp_path / "ok.py").write_text(CLEAN)
    result = CliRunner().invoke(main, ["--verify", "--device", "cpu", str(tmp_path)])
    assert "All checks passed!" in result.output, result.output


def test_linter_never_imports_torch():
    code = "import sys, amplint.cli, amplint.verify, amplint.verify.runner; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_text_report_shows_one_verdict_line():
    d = Diagnostic(
        code="AMP101",
        name="clip-grad-before-unscale",
        message="gradient clipping on scaled gradients",
        severity=Severity.ERROR,
        filename="train.py",
        location=Location(8, 5),
        end_location=Location(8, 60),
        verification={
            "verdict": "confirmed",
            "method": "snippet",
            "summary": "clip_grad_norm_ saw norm 58393 = 65536x the true 0.891",
            "device": "cpu",
            "torch": "2.13.0",
        },
    )
    text = renderer("text")([d])
    lines = text.splitlines()
    assert lines[1] == "    verify: confirmed [snippet] clip_grad_norm_ saw norm 58393 = 65536x the true 0.891 (cpu, torch 2.13.0)"
    d.verification = {"verdict": "inconclusive", "reason": "timeout after 60 s", "method": "experiment", "device": "cpu", "torch": "2.13.0"}
    assert renderer("text")([d]).splitlines()[1].startswith("    verify: inconclusive (timeout after 60 s) [experiment]")


def _snapshot(root):
    """Every file and folder under root, except the linter's own cache (ruff keeps
    one in the project too; the claim here is about what the verifier writes)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".amplint_cache"]
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    out[path] = (hashlib.sha256(fh.read()).hexdigest(), os.stat(path).st_mtime_ns)
            else:
                out[path] = "dir"
    return out


def test_verify_end_to_end_json_and_tree_untouched(tmp_path):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    tree = tmp_path / "project"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "train.py").write_text(TRAIN)
    (tree / "pkg" / "ok.py").write_text(CLEAN)
    (tree / "pyproject.toml").write_text('[tool.amplint.verify]\ndevice = "cpu"\ntimeout = 120\n')
    before = _snapshot(tree)
    # --no-cache: the linter's own cache lives beside pyproject.toml; this test is about the verifier
    proc = _amplint(["--verify", "--no-cache", "--output-format", "json", str(tree)], cwd=str(tree))
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)
    assert [f["code"] for f in findings] == ["AMP101"]
    v = findings[0]["verification"]
    assert v["verdict"] == "confirmed" and v["method"] == "snippet"
    assert v["device"] == "cpu"  # from [tool.amplint.verify]
    assert v["evidence"]["ratio"] == 65536.0 and v["torch"] and v["seed"] == 0 and "duration_s" in v
    assert _snapshot(tree) == before, "amplint --verify changed the linted tree"


def _verified_diagnostic() -> Diagnostic:
    return Diagnostic(
        code="AMP101",
        name="clip-grad-before-unscale",
        message="gradient clipping on scaled gradients",
        severity=Severity.ERROR,
        filename="train.py",
        location=Location(8, 5),
        end_location=Location(8, 60),
        verification={"verdict": "confirmed", "method": "snippet", "evidence": {"ratio": 65536.0, "x": "inf"}, "device": "cpu"},
    )


def test_json_and_sarif_carry_the_verification():
    d = _verified_diagnostic()
    assert json.loads(renderer("json")([d]))[0]["verification"]["evidence"]["ratio"] == 65536.0
    sarif = json.loads(renderer("sarif")([d]))
    assert sarif["runs"][0]["results"][0]["properties"]["verification"]["verdict"] == "confirmed"
    from tests.test_report_formats import _validate

    _validate(sarif)


def test_verify_diagnostics_runs_identical_findings_once(monkeypatch):
    import amplint.verify as verify

    calls = []

    class FakeRunner:
        def start(self):
            return {}

        def run(self, code, data):
            calls.append((code, dict(data)))
            return {"verdict": "confirmed", "n": len(calls)}

        def close(self):
            pass

    monkeypatch.setattr(verify, "torch_available", lambda: True)
    a, b, c = (_verified_diagnostic() for _ in range(3))
    for d, literal in ((a, 1.0), (b, 1.0), (c, 2.0)):
        d.verification, d.data = None, {"threshold": literal}
    other = _verified_diagnostic()
    other.code, other.verification = "AMP999", None  # no experiment: left alone
    assert verify.verify_diagnostics([a, b, c, other], runner=FakeRunner()) == 3
    assert len(calls) == 2 and a.verification == b.verification and c.verification["n"] == 2
    assert other.verification is None


@pytest.mark.parametrize("spec,ok", [("auto", True), ("CPU", True), ("cuda", True), ("cuda:1", True), ("cuda:x", False), ("mps", False)])
def test_validate_device(spec, ok):
    from amplint.verify import VerifyError, validate_device

    if ok:
        assert validate_device(spec) == spec.lower()
    else:
        with pytest.raises(VerifyError):
            validate_device(spec)


def test_experiments_ship_in_the_wheel():
    """setuptools lists packages explicitly: the experiments subpackage must be among them."""
    import sys as _sys

    if _sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
        packages = tomllib.load(fh)["tool"]["setuptools"]["packages"]
    assert "amplint.verify.experiments" in packages
