"""Isolation of the verifier: timeouts, crashes, the temporary directory, no leftovers.

The misbehaving experiments below are imported by the worker from this file
(`Runner(extra_sys_path=[tests/])`, `target="test_verify_isolation:hang"`).
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

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ experiments run by the worker


def ok(data, lab):
    return lab.confirmed("fine", {"cwd": os.getcwd(), "pid": os.getpid()}, method="snippet")


def uses_torch(data, lab):
    return lab.confirmed("fine", {"zeros": int(lab.torch.zeros(3).sum())}, method="snippet")


def hang(data, lab):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(data["pid_file"], "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
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
    return lab.confirmed("limits", {"as": rows.get("Max address space"), "core": rows.get("Max core file size")}, method="snippet")


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


def test_timeout_crash_and_restart(tmp_path, monkeypatch):
    """One runner through every failure mode (each restart costs a torch import)."""
    pid_file = tmp_path / "pids"
    tree = tmp_path / "tree"
    tree.mkdir()
    monkeypatch.chdir(tree)
    # lazy: restarts after a kill do not re-import torch (test speed); uses_torch imports it once
    with Runner(device="cpu", timeout=3, extra_sys_path=[HERE], lazy=True) as runner:
        assert runner.run("TEST", {}, target=f"{T}:uses_torch", timeout=180)["device"] == "cpu"
        if os.path.exists("/proc/self/limits"):
            ev = runner.run("TEST", {}, target=f"{T}:limits")["evidence"]
            assert ev["core"] == ["0", "0"]
        first = runner.run("TEST", {}, target=f"{T}:write_cwd")
        assert first["verdict"] == "confirmed"
        workdir = runner.workdir
        cwd = first["evidence"]["cwd"]
        assert workdir and os.path.realpath(cwd).startswith(os.path.realpath(workdir))
        assert os.path.exists(os.path.join(cwd, "scratch.txt")) and not os.listdir(tree)

        v = runner.run("TEST", {"pid_file": str(pid_file)}, target=f"{T}:hang")
        assert v["verdict"] == "inconclusive" and v["reason"].startswith("timeout"), v
        assert v["device"] == "cpu" and v["torch"]  # the parent still reports the environment
        worker, grandchild = map(int, pid_file.read_text().split())
        assert wait_dead(worker) and wait_dead(grandchild), "a killed experiment left processes behind"

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
        assert runner.restarts == 3  # timeout, exit, segfault; exceptions keep the worker
        pid = runner.pid
    assert pid is not None and wait_dead(pid)
    assert not os.path.exists(workdir), "the temporary directory was not removed"
    assert not os.listdir(tree), "the worker wrote into the caller's directory"


def test_worker_exits_when_amplint_dies(tmp_path):
    """A hung experiment must not outlive a killed parent (the worker watches its parent)."""
    pid_file = tmp_path / "pids"
    script = (
        "import sys; from amplint.verify import Runner\n"
        f"r = Runner(device='cpu', timeout=600, extra_sys_path=[{HERE!r}], lazy=True)\n"
        f"r.run('TEST', {{'pid_file': {str(pid_file)!r}}}, target='{T}:hang')\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    worker, grandchild = map(int, pid_file.read_text().split())
    parent.kill()
    parent.wait()
    assert wait_dead(worker, 15) and wait_dead(grandchild, 15), "the worker outlived amplint"

