"""The parent side of the verifier: one sandboxed worker, reused across findings.

Never imports torch. The worker (`python -m amplint.verify.worker`) starts inside
bubblewrap (`sandbox.py`: its own user, PID, network and mount namespaces, a
read-only view of Python and torch, a private size-capped /tmp, an environment of
a few fixed variables) and forks one confined process per finding (`forked.py`).
The worker enforces each finding's timeout itself, so a hang or crash costs that
finding's verdict (`inconclusive: timeout` / `error`), never the warm worker; if
the worker itself stops answering, the whole sandbox is killed and restarted.

Where this machine cannot start the sandbox, `Runner.start` raises VerifyError
saying why, unless the runner was made with `unsandboxed=True` (`--verify-unsandboxed`).
Every verdict is made inert (`escape.clean_verdict`) before it leaves this module.
A total `budget` (seconds) bounds the whole run: once spent, the remaining findings
are `inconclusive: budget spent` without running.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional

from .escape import clean_text, clean_verdict
from .sandbox import SANDBOX_TMP, Sandbox, SandboxUnavailable, base_env, cgroup_v2_status, python_paths, system_paths

DEFAULT_TIMEOUT = 60.0
#: the most any finding may run, whatever a flag or a repository's config asks
MAX_TIMEOUT = 600.0
#: the most a whole run may take (`--verify-budget`, verify.budget)
MAX_BUDGET = 3600.0
#: seconds the worker gets beyond a finding's timeout to kill it and answer
GRACE = 10.0
UNSANDBOXED_HINT = (
    "--verify runs the flagged code only inside its sandbox. "
    "To run it without one, on code you trust: --verify-unsandboxed"
)
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
    """Runs experiments in one reusable, sandboxed worker.

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
        unsandboxed: bool = False,
        budget: Optional[float] = None,
        memory_mb: int = 4096,
        read_only: Iterable[str] = (),
    ) -> None:
        self.device = device
        self.timeout = check_seconds(timeout, "timeout", MAX_TIMEOUT)
        self.budget = None if budget is None else check_seconds(budget, "budget", None)
        self.seed = int(seed)
        self.extra_sys_path = [os.path.abspath(p) for p in extra_sys_path]
        #: more folders or files findings may read (bound read-only; not on sys.path)
        self.read_only = [os.path.abspath(p) for p in read_only]
        self.startup_timeout = float(startup_timeout) if startup_timeout else max(STARTUP_TIMEOUT, self.timeout)
        self.python = python or sys.executable
        #: a lazy worker imports torch only when an experiment needs it (in each finding's process)
        self.lazy = lazy
        self.unsandboxed = unsandboxed
        self.memory_mb = int(memory_mb)
        self.env_info: Dict[str, Any] = {}
        #: what confined the worker, in words (filled by `start`)
        self.layers: List[str] = []
        self.restarts = 0
        self._sandbox: Optional[Sandbox] = None
        self._proc: Optional[subprocess.Popen] = None
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._stderr_path: Optional[str] = None
        self._workdir: Optional[str] = None
        self._next_id = 0
        self._closed = False
        self._eof = False
        self._deadline: Optional[float] = None

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
        if self._sandbox is None and not self.unsandboxed:
            try:
                self._sandbox = Sandbox.find(read_only=self._read_paths(), device=self.device)
            except SandboxUnavailable as exc:
                raise VerifyError(f"{exc}. {UNSANDBOXED_HINT}") from None
        self._spawn()
        line = self._read_line(self.startup_timeout)
        if line is None:
            alive = not self._eof and self._proc is not None and self._proc.poll() is None
            status = "did not start within %.0f s" % self.startup_timeout if alive else _signal_name(self._proc.poll() if self._proc else None)
            tail = self._stderr_tail()
            self._kill()
            raise VerifyError(f"the verifier worker {status}" + (f": {clean_text(tail)}" if tail else ""))
        try:
            hello = json.loads(line)
            if not isinstance(hello, dict):
                raise ValueError(line)
        except ValueError:
            self._kill()
            raise VerifyError(f"the verifier worker sent {line[:200]!r}")
        if hello.get("error"):
            self._kill()
            raise VerifyError(clean_text(str(hello["error"])))
        if self._deadline is None and self.budget is not None:  # startup has its own timeout
            self._deadline = time.monotonic() + self.budget
        self.env_info = clean_verdict(dict(hello.get("env") or {})) or self.env_info
        worker_layers = [clean_text(str(x), 240) for x in hello.get("layers") or []]
        self.layers = (self._sandbox.layers() if self._sandbox else ["no sandbox (--verify-unsandboxed)"]) + worker_layers
        return self.env_info

    def _read_paths(self) -> List[str]:
        """Folders the worker reads: Python, torch, the amplint package, the runner's extra paths."""
        return sorted({*python_paths(self.python), os.path.join(_package_root(), "amplint"), *self.extra_sys_path, *self.read_only})

    def _spawn(self) -> None:
        if self._closed:
            raise VerifyError("runner is closed")
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="amplint-verify-")
        fd, self._stderr_path = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=self._workdir)
        if self._sandbox is not None:
            run_dir = SANDBOX_TMP
        else:
            run_dir = tempfile.mkdtemp(prefix="run-", dir=self._workdir)
        env = base_env({
            "PYTHONPATH": os.pathsep.join([*self.extra_sys_path, _package_root()]),
            "TMPDIR": run_dir,
            "HOME": run_dir,
        })
        cmd = [self.python, "-m", "amplint.verify.worker", "--device", self.device, "--seed", str(self.seed),
               "--memory-mb", str(self.memory_mb)]
        for path in [*self._read_paths(), *system_paths()]:
            cmd.extend(["--read", path])
        if self.lazy:
            cmd.append("--lazy")
        cmd.extend(["--cgroup", cgroup_v2_status()])
        if self._sandbox is not None:
            cmd.append("--require-seccomp")  # a sandboxed run holds every layer, or does not start
            cmd.append("--private-network")  # bwrap's --unshare-net: 2-rank findings may use its loopback
            cmd = self._sandbox.command(cmd, env=env, cwd=run_dir)
            env, cwd = {"PATH": env["PATH"]}, self._workdir
        else:
            cwd = run_dir
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fd,
                cwd=cwd,
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
        """One experiment -> an inert verdict dict. Timeouts, crashes and a spent budget become verdicts.

        `target` ("module:function") overrides the experiment module of `code`
        (tests use it to run hanging or crashing experiments).
        """
        data = dict(data or {})
        limit = self.timeout if timeout is None else check_seconds(timeout, "timeout", None)
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                return self._parent_verdict(code, data, "inconclusive", "budget spent", 0.0, {"budget_s": self.budget})
            limit = min(limit, left)
        self.start()
        self._next_id += 1
        request = {
            "op": "run",
            "id": self._next_id,
            "code": code,
            "data": data,
            "seed": self.seed,
            "timeout": limit,
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
        line = self._read_line(limit + GRACE)
        duration = round(time.monotonic() - started, 3)
        if line is None:  # the worker itself hung or died: that is not the finding's doing alone
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
            if reply.get("id") != request["id"] or not isinstance(result, dict):
                raise ValueError("out-of-order reply")
        except (ValueError, KeyError, TypeError) as exc:
            self._kill()
            self.restarts += 1
            return self._parent_verdict(code, data, "error", f"bad reply from the worker: {exc}", duration, {})
        result = clean_verdict(result)
        for key in _ENV_KEYS:  # a verdict the worker made for a dead finding has no environment of its own
            if result.get(key) is None and self.env_info.get(key) is not None:
                result[key] = self.env_info[key]
        if self._deadline is not None and limit < self.timeout and str(result.get("reason") or "").startswith("timeout"):
            result["reason"] = "budget spent"
        if result.get("torch"):
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
        return clean_verdict(out)


def check_seconds(value: Any, what: str, cap: Optional[float]) -> float:
    """A finite, positive number of seconds, at most `cap`, or VerifyError saying so."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok or (cap is not None and value > cap):
        limit = f" up to {cap:g}" if cap is not None else ""
        raise VerifyError(f"{what} must be a positive, finite number of seconds{limit}, got {value!r}")
    return float(value)


@contextlib.contextmanager
def terminating_cleanly() -> Iterator[None]:
    """SIGTERM/SIGHUP raise SystemExit while verifying, so `finally` blocks remove the temp folders
    (SIGINT already raises KeyboardInterrupt). Only in the main thread; restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_many(requests: List[Dict[str, Any]], **runner_kwargs: Any) -> List[Dict[str, Any]]:
    """Convenience: run [{"code":..., "data":...}, ...] in one worker."""
    with Runner(**runner_kwargs) as runner:
        return [runner.run(r["code"], r.get("data"), r.get("target")) for r in requests]
