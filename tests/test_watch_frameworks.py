"""The guard in the ways people train: `amplint.watch(...)` in code, Lightning (under `amplint run`
and as a callback), the Hugging Face Trainer (both ways), torchrun with two CPU ranks, and
`amplint replay` on the incident a collapsing run saved."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from .watch_helpers import DATA, TRAIN, amplint, events, line_of, of_type, torchrun_watched, watched


def need(module: str) -> None:
    """Skip (loudly, with the install line) only when the framework itself is missing."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"SKIPPED LOUDLY: {module} is not installed (pip install -e '.[watch-test]' 'torch==2.13.*')")


CONTEXT = '''
import sys, torch
from torch import nn
import amplint
sys.path.insert(0, {data!r})
from train_cpu import main

def run(watch):
    if watch:
        with amplint.watch({report!r}):
            main("forward_overflow", 14)
    else:
        main("forward_overflow", 14)
run(False)
run(True)
print("restored", torch.amp.GradScaler.step.__qualname__, torch.nn.Module.__init__.__qualname__)
run(False)
'''


def test_context_manager_records_and_restores(tmp_path):
    report = str(tmp_path / "rep")
    script = tmp_path / "ctx.py"
    script.write_text(CONTEXT.format(data=DATA, report=report))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    runs = out.stdout.split("done\n")
    assert runs[0] == runs[1] and runs[2].startswith("restored GradScaler.step Module.__init__\n")
    assert runs[2].split("\n", 1)[1] == runs[0]  # bit for bit, watched or not, before and after
    evs = events(report)
    assert len(of_type(evs, "step")) == 14 and sum(s["skipped"] for s in of_type(evs, "step")) == 4
    assert "amplint run: 14 optimizer steps, 4 skipped" in out.stderr
    assert os.path.isfile(os.path.join(report, "report.html"))


def _lightning_checks(evs, stdout):
    steps = of_type(evs, "step")
    assert len(steps) == 30 and [s["step"] for s in steps if s["skipped"]] == list(range(11, 31))
    assert stdout.rstrip().endswith("done")
    [collapse] = [f for f in of_type(evs, "finding") if f["code"] == "AMP701"]
    assert "forward output of `net.0` (Linear)" in collapse["message"]
    assert not [f for f in of_type(evs, "finding") if f["code"] != "AMP701"]  # Lightning's own AMP handling is correct


def test_lightning_under_amplint_run(tmp_path):
    need("lightning")
    script = os.path.join(DATA, "train_lightning.py")
    report = str(tmp_path / "rep")
    run = watched(report, script, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    evs = events(report)
    _lightning_checks(evs, run.stdout)
    [collapse] = [f for f in of_type(evs, "finding") if f["code"] == "AMP701"]
    assert (collapse["filename"], collapse["line"]) == (script, line_of(script, "self.net = nn.Sequential("))
    assert of_type(evs, "incident")


def test_lightning_callback(tmp_path):
    need("lightning")
    report = str(tmp_path / "rep")
    env = dict(os.environ, REPORT_DIR=report)
    out = subprocess.run([sys.executable, os.path.join(DATA, "train_lightning.py"), "callback"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    evs = events(report)
    _lightning_checks(evs, out.stdout)
    assert "amplint run: 30 optimizer steps, 20 skipped" in out.stderr
    # the model was built before fit: its modules point at the LightningModule's class
    script = os.path.join(DATA, "train_lightning.py")
    [collapse] = [f for f in of_type(evs, "finding") if f["code"] == "AMP701"]
    assert (collapse["filename"], collapse["line"]) == (script, line_of(script, "class Model(pl.LightningModule):"))


def _hf_checks(evs):
    steps = of_type(evs, "step")
    assert len(steps) == 8 and not any(s["skipped"] for s in steps)
    assert all(s["loss_scale"] is None and s["grad_norm"] > 0 for s in steps)
    assert evs[0]["autocast_dtype"] == "bfloat16"
    assert not of_type(evs, "finding")  # bf16 without a scaler is correct


def test_hf_trainer_under_amplint_run(tmp_path):
    need("transformers")
    need("accelerate")
    report = str(tmp_path / "rep")
    env = dict(os.environ, HF_OUT=str(tmp_path / "out"))
    run = watched(report, os.path.join(DATA, "train_hf.py"), cwd=str(tmp_path), env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    _hf_checks(events(report))


def test_hf_trainer_callback(tmp_path):
    need("transformers")
    need("accelerate")
    report = str(tmp_path / "rep")
    env = dict(os.environ, HF_OUT=str(tmp_path / "out"), REPORT_DIR=report)
    out = subprocess.run([sys.executable, os.path.join(DATA, "train_hf.py"), "callback"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    _hf_checks(events(report))


def test_torchrun_two_ranks(tmp_path):
    report = str(tmp_path / "rep")
    run = torchrun_watched(report, os.path.join(DATA, "train_ddp.py"), cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(run.stdout.split("\n")) == ["", "done 0", "done 1"]
    evs = events(report)
    for rank in (0, 1):
        assert len([s for s in of_type(evs, "step") if s["rank"] == rank]) == 6
        assert len([h for h in of_type(evs, "header") if h["rank"] == rank]) == 1
    assert "(rank 1): 6 optimizer steps" in run.stderr


@pytest.mark.parametrize("mode,module,how", [("forward_overflow", "inp", "forward output"), ("collapse", "out", "gradient")])
def test_replay_names_the_module_that_overflows_in_fp16_only(tmp_path, mode, module, how):
    report = str(tmp_path / "rep")
    run = watched(report, TRAIN, mode, "14", cwd=str(tmp_path))
    assert run.returncode == 0
    [incident] = of_type(events(report), "incident")
    assert incident["step"] == 12 and incident["path"] == os.path.join(report, "incidents", "step12.pt")
    res = amplint("replay", incident["path"], "--device", "cpu", cwd=str(tmp_path))
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == f"  float16 autocast: first non-finite: {how} of `{module}` (Linear)"
    assert lines[2] == "  float32: all outputs and gradients finite"
    assert lines[3] == f"{how} of `{module}` (Linear) overflows in float16 and not in float32"


def test_replay_rejects_what_is_not_a_snapshot(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"not a pickle")
    res = amplint("replay", str(tmp_path / "x.pt"), cwd=str(tmp_path))
    assert res.returncode == 2 and res.stderr.startswith("amplint replay: error: cannot load")


# ------------------------------------------------------------------ incidents are data (issue 24 item 7)


class _Payload:
    """Unpickled, it runs a shell command (as a hostile incident's pickle does)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_an_incident_written_by_amplint_run_is_data_only(tmp_path):
    import torch

    report = str(tmp_path / "rep")
    assert watched(report, TRAIN, "collapse", "14", cwd=str(tmp_path)).returncode == 0
    [incident] = of_type(events(report), "incident")
    snap = torch.load(incident["path"], weights_only=True)  # no code of the file can run
    assert snap["format"] == 2 and isinstance(snap["objects"], bytes) and "model" not in snap


def test_replay_never_unpickles_a_hostile_file_on_the_host(tmp_path):
    import torch

    marker = tmp_path / "pwned"
    hostile = tmp_path / "step12.pt"
    torch.save({"format": 1, "model": _Payload(f"echo x >> {marker}")}, str(hostile))
    torch.load(str(hostile), weights_only=False)  # the attack is real: a plain load runs it
    assert marker.exists()
    marker.unlink()
    res = amplint("replay", str(hostile), "--device", "cpu", cwd=str(tmp_path))
    assert res.returncode == 2 and res.stdout == "", res
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith(f"amplint replay: error: cannot load {hostile}: not a data-only amplint incident"), res.stderr
    assert not marker.exists(), "replay ran the incident's code on the host"


def test_replay_opens_the_model_pickle_only_inside_the_sandbox(tmp_path):
    """A data-only incident whose model pickle is hostile: it runs, confined, and nothing gets out."""
    import io

    import torch

    marker = tmp_path / "pwned"
    blob = io.BytesIO()
    torch.save({"model": _Payload(f"echo $AMPLINT_TEST_SECRET >> {marker}"), "inputs": (), "kwargs": {}}, blob)
    hostile = tmp_path / "step3.pt"
    torch.save({"format": 2, "step": 3, "autocast": {"enabled": False}, "objects": blob.getvalue()}, str(hostile))
    env = dict(os.environ, AMPLINT_TEST_SECRET="s3cret-replay")
    res = amplint("replay", str(hostile), "--device", "cpu", cwd=str(tmp_path), env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res
    assert "amplint replay: sandbox: bubblewrap" in res.stderr and "seccomp" in res.stderr, res.stderr
    assert not marker.exists(), "the incident's pickle reached the host"
    assert "s3cret-replay" not in res.stdout + res.stderr
