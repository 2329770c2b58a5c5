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

A finding whose experiment runs on 2 ranks (AMP803: `run_group`) is two such children,
siblings forked before either starts, sharing the temp folder for their rendezvous file;
each is confined the same way but for TCP sockets on the sandbox's own loopback (the rank
filter, Landlock's TCP port rules), and the worker runs them only inside the sandbox's
network namespace (`ranks_refused`).

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

from ..engine.isolate import vm_size
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
    #: the filter of a rank of a multi-process finding (`seccomp.Program.rank_bpf`); None: no ranks
    rank_seccomp: Optional[bytes] = None
    #: the worker's network namespace holds only its loopback (checked by the worker)
    private_network: bool = False


def _child(body: Callable[[], Dict[str, Any]], result_w: int, output_w: int, close: List[int], limits: Limits, workdir: str, timeout: float, rank: bool,
           go: Optional[int] = None) -> None:
    """In the forked child: confine, run, send. Never returns. A `rank` of a multi-process
    finding installs the rank filter (sockets for gloo) and Landlock's TCP port bounds, and
    first waits for `go` to reach end-of-file: the worker closes it once every rank is forked."""
    status = 0
    try:
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        if go is not None:
            while os.read(go, 1):
                pass
            os.close(go)
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
                vm = vm_size()
                address_space = vm + limits.memory_mb * 1024 * 1024 if vm else None
            nproc = confine.user_tasks() + PROCESS_LIMIT
            confine.hard_limits(int(math.ceil(timeout)) + 1, address_space, FILE_SIZE_LIMIT, nproc)
            program = limits.seccomp
            tcp_ports = None
            if rank:  # run_group checked both exist
                program, tcp_ports = limits.rank_seccomp, confine.ephemeral_ports()
            if limits.landlock_abi:
                confine.landlock(limits.read_paths, [workdir], limits.devices, limits.landlock_abi, tcp_ports)
            if program is not None:
                seccomp.install(program)  # last: the calls above are among those it refuses
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
        self.killed = False  # by the worker, at the deadline or because another rank failed

    def output(self) -> str:
        return self.output_tail.decode("utf-8", "replace")


def run_forked(body: Callable[[], Dict[str, Any]], limits: Limits, timeout: float, close: List[int]) -> Outcome:
    """Run `body()` in a confined child with a wall-clock `timeout`; never raises for the child's faults."""
    return run_group(lambda rank, workdir: body(), 1, limits, timeout, close)[0]


def ranks_refused(limits: Limits) -> Optional[str]:
    """Why this worker cannot run a multi-process finding (None when it can): each rank needs
    the rank filter, Landlock's TCP port rules and a network namespace of only its own loopback."""
    if limits.rank_seccomp is None:
        return "no seccomp filter for ranks here"
    if limits.landlock_abi < 4:
        return f"Landlock ABI >= 4 is needed to bound the ranks' TCP ports (this kernel: {limits.landlock_abi or 'none'})"
    if not limits.private_network:
        return "the ranks' sockets need the sandbox's own network namespace (only its loopback)"
    return None


def run_group(body: Callable[[int, str], Dict[str, Any]], world: int, limits: Limits, timeout: float, close: List[int]) -> List[Outcome]:
    """Run `body(rank, workdir)` in `world` sibling confined children, all forked here before
    any of them confines itself or runs experiment code (they wait on a pipe the worker
    closes after the last fork), sharing one temp folder (a rendezvous file for their
    process group), under one wall-clock `timeout`. With world > 1 each child is a rank
    (`ranks_refused` must be None). When one child ends without a verdict the others are
    killed: they would wait for it in a collective. One Outcome per rank."""
    rank_mode = world > 1
    if rank_mode and ranks_refused(limits) is not None:
        raise ValueError(ranks_refused(limits))
    workdir = tempfile.mkdtemp(prefix="finding-", dir=limits.tmp_root)
    children: List[Dict[str, Any]] = []
    go_r, go_w = os.pipe() if rank_mode else (None, None)
    try:
        for rank in range(world):
            result_r, result_w = os.pipe()
            output_r, output_w = os.pipe()
            others = [fd for c in children for fd in (c["result"], c["output"], c["exited"]) if fd is not None]
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child (measured through the tests' verdicts)
                _child(lambda rank=rank: body(rank, workdir), result_w, output_w,
                       close + others + [result_r, output_r] + ([go_w] if go_w is not None else []),
                       limits, workdir, timeout, rank_mode, go_r)
            os.close(result_w)
            os.close(output_w)
            children.append({"pid": pid, "result": result_r, "output": output_r, "exited": _exit_watch(pid),
                             "status": None, "raw": bytearray(), "out": Outcome(), "oversize": False})
        if go_w is not None:  # every rank exists: they may start
            os.close(go_w)
            go_w = None
        timed_out = _wait(children, time.monotonic() + timeout)
    finally:
        for fd in (go_r, go_w):
            if fd is not None:
                os.close(fd)
        for c in children:
            if c["status"] is None:
                c["out"].killed = True
                try:
                    os.kill(c["pid"], signal.SIGKILL)
                except ProcessLookupError:  # pragma: no cover
                    pass
        for c in children:
            if c["status"] is None:
                _, c["status"] = os.waitpid(c["pid"], 0)
        confine.kill_descendants()
        for c in children:
            for fd in (c["result"], c["output"]) + ((c["exited"],) if c["exited"] is not None else ()):
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
    return [_outcome(c, timeout, timed_out) for c in children]


def _drain(c: Dict[str, Any], fd: int) -> bool:
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return False
    out = c["out"]
    if fd == c["output"]:
        out.output_bytes += len(chunk)
        out.output_tail = (out.output_tail + chunk)[-OUTPUT_KEEP:]
    elif len(c["raw"]) + len(chunk) > RESULT_LIMIT:
        c["oversize"] = True
    else:
        c["raw"].extend(chunk)
    return bool(chunk)


def _wait(children: List[Dict[str, Any]], deadline: float) -> bool:
    """Drain every child's pipes until all have exited (or one ended without a verdict, or the
    deadline passed: True). Exited children's pipes are drained to the end."""
    owner = {}
    for c in children:
        for fd in (c["result"], c["output"]) + ((c["exited"],) if c["exited"] is not None else ()):
            owner[fd] = c
    watched = list(owner)
    polling = any(c["exited"] is None for c in children)
    while any(c["status"] is None for c in children):
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        ready, _, _ = select.select(watched, [], [], min(left, 0.01) if polling else left)
        for fd in ready:
            c = owner[fd]
            if fd != c["exited"] and not _drain(c, fd):
                watched.remove(fd)  # EOF: only the child's descendants could still hold it
            elif fd == c["exited"]:
                watched.remove(fd)
        failed = False
        for c in children:
            if c["status"] is None:
                wpid, wstatus = os.waitpid(c["pid"], os.WNOHANG)
                if wpid:
                    c["status"] = wstatus
                    for fd in (c["result"], c["output"]):  # what it wrote before it exited is in the pipes now
                        os.set_blocking(fd, False)
                        while _drain(c, fd):
                            pass
                        if fd in watched:
                            watched.remove(fd)
                    failed = failed or not c["raw"]
        if failed and len(children) > 1:
            return False  # the others would wait for it in a collective: the caller kills them
    return False


def _outcome(c: Dict[str, Any], timeout: float, timed_out: bool) -> Outcome:
    out, status, raw = c["out"], c["status"], bytes(c["raw"])
    how, sig = _describe_status(status)
    if timed_out:
        out.kind, out.problem = "timeout", f"timeout after {timeout:g} s"
        return out
    if sig == signal.SIGXCPU:
        out.kind, out.problem = "timeout", f"CPU time limit ({int(math.ceil(timeout)) + 1} s)"
        return out
    if c["oversize"]:
        out.problem = f"the finding's process sent more than {RESULT_LIMIT} bytes"
        return out
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _CONFINE_FAILED:
        out.problem = "the finding's process could not be confined: " + out.output().strip()[-300:]
        return out
    if not raw:
        out.problem = f"the experiment crashed the worker ({how})"
        return out
    try:
        result = _strict_json(raw)
        method = result.get("method", "experiment") if isinstance(result, dict) else None
        if not isinstance(result, dict) or result.get("verdict") not in VERDICTS or not (isinstance(method, str) and _METHOD.fullmatch(method)):
            raise ValueError("not a verdict")
    except (ValueError, UnicodeDecodeError) as exc:
        out.problem = f"bad reply from the finding's process: {exc}"[:300]
        return out
    out.result = result
    return out
