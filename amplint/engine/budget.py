"""The per-file time budget: one file's analysis may not hold up the run.

amplint's own cost is linear in a file's size (benchmarks/scaling.py), but a
pathological input or a slow rule must still not stall a pre-commit hook or a
CI job. `lint_file_source` opens a budget (`file_timeout` seconds,
`[tool.amplint] file-timeout`, `--file-timeout`) around one file; the work
that can take long (the libcst parse, the AMP model, the rules) already runs
on its own thread (`engine/pipeline.run_guarded`), which waits for it at most until the
budget's deadline. When the deadline passes, the waiting side raises
`BudgetExceeded` (the engine turns it into AMP000 "analysis took longer than
N s; skipped") and the abandoned thread is asked to stop with an
asynchronous exception, which it receives at its next Python instruction
(a long call into C, such as libcst's native parser, finishes first, and the waiting
thread cannot even see the deadline while such a call holds the GIL). The thread is a
daemon, so it never keeps the process alive. That is why a file big enough for such calls
to be long (over `isolate.CONFINED_BYTES`) is worked on in a forked child that is killed
at the deadline and whose memory is capped (`engine/isolate.py`).

The deadline lives in a thread-local: each worker process and each file has
its own, and code run outside a budget (unit tests calling the rules
directly) waits without limit.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator, Optional

_local = threading.local()


class BudgetExceeded(Exception):
    """One file's analysis ran past its budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"analysis took longer than {format_seconds(seconds)} s")
        self.seconds = seconds


class _Abandoned(BaseException):
    """Raised inside an abandoned analysis thread to make it stop (nobody reads it)."""


def format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


@contextlib.contextmanager
def file_budget(seconds: Optional[float]) -> Iterator[None]:
    """A deadline `seconds` from now for the work this thread waits on (None or <= 0: none).
    Nested budgets keep the earlier deadline."""
    previous = getattr(_local, "deadline", None)
    if seconds is not None and seconds > 0:
        deadline = (time.monotonic() + seconds, seconds)
        if previous is None or deadline[0] < previous[0]:
            _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


def remaining() -> Optional[float]:
    """Seconds left before this thread's deadline (None: no budget); raises once it passed."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return None
    left = deadline[0] - time.monotonic()
    if left <= 0:
        raise BudgetExceeded(deadline[1])
    return left


def wait(thread: threading.Thread) -> None:
    """Join `thread` until this thread's deadline; past it, ask `thread` to stop and raise."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        thread.join()
        return
    thread.join(max(0.0, deadline[0] - time.monotonic()))
    if thread.is_alive():
        _interrupt(thread)
        raise BudgetExceeded(deadline[1])


def _interrupt(thread: threading.Thread) -> None:
    import ctypes  # only ever needed past a deadline

    ident = thread.ident
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Abandoned))
