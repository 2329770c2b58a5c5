"""One finding, one process: the worker forks, the child confines itself and runs the experiment.

Worker side. The worker (a warm process that imported torch) never runs the user's
code itself. For each request it forks a child that, before any experiment code:

* drops the worker's descriptors: the protocol pipe and stdin are closed, fd 1 and 2
  go to an output pipe the worker drains (and caps), so nothing the code prints or
  writes can reach the protocol;
* gets a fresh, private temp folder as cwd and TMPDIR;
* joins a fresh, empty session keyring, sets hard rlimits and Landlock (`confine.py`),
  then installs the seccomp filter (`seccomp.py`): no new processes, programs, sockets,
  keyring calls, io_uring, userfaultfd, ptrace, bpf, mounts or namespaces. A finding is
  therefore one process, and its address-space limit bounds the memory it holds in all.

The child sends its verdict as one JSON document on a pipe of its own and exits. The
worker waits with a wall-clock deadline, then kills the child and every descendant
(the worker is their subreaper; setsid does not escape it), removes the temp folder
and parses the verdict strictly. So one finding's code cannot change another's
verdict, the worker's state, or the protocol; at most it decides its own verdict.
"""
from __future__ import annotations

import json
import math
import os
import re
import select
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import confine, seccomp

VERDICTS = ("confirmed", "not-reproduced", "inconclusive", "error")
#: a verdict's `method`: "snippet", "experiment", or another short lower-case word
_METHOD = re.compile(r"[a-z][a-z-]{0,31}")
#: bytes of a verdict document; bytes of printed output kept (the tail) per finding
RESULT_LIMIT = 1 << 20
OUTPUT_KEEP = 4000
FILE_SIZE_LIMIT = 64 << 20
#: processes (tasks) a finding may add to those of its uid
PROCESS_LIMIT = 128
#: exit status of a child whose confinement failed (it ran nothing)
_CONFINE_FAILED = 111


@dataclass
class Limits:
    """What each finding's process gets."""

    memory_mb: int = 4096  # address space above the worker's own (CPU only; 0: none)
    landlock_abi: int = 0
    read_paths: List[str] = field(default_factory=list)
    devices: List[str] = field(default_factory=list)
    tmp_root: str = field(default_factory=tempfile.gettempdir)
    cap_address_space: bool = True
    #: the compiled seccomp program (`seccomp.build`), installed last; None: no filter
    seccomp: Optional[bytes] = None
    #: keyctl's system-call number: the child joins a fresh session keyring first; None: not
    keyctl_nr: Optional[int] = None


def _vm_size() -> Optional[int]:
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return None


def _child(body: Callable[[], Dict[str, Any]], result_w: int, output_w: int, close: List[int], limits: Limits, workdir: str, timeout: float) -> None:
    """In the forked child: confine, run, send. Never returns."""
    status = 0
    try:
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(output_w, 1)
        os.dup2(output_w, 2)
        os.close(output_w)
        os.chdir(workdir)
        os.environ["TMPDIR"] = os.environ["HOME"] = workdir  # caches (CUDA's, torch's) land in it
        tempfile.tempdir = workdir
        try:
            if limits.keyctl_nr is not None:
                confine.fresh_session_keyring(limits.keyctl_nr)
            address_space = None
            if limits.cap_address_space and limits.memory_mb > 0:
                vm = _vm_size()
                address_space = vm + limits.memory_mb * 1024 * 1024 if vm else None
            nproc = confine.user_tasks() + PROCESS_LIMIT
            confine.hard_limits(int(math.ceil(timeout)) + 1, address_space, FILE_SIZE_LIMIT, nproc)
            if limits.landlock_abi:
                confine.landlock(limits.read_paths, [workdir], limits.devices, limits.landlock_abi)
            if limits.seccomp is not None:
                seccomp.install(limits.seccomp)  # last: the calls above are among those it refuses
        except OSError as exc:
            os.write(2, f"amplint: confinement failed: {exc}\n".encode())
            os._exit(_CONFINE_FAILED)
        result = body()
        data = json.dumps(result, allow_nan=False).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(result_w, view):]
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the worker
        status = 70
    finally:
        os._exit(status)


def _strict_json(raw: bytes) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"non-finite number {name}")

    return json.loads(raw.decode("utf-8"), parse_constant=no_constants)


def _describe_status(status: int) -> Tuple[str, Optional[int]]:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}", sig
        except ValueError:  # pragma: no cover
            return f"killed by signal {sig}", sig
    return f"exit code {os.WEXITSTATUS(status)}", None


def _exit_watch(pid: int) -> Optional[int]:
    """A pidfd that turns readable when `pid` exits (Linux >= 5.3), else None (then we poll)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class Outcome:
    """What came back from one child: the verdict document (or why none), and its output."""

    def __init__(self) -> None:
        self.result: Optional[Dict[str, Any]] = None
        self.problem: Optional[str] = None  # why `result` is None
        self.kind = "error"  # or "timeout"
        self.output_tail = b""
        self.output_bytes = 0

    def output(self) -> str:
        return self.output_tail.decode("utf-8", "replace")


def run_forked(body: Callable[[], Dict[str, Any]], limits: Limits, timeout: float, close: List[int]) -> Outcome:
    """Run `body()` in a confined child with a wall-clock `timeout`; never raises for the child's faults."""
    out = Outcome()
    workdir = tempfile.mkdtemp(prefix="finding-", dir=limits.tmp_root)
    result_r, result_w = os.pipe()
    output_r, output_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child (measured through the tests' verdicts)
        _child(body, result_w, output_w, close + [result_r, output_r], limits, workdir, timeout)
    os.close(result_w)
    os.close(output_w)
    raw = bytearray()
    deadline = time.monotonic() + timeout
    exited = _exit_watch(pid)
    status: Optional[int] = None
    timed_out = oversize = False

    def drain(fd: int) -> bool:
        nonlocal oversize
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if fd == output_r:
            out.output_bytes += len(chunk)
            out.output_tail = (out.output_tail + chunk)[-OUTPUT_KEEP:]
        elif len(raw) + len(chunk) > RESULT_LIMIT:
            oversize = True
        else:
            raw.extend(chunk)
        return bool(chunk)

    try:
        watched = [result_r, output_r] + ([exited] if exited is not None else [])
        while status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(watched, [], [], left if exited is not None else min(left, 0.01))
            for fd in ready:
                if fd != exited and not drain(fd):
                    watched.remove(fd)  # EOF: only the child's descendants could still hold it
            wpid, wstatus = os.waitpid(pid, os.WNOHANG)
            if wpid:
                status = wstatus
        if status is not None:  # what the child wrote before it exited is in the pipes now
            for fd in (result_r, output_r):
                os.set_blocking(fd, False)
                while drain(fd):
                    pass
    finally:
        if status is None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover
                pass
            _, status = os.waitpid(pid, 0)
        confine.kill_descendants()
        for fd in (result_r, output_r) + ((exited,) if exited is not None else ()):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
    how, sig = _describe_status(status)
    if timed_out:
        out.kind, out.problem = "timeout", f"timeout after {timeout:g} s"
        return out
    if sig == signal.SIGXCPU:
        out.kind, out.problem = "timeout", f"CPU time limit ({int(math.ceil(timeout)) + 1} s)"
        return out
    if oversize:
        out.problem = f"the finding's process sent more than {RESULT_LIMIT} bytes"
        return out
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _CONFINE_FAILED:
        out.problem = "the finding's process could not be confined: " + out.output().strip()[-300:]
        return out
    if not raw:
        out.problem = f"the experiment crashed the worker ({how})"
        return out
    try:
        result = _strict_json(bytes(raw))
        method = result.get("method", "experiment") if isinstance(result, dict) else None
        if not isinstance(result, dict) or result.get("verdict") not in VERDICTS or not (isinstance(method, str) and _METHOD.fullmatch(method)):
            raise ValueError("not a verdict")
    except (ValueError, UnicodeDecodeError) as exc:
        out.problem = f"bad reply from the finding's process: {exc}"[:300]
        return out
    out.result = result
    return out
