"""The parent side of the verifier: one worker subprocess, reused across experiments.

Never imports torch. The worker (`python -m amplint.verify.worker`) runs in a
fresh temporary directory, in its own session (process group), with stdout as
a JSON-lines protocol pipe and stderr captured to a file. Each experiment has a
timeout; when it passes, or the worker dies, the whole process group is killed
and the next experiment starts a new worker. A hung or crashing experiment
therefore costs a verdict (`inconclusive: timeout` / `error`), never the linter.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Iterable, List, Optional

DEFAULT_TIMEOUT = 60.0
#: importing torch (and initialising CUDA) can be slow on a cold machine
STARTUP_TIMEOUT = 180.0


_ENV_KEYS = ("torch", "device_type", "device", "device_name", "capability")


class VerifyError(Exception):
    """The verifier cannot run at all (no torch, device unavailable, worker won't start)."""


def torch_available() -> bool:
    """Whether torch is importable, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # pragma: no cover
        return False


def _package_root() -> str:
    """The folder holding the `amplint` package (so the worker imports the same code).

    Read off this file's place (amplint/verify/runner.py) rather than by importing
    `amplint`: the facade sits above every layer, so nothing below imports it."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _signal_name(returncode: Optional[int]) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Runner:
    """Runs experiments in one reusable worker subprocess.

    >>> with Runner(device="cpu", timeout=60) as r:       # doctest: +SKIP
    ...     verdict = r.run("AMP101", {"threshold": 1.0})
    """

    def __init__(
        self,
        device: str = "auto",
        timeout: float = DEFAULT_TIMEOUT,
        seed: int = 0,
        extra_sys_path: Iterable[str] = (),
        startup_timeout: Optional[float] = None,
        python: Optional[str] = None,
        lazy: bool = False,
    ) -> None:
        self.device = device
        self.timeout = float(timeout)
        self.seed = int(seed)
        self.extra_sys_path = [os.path.abspath(p) for p in extra_sys_path]
        self.startup_timeout = float(startup_timeout) if startup_timeout else max(STARTUP_TIMEOUT, self.timeout)
        self.python = python or sys.executable
        #: a lazy worker imports torch only when an experiment needs it (restarts are cheap)
        self.lazy = lazy
        self.env_info: Dict[str, Any] = {}
        self.restarts = 0
        self._proc: Optional[subprocess.Popen] = None
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._stderr_path: Optional[str] = None
        self._workdir: Optional[str] = None
        self._next_id = 0
        self._closed = False
        self._eof = False

    # ------------------------------------------------------------ lifecycle

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    @property
    def workdir(self) -> Optional[str]:
        return self._workdir

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Dict[str, Any]:
        """Start the worker (if not running) and return its environment."""
        if self._proc is not None and self._proc.poll() is None:
            return self.env_info
        self._spawn()
        line = self._read_line(self.startup_timeout)
        if line is None:
            alive = not self._eof and self._proc is not None and self._proc.poll() is None
            status = "did not start within %.0f s" % self.startup_timeout if alive else _signal_name(self._proc.poll() if self._proc else None)
            tail = self._stderr_tail()
            self._kill()
            raise VerifyError(f"the verifier worker {status}" + (f": {tail}" if tail else ""))
        try:
            hello = json.loads(line)
        except ValueError:
            self._kill()
            raise VerifyError(f"the verifier worker sent {line[:200]!r}")
        if hello.get("error"):
            self._kill()
            raise VerifyError(hello["error"])
        self.env_info = dict(hello.get("env") or {}) or self.env_info
        return self.env_info

    def _spawn(self) -> None:
        if self._closed:
            raise VerifyError("runner is closed")
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="amplint-verify-")
        fd, self._stderr_path = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=self._workdir)
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self._workdir)
        env = dict(os.environ)
        paths = [*self.extra_sys_path, _package_root()]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONHASHSEED"] = "0"
        env["PYTHONUNBUFFERED"] = "1"
        env["TMPDIR"] = run_dir
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        cmd = [self.python, "-m", "amplint.verify.worker", "--device", self.device, "--seed", str(self.seed)]
        if self.lazy:
            cmd.append("--lazy")
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fd,
                cwd=run_dir,
                env=env,
                start_new_session=True,
                close_fds=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
            )
        except OSError as exc:
            raise VerifyError(f"cannot start the verifier worker: {exc}") from None
        finally:
            os.close(fd)
        self._lines = queue.Queue()
        reader = threading.Thread(target=self._reader, args=(self._proc, self._lines), daemon=True)
        reader.start()

    @staticmethod
    def _reader(proc: subprocess.Popen, lines: "queue.Queue[Optional[str]]") -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.put(line)
        except (OSError, ValueError):
            pass
        lines.put(None)

    def _read_line(self, timeout: float) -> Optional[str]:
        """The next protocol line; None on timeout or EOF (`self._eof` tells which)."""
        self._eof = False
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self._eof = True
                if self._proc is not None:
                    try:  # the pipe closes a moment before the process is reaped
                        self._proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
                return None
            if line.strip():
                return line

    def _stderr_tail(self, limit: int = 600) -> str:
        if not self._stderr_path:
            return ""
        try:
            with open(self._stderr_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 4000))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip() and "Failed to initialize NumPy" not in ln]
        return " | ".join(lines[-6:])[-limit:]

    def _kill(self) -> None:
        """Kill the worker and everything it started (its process group)."""
        proc = self._proc
        self._proc = None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            proc.kill()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def close(self) -> None:
        """Ask the worker to exit, then make sure its whole process group is gone."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                proc.stdin.flush()
                proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()
        self._closed = True
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # ------------------------------------------------------------ experiments

    def run(
        self, code: str, data: Optional[Dict[str, Any]] = None, target: Optional[str] = None, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        """One experiment -> a verdict dict. Timeouts and crashes become verdicts.

        `target` ("module:function") overrides the experiment module of `code`
        (tests use it to run hanging or crashing experiments).
        """
        data = dict(data or {})
        self.start()
        self._next_id += 1
        request = {
            "op": "run",
            "id": self._next_id,
            "code": code,
            "data": data,
            "seed": self.seed,
        }
        if target:
            request["target"] = target
        started = time.monotonic()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(request, default=str) + "\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the read below sees the EOF and reports the crash
        limit = self.timeout if timeout is None else float(timeout)
        line = self._read_line(limit)
        duration = round(time.monotonic() - started, 3)
        if line is None:
            alive = not self._eof and proc.poll() is None
            tail = self._stderr_tail()
            self._kill()
            self.restarts += 1
            if alive:
                return self._parent_verdict(
                    code, data, "inconclusive", f"timeout after {limit:g} s", duration, {"timeout_s": limit}
                )
            rc = proc.returncode
            evidence: Dict[str, Any] = {"worker": _signal_name(rc)}
            if tail:
                evidence["stderr"] = tail
            return self._parent_verdict(code, data, "error", f"the experiment crashed the worker ({_signal_name(rc)})", duration, evidence)
        try:
            reply = json.loads(line)
            result = reply["result"]
            if reply.get("id") != request["id"]:
                raise ValueError("out-of-order reply")
        except (ValueError, KeyError, TypeError) as exc:
            self._kill()
            self.restarts += 1
            return self._parent_verdict(code, data, "error", f"bad reply from the worker: {exc}", duration, {})
        if isinstance(result, dict) and result.get("torch"):
            self.env_info = {k: result[k] for k in _ENV_KEYS if k in result}
        return result

    def _parent_verdict(
        self, code: str, data: Dict[str, Any], verdict: str, reason: str, duration: float, evidence: Dict[str, Any]
    ) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "verdict": verdict,
            "reason": reason,
            "method": "experiment",
            "summary": None,
            "evidence": evidence,
            "dtype": data.get("dtype"),
        }
        out.update({k: None for k in _ENV_KEYS})
        out.update(self.env_info)
        out.update({"experiment": code, "seed": self.seed, "duration_s": duration})
        return out


def run_many(requests: List[Dict[str, Any]], **runner_kwargs: Any) -> List[Dict[str, Any]]:
    """Convenience: run [{"code":..., "data":...}, ...] in one worker."""
    with Runner(**runner_kwargs) as runner:
        return [runner.run(r["code"], r.get("data"), r.get("target")) for r in requests]
