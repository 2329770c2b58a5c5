"""Isolation of the verifier: timeouts, crashes, the temporary directory, no leftovers.

The misbehaving experiments below are imported by the worker from this file
(`Runner(extra_sys_path=[tests/])`, `target="test_verify_isolation:hang"`). Each runs
in its own forked process inside the sandbox; the worker outlives all of them.
(tests/test_verify_sandbox.py attacks the sandbox itself.)
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed", allow_module_level=True)

from amplint.verify import Runner  # noqa: E402
from tests.procs import kill_marked, mark_self, wait_gone, wait_seen  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ experiments run by the worker


def ok(data, lab):
    return lab.confirmed("fine", {"cwd": os.getcwd(), "pid": os.getpid()}, method="snippet")


def uses_torch(data, lab):
    return lab.confirmed("fine", {"zeros": int(lab.torch.zeros(3).sum())}, method="snippet")


def hang(data, lab):
    mark_self(data["marker"])  # a finding may start no process: the test finds it by its name
    time.sleep(600)


def exit_hard(data, lab):
    os._exit(7)


def segfault(data, lab):
    import ctypes

    ctypes.string_at(0)


def raises(data, lab):
    raise ValueError("bug in the experiment")


def not_a_verdict(data, lab):
    return 42


def noisy(data, lab):
    print("this goes to stderr, not into the protocol")
    sys.stdout.write('{"op": "result", "id": 999}\n')
    return lab.not_reproduced("quiet", {}, method="snippet")


def limits(data, lab):
    with open("/proc/self/limits") as fh:
        rows = {line[:26].strip(): line[26:].split()[:2] for line in fh}
    return lab.confirmed("limits", {"as": rows.get("Max address space"), "core": rows.get("Max core file size"),
                                    "cpu": rows.get("Max cpu time"), "fsize": rows.get("Max file size")}, method="snippet")


def hog(data, lab):
    block = bytearray(data["bytes"])  # MemoryError under the worker's RLIMIT_AS
    return lab.confirmed("allocated", {"len": len(block)}, method="snippet")


def write_cwd(data, lab):
    with open("scratch.txt", "w") as fh:
        fh.write("x")
    return lab.confirmed("wrote", {"cwd": os.getcwd()}, method="snippet")


# ------------------------------------------------------------------ helpers


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead
    except OSError:
        return False


def wait_dead(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


T = "test_verify_isolation"


# ------------------------------------------------------------------ tests


def test_timeouts_and_crashes_cost_one_verdict(tmp_path, monkeypatch):
    """One runner through every failure mode; the warm worker survives them all."""
    marker = f"amplint-test-hang-{os.getpid()}-{time.monotonic_ns()}"
    tree = tmp_path / "tree"
    tree.mkdir()
    monkeypatch.chdir(tree)
    # lazy: no torch import in the worker (test speed); uses_torch imports it in its own process
    try:
        with Runner(device="cpu", timeout=3, extra_sys_path=[HERE], lazy=True) as runner:
            assert runner.run("TEST", {}, target=f"{T}:uses_torch", timeout=180)["device"] == "cpu"
            worker = runner.pid
            if os.path.exists("/proc/self/limits"):
                ev = runner.run("TEST", {}, target=f"{T}:limits")["evidence"]
                assert ev["core"] == ["0", "0"]
                assert ev["cpu"][0] == ev["cpu"][1] == "4", ev  # ceil(timeout) + 1, soft = hard
                assert ev["fsize"][0] == ev["fsize"][1] != "unlimited", ev
            first = runner.run("TEST", {}, target=f"{T}:write_cwd")
            assert first["verdict"] == "confirmed"
            workdir = runner.workdir
            second = runner.run("TEST", {}, target=f"{T}:write_cwd")
            assert first["evidence"]["cwd"] != second["evidence"]["cwd"], "findings shared a temp folder"

            v = runner.run("TEST", {"marker": marker}, target=f"{T}:hang")
            assert v["verdict"] == "inconclusive" and v["reason"].startswith("timeout"), v
            assert v["device"] == "cpu" and v["torch"]  # the environment is still reported
            assert wait_gone(marker), "a killed experiment left processes behind"

            v = runner.run("TEST", {}, target=f"{T}:exit_hard")
            assert v["verdict"] == "error" and "exit code 7" in v["reason"], v

            v = runner.run("TEST", {}, target=f"{T}:segfault")
            assert v["verdict"] == "error" and "SIGSEGV" in v["reason"], v

            v = runner.run("TEST", {}, target=f"{T}:raises")
            assert v["verdict"] == "error" and "ValueError: bug in the experiment" in v["reason"], v

            v = runner.run("TEST", {}, target=f"{T}:not_a_verdict")
            assert v["verdict"] == "error", v

            v = runner.run("TEST", {}, target=f"{T}:noisy")
            assert v["verdict"] == "not-reproduced", v

            last = runner.run("TEST", {}, target=f"{T}:ok")
            assert last["verdict"] == "confirmed"
            assert runner.restarts == 0 and runner.pid == worker, "a finding's fault cost the warm worker"
            pid = runner.pid
    finally:
        kill_marked(marker)
    assert pid is not None and wait_dead(pid)
    assert not os.path.exists(workdir), "the temporary directory was not removed"
    assert not os.listdir(tree), "the worker wrote into the caller's directory"


def test_worker_exits_when_amplint_dies(tmp_path):
    """A hung experiment must not outlive a killed parent (the sandbox dies with it)."""
    marker = f"amplint-test-orphan-{os.getpid()}-{time.monotonic_ns()}"
    script = (
        "import sys; from amplint.verify import Runner\n"
        f"r = Runner(device='cpu', timeout=600, extra_sys_path=[{HERE!r}], lazy=True)\n"
        f"r.run('TEST', {{'marker': {marker!r}}}, target='{T}:hang')\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.path.dirname(HERE))
    try:
        assert wait_seen(marker), "the hanging experiment never started"
        parent.kill()
        parent.wait()
        assert wait_gone(marker, 15), "the experiment's child outlived amplint"
    finally:
        kill_marked(marker)
