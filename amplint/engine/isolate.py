"""One big file's analysis in a forked child: a time budget that binds, a memory bound.

The per-file budget (`budget.py`) waits for the analysis thread until the deadline and then
asks it to stop, but a thread only stops at its next Python instruction, and the waiting
thread itself needs the GIL to notice the deadline: one long call into C that holds the
GIL (libcst's native parser on a 10 MB file: over a minute, and gigabytes) runs to its
end whatever the budget says, and the process's memory grows with it. So a file bigger
than `CONFINED_BYTES` is analysed in a child forked for it (`run_confined`):

* the parent waits on a pipe with the deadline (`file-timeout` + 1 s; the child's own
  budget normally answers first) and SIGKILLs the child past it: the budget binds within
  a second, whatever the analysis is doing;
* the child's address space is capped (RLIMIT_AS) at its size when forked plus the
  analysis thread's stack reservation plus `MEMORY_MB`: a file whose analysis needs more
  gets `AMP000 analysis needed more than 1024 MB of memory; skipped`, and the run goes on;
* the result comes back pickled on the pipe (the child is this process, forked); a
  `BudgetExceeded` that `fn` lets out is the "timeout" outcome too.

An allocation that fails under the cap does not always end in a MemoryError: CPython's own
C code sometimes uses the NULL it got (a SIGSEGV: seen in the cycle collector and in the
`exec` of a dataclass's methods while libcst was imported under the cap) or returns an
error without setting one (SystemError), and a native allocator aborts (SIGABRT, the memory
outcome as before). A SIGSEGV, or an exception that is no MemoryError, is the memory outcome
only with evidence: the child's peak address space (VmPeak) came within `_NEAR_CAP` of its
cap, read by the child itself for an exception, and for a signal by the parent, which reads
the child's VmPeak every `_SAMPLE_S` while it waits (a child that dies within one sample of
growing to its cap is reported as the crash it also is).

`confines` says which files go there; the lint of a file, its project summary and the
check of its fixes all ask it.

Smaller files are analysed in place: every call into C on them is short (parsing is
linear, about a second per 300 KB for libcst here), so the thread budget binds there.
Only on Linux, and only from a process running one thread (forking a threaded process can
leave a lock held in the child); elsewhere a big file is analysed in place as before.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import faulthandler
import gc
import threading
import time
from typing import Any, Callable, Optional, Tuple

from .budget import BudgetExceeded

#: files above this many bytes are analysed in a forked child
CONFINED_BYTES = 512 * 1024
#: memory the child's analysis may use beyond the process it was forked from
MEMORY_MB = 1024
#: the analysis thread's stack reservation (pipeline._STACK_SIZE): address space, not memory
_STACK_RESERVE = 512 * 1024 * 1024
_GRACE_S = 1.0
#: a child whose peak address space came this close to its cap ran out of memory when it failed
_NEAR_CAP = 32 * 1024 * 1024
#: how often the waiting parent reads a confined child's VmPeak (~40 us a read)
_SAMPLE_S = 0.025

Outcome = Tuple[str, Any]  # ("ok", value) | ("timeout", None) | ("memory", None) | ("crash", how)


def available() -> bool:
    """Whether a file can be analysed in a forked child here (Linux, one thread)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def confines(size: int) -> bool:
    """Whether the work on a file of `size` bytes runs in a forked child (`run_confined`): the
    one rule for its lint (`parallel._work`), its summary (`crossfile`) and the check of its
    fixes (`fix.fixer`), so each of them is bounded the same way."""
    return size > CONFINED_BYTES and available()


def overrun(how: str, value: Any, timeout: float) -> str:
    """What a `run_confined` outcome other than "ok" says, after "analysis" or the like:
    "took longer than 30 s", "needed more than 1024 MB of memory", "failed (how)"."""
    from .budget import format_seconds

    if how == "timeout":
        return f"took longer than {format_seconds(timeout)} s"
    if how == "memory":
        return f"needed more than {MEMORY_MB} MB of memory"
    return f"failed ({value})"


def vm_size() -> Optional[int]:
    """This process's virtual memory size in bytes (Linux /proc), or None where it cannot be read:
    the figure a confined run's address-space limit is measured against."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return None


def _vm_peak(fd: int) -> Optional[int]:
    """The VmPeak in bytes of the process whose /proc status file `fd` holds open, or None
    (gone, a zombie, not Linux)."""
    try:
        data = os.pread(fd, 8192, 0)
        at = data.index(b"VmPeak:")
        return int(data[at + 7 : data.index(b"\n", at)].split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None


def _near_cap(peak: Optional[int], cap: Optional[int]) -> bool:
    """Whether a peak address space of `peak` bytes is evidence that the cap `cap` bound."""
    return peak is not None and cap is not None and peak >= cap - _NEAR_CAP


def _own_peak_near(cap: Optional[int]) -> bool:
    """In the child: whether its own peak address space came near `cap` (failing to allocate
    what reading it takes is the cap binding too)."""
    if cap is None:
        return False
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY)
        try:
            return _near_cap(_vm_peak(fd), cap)
        finally:
            os.close(fd)
    except MemoryError:
        return True
    except OSError:
        return False


def run_confined(fn: Callable[..., Any], args: tuple, timeout: float, memory_mb: Optional[int] = None) -> Outcome:
    """`fn(*args)` in a forked child with `timeout` seconds (<= 0: none) and `memory_mb`
    (default `MEMORY_MB`)."""
    import resource

    memory_mb = MEMORY_MB if memory_mb is None else memory_mb
    vm = vm_size()  # after the import above: the child maps nothing new before its cap is set
    cap = vm + _STACK_RESERVE + memory_mb * 1024 * 1024 if vm is not None and memory_mb > 0 else None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its outcomes are what the tests see)
        # what the child inherits (the parent's findings: 140,000 of one file in the fix check's
        # child) is out of its collections: the child never frees what the parent holds, and its
        # first full collection traversed all of it (0.4 CPU-s at 40,000 findings)
        gc.freeze()
        status = 0
        out_of_memory = None
        try:
            os.close(read_fd)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)  # a native library's own last words (libcst: "memory allocation of N bytes failed")
            os.close(null)
            faulthandler.disable()  # an abort under the cap is an outcome here, not a crash to dump (pytest enables it)
            out_of_memory = pickle.dumps(("memory", None))  # made before the cap: nothing to allocate once it binds
            if cap is not None:
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            try:
                payload = pickle.dumps(("ok", fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
            except BudgetExceeded:
                payload = pickle.dumps(("timeout", None))  # the child's own budget answered first
            except BaseException as exc:  # noqa: BLE001 - sorted out below
                if not (_ran_out_of_memory(exc) or _own_peak_near(cap)):  # (SystemError "error return
                    raise  # without exception set" at the cap is a failed allocation too)
                payload = out_of_memory
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view):]
        except BaseException as exc:  # noqa: BLE001 - never return into the parent's code
            status = 70
            try:
                if _ran_out_of_memory(exc) and out_of_memory is not None:
                    os.write(write_fd, out_of_memory)  # the cap bit while the result was pickled or written
                else:  # say what failed, not only that it did
                    os.write(write_fd, pickle.dumps(("crash", f"{type(exc).__name__}: {str(exc)[:160]}")))
                status = 0
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(status)
    os.close(write_fd)
    chunks = []
    deadline = time.monotonic() + timeout + _GRACE_S if timeout and timeout > 0 else None
    timed_out = False
    status_fd: Optional[int] = None
    if cap is not None:
        try:
            status_fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
        except OSError:  # pragma: no cover - no /proc
            pass
    peak = None
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                break
            if status_fd is not None:
                peak = _vm_peak(status_fd) or peak  # None once the child is gone: the last sample stays
                left = _SAMPLE_S if left is None else min(left, _SAMPLE_S)
            ready, _, _ = select.select([read_fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        if status_fd is not None:
            os.close(status_fd)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover
                pass
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return ("timeout", None)
    if chunks:
        from .pipeline import gc_paused

        # the collector paused while the result's objects are made: 140,000 findings unpickled with
        # it on started 14 full collections of a growing heap (4.5 of the 140,000-line file's
        # ~70 CPU-s); paused, one young collection at the end traverses them once
        with gc_paused():
            try:
                return pickle.loads(b"".join(chunks))  # this process's own child wrote it
            except Exception:  # noqa: BLE001 - cut short: the child died writing it
                pass
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT:
        return ("memory", None)  # a native allocation that failed under the cap aborts
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV and _near_cap(peak, cap):
        return ("memory", None)  # C code that used the NULL of an allocation failed at the cap
    how = f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
    return ("crash", how)


def _thread_not_started(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


def _ran_out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or an error raised while handling one (under the cap, the handler of a
    MemoryError deep in a parse can itself fail to allocate and raise something else), or the
    analysis thread's stack that could not be mapped (the address space the work had already
    taken left no room for it under the cap: Python says "can't start new thread")."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError) or _thread_not_started(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False
