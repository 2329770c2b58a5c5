"""Full lints of edited buffers in a separate process, after the fast publish.

The keystroke path (`incremental.py`) publishes from an excerpt; the full lint
that makes the editor exact again runs here, in one spawned worker process, so
its seconds of parsing hold neither the server's event loop nor, through the
GIL, the next keystroke's re-lint. One job runs at a time; a newer request
replaces a queued one (whose future is cancelled), and the caller drops a
result whose buffer changed meanwhile. Started on first use; `close` ends it.
"""
from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import Future
from typing import Any, Optional, Tuple

from ..core.config import Config


def _serve(conn: Any) -> None:  # pragma: no cover - runs in the worker process
    import os

    from .documents import full_lint

    try:
        os.nice(10)  # it only confirms: the keystroke path and the editor come first
    except (AttributeError, OSError):
        pass

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        source, path, config = job
        try:
            conn.send(("ok", full_lint(source, path, config)))
        except Exception as exc:  # a bug: the caller keeps the fast result
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Rechecker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Optional[Any] = None
        self._conn: Optional[Any] = None
        self._running: Optional[Future] = None
        self._queued: Optional[Tuple[Future, Tuple[str, str, Config]]] = None
        self._closed = False

    def submit(self, source: str, path: str, config: Config) -> Future:
        """A future for `full_lint(source, path, config)` (documents.FullLint)."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.cancel()
                return future
            if self._running is None:
                self._start(future, (source, path, config))
            else:
                if self._queued is not None:
                    self._queued[0].cancel()
                self._queued = (future, (source, path, config))
        return future

    def _start(self, future: Future, job: Tuple[str, str, Config]) -> None:
        """Send `job` to the worker (under the lock), starting it if needed."""
        if self._process is None:
            context = multiprocessing.get_context("spawn")  # the server has threads: never fork
            parent, child = context.Pipe()
            self._process = context.Process(target=_serve, args=(child,), name="amplint-recheck", daemon=True)
            self._process.start()
            child.close()
            self._conn = parent
            threading.Thread(target=self._read, name="amplint-recheck-reader", daemon=True).start()
        self._running = future
        future.set_running_or_notify_cancel()
        self._conn.send(job)  # type: ignore[union-attr]

    def _read(self) -> None:
        conn = self._conn
        while True:
            try:
                status, value = conn.recv()  # type: ignore[union-attr]
            except (EOFError, OSError):
                with self._lock:
                    running, self._running = self._running, None
                    queued, self._queued = self._queued, None
                for f in (running, queued[0] if queued else None):
                    if f is not None and not f.done():
                        f.cancel() if not f.running() else f.set_exception(RuntimeError("the recheck process ended"))
                return
            with self._lock:
                done, self._running = self._running, None
                if self._queued is not None and not self._closed:
                    future, job = self._queued
                    self._queued = None
                    self._start(future, job)
            if done is not None:
                if status == "ok":
                    done.set_result(value)
                else:
                    done.set_exception(RuntimeError(value))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            process, self._process = self._process, None
            if self._queued is not None:
                self._queued[0].cancel()
                self._queued = None
        if process is not None:
            process.kill()
            process.join(timeout=5)
