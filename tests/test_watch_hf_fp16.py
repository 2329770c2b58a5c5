"""The Hugging Face Trainer's fp16 GradScaler path on CPU (tests/data/watch/train_hf_fp16.py: the
scaler and autocast accelerate builds on CUDA, switched on for the CPU device), under `amplint run`:
skipped steps and the loss scale as HF itself sees them, and a faithful replay of a `model(**batch)`
step (a tiny BERT from a config: keyword arguments, a ModelOutput, accelerate's forward wrapper)."""
from __future__ import annotations

import os

import pytest

from .watch_helpers import DATA, amplint, events, of_type, watched

SCRIPT = os.path.join(DATA, "train_hf_fp16.py")


def need(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"SKIPPED LOUDLY: {module} is not installed (pip install -e '.[watch-test]' 'torch==2.13.*')")


def _run(tmp_path, optim):
    need("transformers")
    need("accelerate")
    report = str(tmp_path / "rep")
    env = dict(os.environ, HF_OUT=str(tmp_path / "out"), HF_OPTIM=optim)
    run = watched(report, SCRIPT, cwd=str(tmp_path), env=env, options=("--no-html",))
    assert run.returncode == 0, run.stderr[-3000:]
    hf = [line.split() for line in run.stdout.splitlines() if line.startswith("hf ")]
    fused = [line.split()[2] for line in run.stdout.splitlines() if line.startswith("optimizer ")]
    return report, [(int(s), flag == "True", float(scale)) for _, s, flag, scale in hf], fused


@pytest.mark.parametrize("optim,fused", [("adamw_torch", "None"), ("adamw_torch_fused", "True")])
def test_skipped_steps_and_loss_scale_as_hf_sees_them(tmp_path, optim, fused):
    report, hf, fused_seen = _run(tmp_path, optim)
    assert fused_seen == [fused]
    evs = events(report)
    assert evs[0]["autocast_dtype"] == "float16" and evs[0]["autocast_device"] == "cpu"
    steps = of_type(evs, "step")
    assert [s["step"] for s in steps] == [h[0] for h in hf] and len(steps) == 12
    assert [s["loss_scale"] for s in steps] == [h[2] for h in hf]  # the scale after each update, as HF reads it
    before = [1024.0] + [h[2] for h in hf[:-1]]
    fell = [after < b for b, (_, _, after) in zip(before, hf)]
    assert [s["skipped"] for s in steps] == fell  # growth_interval 2000: the scale falls exactly on skipped steps
    assert 5 <= sum(fell) < 12
    if fused == "None":
        assert [s["skipped"] for s in steps] == [h[1] for h in hf]  # accelerate's optimizer_step_was_skipped agrees
    assert all(s["grad_norm"] is None or s["grad_norm"] > 0 for s in steps)
    assert [f["code"] for f in of_type(evs, "finding")] == ["AMP701"]


def test_replay_of_a_model_called_with_keyword_arguments(tmp_path):
    report, _, _ = _run(tmp_path, "adamw_torch")
    [incident] = of_type(events(report), "incident")
    import torch

    import io

    snap = torch.load(incident["path"], map_location="cpu", weights_only=True)  # data only
    snap.update(torch.load(io.BytesIO(snap.pop("objects")), map_location="cpu", weights_only=False))  # our own run's pickle
    assert snap["inputs"] == () and {"input_ids", "attention_mask", "labels"} <= set(snap["kwargs"])
    assert snap["autocast"] == {"enabled": True, "device_type": "cpu", "dtype": "float16"}  # entered inside forward's wrapper
    assert "forward" not in snap["model"].__dict__  # accelerate's autocast wrapper is off the saved copy
    res = amplint("replay", incident["path"], "--device", "cpu", cwd=str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == "  float16 autocast: first non-finite: gradient of `classifier` (Linear)"
    assert lines[2] == "  float32: all outputs and gradients finite"
