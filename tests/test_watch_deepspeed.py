"""`amplint run` reads a DeepSpeed engine's own loss scaler (issue 23 item 4).

DeepSpeed does not run without CUDA, so these runs use a STAND-IN package
(tests/data/watch/deepspeed_standin/: not DeepSpeed, written for the test) that has only what the guard
reads, under DeepSpeed's names: `DeepSpeedEngine._take_model_step` once per optimizer step,
`skipped_steps`, `optimizer.loss_scaler.cur_scale`, and the scaler's exception at its minimum scale.
What this shows is the guard's reading of those names; that DeepSpeed 0.19 has them is from its source
(deepspeed/runtime/engine.py, deepspeed/runtime/fp16/loss_scaler.py), not from a run."""
from __future__ import annotations

import os

from .watch_helpers import DATA, events, line_of, of_type, watched

SCRIPT = os.path.join(DATA, "train_deepspeed_standin.py")


def _steps(evs):
    return [(s["loss_scale_before"], s["loss_scale"], s["skipped"]) for s in of_type(evs, "step")]


def test_the_engines_scale_and_skipped_steps(tmp_path):
    report = str(tmp_path / "rep")
    run = watched(report, SCRIPT, "spikes", "8", cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "done 8 2 4.0"  # the stand-in's own counters: 8 steps, 2 skipped, scale 4
    evs = events(report)
    # one record per optimizer step (2 micro-batches each), none from the inner SGD's own step hook
    assert _steps(evs) == [(16.0, 16.0, False)] * 2 + [(16.0, 8.0, True), (8.0, 4.0, True)] + [(4.0, 4.0, False)] * 4
    [scaler] = of_type(evs, "scaler")
    assert scaler["class"] == "DynamicLossScaler" and scaler["module"] == "deepspeed.runtime.engine"
    assert (scaler["filename"], scaler["line"]) == (SCRIPT, line_of(SCRIPT, "engine.step()"))
    assert not of_type(evs, "finding")
    assert "amplint run: 8 optimizer steps, 2 skipped, loss scale 16 -> 4" in run.stderr


def test_the_minimum_scale_abort_is_amp701(tmp_path):
    report = str(tmp_path / "rep")
    run = watched(report, SCRIPT, "abort", "8", cwd=str(tmp_path))
    assert run.returncode == 1 and "Current loss scale already at minimum" in run.stderr
    evs = events(report)
    assert _steps(evs)[2:] == [(16.0, 8.0, True), (8.0, 4.0, True), (4.0, 2.0, True), (2.0, 1.0, True), (1.0, 1.0, True)]
    [found] = of_type(evs, "finding")
    assert found["code"] == "AMP701" and found["deepspeed_abort"] is True
    assert found["message"] == "DeepSpeed's loss scale reached its minimum (1) and the engine aborted the run"
    assert (found["filename"], found["line"], found["step"], found["since_step"]) == (SCRIPT, line_of(SCRIPT, "engine.step()"), 7, 3)
