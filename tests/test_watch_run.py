"""`amplint run` on small real CPU training scripts (fp16 autocast + GradScaler("cpu")):
what it records, the findings it reports, and that it changes nothing about the run."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .watch_helpers import TRAIN, amplint, events, line_of, of_type, watched

_RUNS = {}


def run_mode(tmp_path_factory, mode: str, steps: int = 30):
    """(plain run, watched run, report dir) for a train_cpu.py mode, computed once per session."""
    if (mode, steps) not in _RUNS:
        tmp = tmp_path_factory.mktemp(mode)
        plain = subprocess.run([sys.executable, TRAIN, mode, str(steps)], capture_output=True, text=True, cwd=tmp, timeout=600)
        report = str(tmp / "report")
        run = watched(report, TRAIN, mode, str(steps), cwd=str(tmp))
        _RUNS[mode, steps] = (plain, run, report)
    return _RUNS[mode, steps]


@pytest.mark.parametrize("mode", ["healthy", "forward_overflow"])
def test_same_output_and_numbers_with_and_without_the_guard(tmp_path_factory, mode):
    plain, run, _ = run_mode(tmp_path_factory, mode)
    assert plain.returncode == run.returncode == 0, run.stderr
    assert "done" in plain.stdout
    assert run.stdout == plain.stdout  # every loss printed bit for bit (float.hex)
    assert run.stderr.startswith(plain.stderr)


def test_exit_code_stdout_and_stderr_pass_through(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('out line')\nsys.stderr.write('err line\\n')\nsys.exit(3)\n")
    run = watched(str(tmp_path / "rep"), str(script), cwd=str(tmp_path))
    assert run.returncode == 3
    assert run.stdout == "out line\n"
    assert run.stderr.startswith("err line\n")
    assert "no optimizer step was seen" in run.stderr


def test_a_crash_keeps_its_exit_code_and_is_explained(tmp_path_factory):
    plain, run, report = run_mode(tmp_path_factory, "noupdate", 4)
    assert plain.returncode == run.returncode == 1
    assert "step() has already been called since the last update()" in run.stderr
    found = of_type(events(report), "finding")
    assert [(f["code"], f["line"]) for f in found] == [("AMP103", line_of(TRAIN, 'if mode == "noupdate":') + 1)]


def test_step_records(tmp_path_factory):
    plain, _, report = run_mode(tmp_path_factory, "healthy")
    evs = events(report)
    header = evs[0]
    assert header["type"] == "header" and header["torch"].startswith("2.") and header["device"] == "cpu"
    assert header["autocast_dtype"] == "float16" and header["autocast_device"] == "cpu" and "cuda" in header
    steps = of_type(evs, "step")
    assert [s["step"] for s in steps] == list(range(1, 31))
    assert all(s["loss_scale"] == 1024.0 and s["skipped"] is False for s in steps)
    assert all(s["step_time_s"] > 0 for s in steps[1:]) and steps[0]["step_time_s"] is None
    assert all(s["peak_mem_bytes"] > 0 for s in steps)
    # the recorded norm is the unscaled one: what clip_grad_norm_ returned after unscale_
    norms = [float.fromhex(line.split()[2]) for line in plain.stdout.splitlines() if line.startswith("norm ")]
    assert len(norms) == 30
    for s, n in zip(steps, norms):
        assert s["grad_norm"] == pytest.approx(n, rel=1e-5)
    assert not of_type(evs, "finding")


def test_settling_scaler_is_not_a_collapse(tmp_path_factory):
    _, run, report = run_mode(tmp_path_factory, "settling", 60)
    steps = of_type(events(report), "step")
    assert 0 < sum(s["skipped"] for s in steps) < 8  # the default 65536 start overflows a few times
    assert not of_type(events(report), "finding"), run.stderr


def test_collapse_names_the_step_the_scale_and_the_forward_source(tmp_path_factory):
    _, run, report = run_mode(tmp_path_factory, "forward_overflow")
    evs = events(report)
    steps = of_type(evs, "step")
    assert [s["step"] for s in steps if s["skipped"]] == list(range(11, 31))
    scales = [s["loss_scale"] for s in steps]
    assert all(b == a / 2 for a, b in zip(scales[9:], scales[10:]))
    # each step records the scale it ran with (AMP701's and the summary's start) and the one update() left
    assert [s["loss_scale_before"] for s in steps] == [1024.0] + scales[:-1]
    assert "30 optimizer steps, 20 skipped, loss scale 1024 -> 0.000976562" in run.stderr  # 1024 / 2**20, as %g writes it
    sources = of_type(evs, "nonfinite")
    forward = [s for s in sources if s["kind"] == "forward output"]
    build_inp = line_of(TRAIN, "self.inp = nn.Linear(16, 64)")
    assert forward and forward[0]["module"] == "inp" and forward[0]["class"] == "Linear"
    assert (forward[0]["filename"], forward[0]["line"]) == (TRAIN, build_inp)
    [collapse] = [f for f in of_type(evs, "finding") if f["code"] == "AMP701"]
    assert (collapse["filename"], collapse["line"]) == (TRAIN, build_inp)
    assert "8 consecutive steps since step 11" in collapse["message"] and "(1024 -> 4)" in collapse["message"]
    assert "forward output of `inp` (Linear)" in collapse["message"] and collapse["step"] == 18
    assert f"{TRAIN}:{build_inp}: AMP701 " in run.stderr


def test_gradient_overflow_source(tmp_path_factory):
    _, _, report = run_mode(tmp_path_factory, "collapse")
    evs = events(report)
    [source] = of_type(evs, "nonfinite")
    assert (source["kind"], source["module"], source["step"]) == ("gradient", "out", 11)
    assert source["line"] == line_of(TRAIN, "self.out = nn.Linear(64, 1)")
    assert [f["code"] for f in of_type(evs, "finding")] == ["AMP701"]


# (mode, code, text starting the block, lines below it that the finding points at)
SCRIPT_FINDINGS = [
    ("clip_scaled", "AMP101", 'if mode == "clip_scaled":', 1),
    ("bypass", "AMP102", "opt.step()  # bypasses the scaler", 0),
    ("noscaler", "AMP105", 'if mode == "noscaler":', 1),
    ("half", "AMP201", "            opt.step()\n            opt.zero_grad()\n            print(step, loss.float()", 0),
    ("accumulate", "AMP104", "scaler.unscale_(opt)  # on the first micro-batch", 0),
]


def _line_of_block(path, block):
    text = open(path, encoding="utf-8").read()
    assert text.count(block) == 1, block
    return text[: text.index(block)].count("\n") + 1


@pytest.mark.parametrize("mode,code,where,below", SCRIPT_FINDINGS)
def test_static_codes_seen_happening(tmp_path_factory, mode, code, where, below):
    _, run, report = run_mode(tmp_path_factory, mode, 6)
    found = [f for f in of_type(events(report), "finding") if f["code"] != "AMP701"]
    line = _line_of_block(TRAIN, where) + below
    assert [(f["code"], f["filename"], f["line"]) for f in found] == [(code, TRAIN, line)], found
    assert f"{TRAIN}:{line}: {code} " in run.stderr


def test_fp16_backward_without_scaler_reports_the_flushed_share(tmp_path_factory):
    _, _, report = run_mode(tmp_path_factory, "noscaler", 6)
    [f] = of_type(events(report), "finding")
    assert 0 <= f["flushed_share"] < 1 and f"{100 * f['flushed_share']:.1f}% of the gradient values" in f["message"]


def test_checkpoint_findings_point_at_the_saves(tmp_path_factory):
    _, _, report = run_mode(tmp_path_factory, "save", 4)
    findings = of_type(events(report), "finding")
    found = {f["code"]: f["line"] for f in findings}
    assert found == {
        "AMP402": line_of(TRAIN, 'torch.save({"optimizer": opt.state_dict()}, "optimizer.pt")'),
        "AMP401": line_of(TRAIN, 'torch.save(model.half().state_dict(), "model_fp16.pt")'),
    }
    # saved after the 4 steps of the loop: "after step 4", not a step 5 the run never had
    assert {f["code"]: (f["step"], f.get("after")) for f in findings} == {"AMP402": (4, True), "AMP401": (4, True)}


def test_checkpoint_with_scaler_state_and_an_fp16_export_beside_fp32_is_fine(tmp_path):
    script = tmp_path / "ckpt.py"
    script.write_text(
        "import torch\nfrom torch import nn\nm = nn.Linear(4, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cpu')\nwith torch.autocast('cpu', dtype=torch.float16):\n    loss = m(torch.randn(2, 4)).float().sum()\n"
        "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"
        "torch.save({'model': m.state_dict(), 'optimizer': opt.state_dict()}, 'a.pt')\n"
        "torch.save({'scaler': scaler.state_dict()}, 'b.pt')\n"
        "torch.save(m.half().state_dict(), 'export_fp16.pt')\n"
    )
    run = watched(str(tmp_path / "rep"), str(script), cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert not of_type(events(str(tmp_path / "rep")), "finding")


def test_bf16_without_scaler_is_silent(tmp_path):
    script = tmp_path / "bf16.py"
    script.write_text(
        "import torch\nfrom torch import nn\nm = nn.Linear(4, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n    with torch.autocast('cpu', dtype=torch.bfloat16):\n        loss = m(torch.randn(2, 4)).float().sum()\n"
        "    loss.backward()\n    opt.step()\n    opt.zero_grad()\n"
    )
    run = watched(str(tmp_path / "rep"), str(script), cwd=str(tmp_path))
    evs = events(str(tmp_path / "rep"))
    assert run.returncode == 0 and len(of_type(evs, "step")) == 3 and not of_type(evs, "finding")
    assert evs[0]["autocast_dtype"] == "bfloat16"


def test_module_form_and_bounded_events(tmp_path):
    (tmp_path / "pkgtrain").mkdir()
    (tmp_path / "pkgtrain" / "__init__.py").write_text("")
    (tmp_path / "pkgtrain" / "__main__.py").write_text(open(TRAIN, encoding="utf-8").read())
    report = str(tmp_path / "rep")
    run = watched(report, "-m", "pkgtrain", "healthy", "200", cwd=str(tmp_path), options=("--max-events-mb", "0.002"))
    assert run.returncode == 0 and "done" in run.stdout
    assert os.path.getsize(os.path.join(report, "events.jsonl")) <= 0.002 * 1024 * 1024 + 200
    assert of_type(events(report), "truncated")


def test_incident_is_bounded(tmp_path):
    report = str(tmp_path / "rep")
    run = watched(report, TRAIN, "forward_overflow", "14", cwd=str(tmp_path), options=("--incident-max-mb", "0.001"))
    assert run.returncode == 0
    [incident] = of_type(events(report), "incident")
    assert incident["path"] is None and "over the" in incident["message"]
    assert not os.path.exists(os.path.join(report, "incidents"))


def test_run_without_a_command_is_a_usage_error(tmp_path):
    res = amplint("run", "--report", str(tmp_path / "r"), cwd=str(tmp_path))
    assert res.returncode == 2 and "no command to run" in res.stderr


def test_an_existing_sitecustomize_still_runs(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    script = tmp_path / "prog.py"
    script.write_text("import os, sys\nprint(os.environ.get('USER_SITECUSTOMIZE'), 'torch' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    run = watched(str(tmp_path / "rep"), str(script), cwd=str(tmp_path), env=env)
    assert run.returncode == 0 and run.stdout == "ran False\n", run.stderr  # and torch is not imported for it
