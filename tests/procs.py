"""Finding processes from the host side, whatever PID namespace they live in.

A sandboxed experiment cannot tell the test its PIDs (they are namespace-local) or
write a file outside its temp folder, so a misbehaving experiment names itself with a
marker (`mark_self`: its process name, the last 15 characters of the marker; a finding
may start no process), and the tests look for that marker in /proc: in command lines
(the host's own sleepers) and in process names.
"""
from __future__ import annotations

import os
import sys
import time
from typing import List


def sleeper(marker: str) -> List[str]:
    """argv of a child that sleeps for ten minutes, findable by `marker`."""
    return [sys.executable, "-c", "import time; time.sleep(600)", marker]


def mark_self(marker: str) -> None:
    """Name this process (its main thread) after `marker`, as `marked` finds it (prctl: no fork)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(comm(marker).encode()), 0, 0, 0)  # PR_SET_NAME


def comm(marker: str) -> str:
    """The process name `mark_self` gives: the kernel keeps 15 bytes."""
    return marker[-15:]


def marked(marker: str) -> List[int]:
    """Live (non-zombie) processes whose command line contains `marker`, or named after it."""
    out = []
    needle = marker.encode()
    name_needle = comm(marker).encode() + b"\n"
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if needle not in fh.read():
                    with open(f"/proc/{name}/comm", "rb") as fc:
                        if fc.read() != name_needle:
                            continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        out.append(int(name))
    return out


def wait_gone(marker: str, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not marked(marker):
            return True
        time.sleep(0.05)
    return False


def wait_seen(marker: str, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if marked(marker):
            return True
        time.sleep(0.05)
    return False


def kill_marked(marker: str) -> None:
    """Clean up after a failed test (never leave a sleeper behind)."""
    for pid in marked(marker):
        try:
            os.kill(pid, 9)
        except OSError:
            pass
