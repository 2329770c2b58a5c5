"""The OS sandbox around the verifier worker (parent side; never imports torch).

The worker runs code from the linted repository: flagged expressions, training-step
slices, the user's own functions and classes. A Python-level deny-list cannot hold
that code (torch itself reaches `os` and `sys`), so the worker is started inside
bubblewrap (`bwrap`, the distribution's package) with:

* new user, PID, network, IPC, UTS and cgroup namespaces: no capabilities, no network
  but a loopback of its own, only its own processes visible, and every process in it
  killed when the namespace's first process dies (`--die-with-parent` ties that to us);
* a read-only view of only what Python and torch need (the interpreter's prefixes,
  site-packages, the amplint package, system libraries, a few files of /etc), a fresh
  /proc and a minimal /dev, and one writable, size-capped tmpfs at /tmp (its cwd), mounted
  first so that an interpreter or amplint living under /tmp is bound over it, not hidden;
* an environment holding only what torch needs (never the caller's variables).

Inside, the worker forks one process per finding and confines it further (hard
rlimits, Landlock, a fresh session keyring, see `confine.py`; a seccomp filter, see
`seccomp.py`). `Sandbox.probe()` starts bwrap once to learn
whether this machine allows it; when it does not (no unprivileged user namespaces),
`--verify` refuses to run user code unless `--verify-unsandboxed` says so.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

#: the worker's only writable place, inside the sandbox
SANDBOX_TMP = "/tmp"
TMP_SIZE_MB = 256

#: variables torch (and CUDA) may need; nothing else of the caller's environment passes
_PASS_ENV = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
_ETC_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime",
)
_CUDA_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps")


class SandboxUnavailable(Exception):
    """bubblewrap is missing or this machine refuses the namespaces it needs."""


def base_env(extra: Optional[Dict[str, str]] = None, source: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The worker's whole environment: fixed values plus the few torch/CUDA variables."""
    source = os.environ if source is None else source
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update({k: source[k] for k in _PASS_ENV if k in source})
    env.update(extra or {})
    return env


def python_paths(python: str = sys.executable) -> List[str]:
    """Folders the worker's interpreter reads: its prefixes, site-packages, torch's folder."""
    import importlib.util
    import site
    import sysconfig

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(python))}
    paths.update(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    try:
        paths.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - old virtualenv
        pass
    for name in ("torch", "numpy", "pyseccomp"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # pragma: no cover
            spec = None
        if spec is not None and spec.origin:
            folder = os.path.dirname(spec.origin)
            paths.add(folder if spec.submodule_search_locations is None else os.path.dirname(folder))
    # site folders a .pth file or PYTHONPATH added (a venv made over another one's packages);
    # never the current folder, which may be the linted repository
    here = os.path.realpath(os.getcwd())
    paths.update(p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages") and os.path.realpath(p) != here)
    return sorted(p for p in paths if p and os.path.isdir(p) and p != os.sep)


def system_paths() -> List[str]:
    """System folders and /etc files every Python process reads (libraries, ld.so's cache)."""
    return [p for p in (*_SYSTEM_DIRS, *_ETC_FILES) if os.path.exists(p)]


def cgroup_v2_status(mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup") -> str:
    """Why no cgroup v2 bounds each finding's memory and processes on this machine, in words.

    A cgroup v2 needs a unified hierarchy whose cgroup (this process's) offers the `memory`
    and `pids` controllers and that this user may write (delegation). amplint does not
    create cgroups yet: where one is delegated, the line says so, and the per-finding
    bound is the one process under its address-space limit (the seccomp filter)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
        with open(cgroup, encoding="utf-8", errors="replace") as fh:
            own = next((line.strip()[3:] for line in fh if line.startswith("0::")), None)
    except OSError as exc:
        return f"cannot read {exc.filename}"
    point = next((m[4] for m in mounts if "-" in m and m[m.index("-") + 1:m.index("-") + 2] == ["cgroup2"]), None)
    if point is None:
        return "no cgroup2 file system mounted"
    if own is None:
        return "this process is in no cgroup v2"
    folder = os.path.join(point, own.lstrip("/"))
    try:
        with open(os.path.join(folder, "cgroup.controllers"), encoding="utf-8") as fh:
            controllers = set(fh.read().split())
    except OSError:
        return f"cannot read {folder}/cgroup.controllers"
    missing = [c for c in ("memory", "pids") if c not in controllers]
    if missing:
        return f"the cgroup2 hierarchy at {point} has no {' or '.join(missing)} controller (a cgroup v1 host)"
    if not os.access(folder, os.W_OK):
        return f"{folder} is not delegated to this user"
    return f"{folder} is delegated, not used by amplint yet"


def _bwrap_supports(bwrap: str, flag: str) -> bool:
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return flag in (out.stdout + out.stderr)


@dataclass
class Sandbox:
    """How to start the worker confined: `command(argv, ...)` wraps it in bwrap."""

    read_only: Sequence[str] = ()
    device: str = "cpu"
    tmp_size_mb: int = TMP_SIZE_MB
    bwrap: Optional[str] = None
    _disable_userns: bool = field(default=False, repr=False)

    @classmethod
    def find(cls, read_only: Iterable[str] = (), device: str = "cpu") -> "Sandbox":
        """The sandbox for this machine, or SandboxUnavailable saying plainly why not."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed (apt-get install bubblewrap)")
        box = cls(read_only=tuple(read_only), device=device, bwrap=bwrap)
        box._disable_userns = _bwrap_supports(bwrap, "--disable-userns")
        box.probe()
        return box

    def layers(self) -> List[str]:
        """What confines the worker, in words (the verify summary prints them)."""
        return [
            "bubblewrap: user, pid, network, ipc, uts namespaces, no capabilities",
            f"read-only system view, {self.tmp_size_mb} MB private /tmp",
        ]

    def probe(self) -> None:
        """Start `true` in the sandbox once: SandboxUnavailable with bwrap's own words if it fails."""
        try:
            done = subprocess.run(
                self.command(["true"], env={"PATH": "/usr/bin:/bin"}, cwd=SANDBOX_TMP),
                capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"bubblewrap cannot start: {exc}") from None
        if done.returncode != 0:
            why = " ".join((done.stderr or "").split())[:300] or f"exit code {done.returncode}"
            raise SandboxUnavailable(f"bubblewrap cannot start here ({why})")

    def mounts(self) -> List[str]:
        """bwrap arguments for the filesystem view."""
        args: List[str] = []
        seen = set()

        def ro(path: str) -> None:
            if path in seen or not os.path.lexists(path):
                return
            seen.add(path)
            if os.path.islink(path) and os.path.dirname(path) == "/":  # merged /usr: /bin -> usr/bin
                args.extend(["--symlink", os.readlink(path), path])
            else:
                args.extend(["--ro-bind", path, path])

        # the private /tmp first: a read-only bind below it (a venv under /tmp, amplint checked
        # out there) is mounted over it afterwards instead of being hidden by it
        args.extend(["--size", str(self.tmp_size_mb * 1024 * 1024), "--tmpfs", SANDBOX_TMP])
        for path in _SYSTEM_DIRS:
            ro(path)
        for path in _ETC_FILES:
            ro(path)
        for path in sorted(set(python_paths()) | {os.path.abspath(p) for p in self.read_only}):
            ro(path)
        args.extend(["--proc", "/proc", "--dev", "/dev"])
        if self.device.startswith("cuda") or self.device == "auto":
            for dev in sorted(glob.glob("/dev/nvidia[0-9]*")) + list(_CUDA_DEVICES):
                if os.path.exists(dev):
                    args.extend(["--dev-bind", dev, dev])
            for path in ("/sys", "/run/nvidia-persistenced"):
                if os.path.exists(path):
                    args.extend(["--ro-bind", path, path])
        return args

    def command(self, argv: Sequence[str], env: Dict[str, str], cwd: str = SANDBOX_TMP) -> List[str]:
        """`argv` run inside the sandbox with exactly `env` as its environment."""
        assert self.bwrap is not None
        cmd = [
            self.bwrap,
            "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        ]
        if self._disable_userns:
            cmd.append("--disable-userns")
        cmd.extend(self.mounts())
        cmd.extend(["--chdir", cwd, "--clearenv"])
        for key, value in sorted(env.items()):
            cmd.extend(["--setenv", key, value])
        cmd.append("--")
        cmd.extend(argv)
        return cmd

