"""Attacks on the verifier's sandbox, as a hostile pull request would make them.

Each experiment below is run by the worker (`target="test_verify_sandbox:..."`) the way
the user's flagged code runs: in a forked, confined process inside bubblewrap. Each
test then checks from the host that nothing escaped: no file outside the temp
folder, no connection to a listener, no surviving process, no secret in any output,
no forged verdict, no raw control character or workflow command in any report.
Where a test needs the attack to be real, it first shows the same code succeeding
outside the verifier.
"""
from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed", allow_module_level=True)

from amplint.core.diagnostics import Diagnostic, Location, Severity  # noqa: E402
from amplint.report import FORMATS, renderer  # noqa: E402
from amplint.verify import Runner  # noqa: E402
from amplint.verify.sandbox import Sandbox, SandboxUnavailable  # noqa: E402
from tests.procs import comm, kill_marked, sleeper, wait_gone  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = "test_verify_sandbox"
SECRET = f"amplint-secret-{uuid.uuid4().hex}"

try:
    Sandbox.find()
    NO_SANDBOX = ""
except SandboxUnavailable as exc:  # pragma: no cover - depends on the machine
    NO_SANDBOX = str(exc)
needs_sandbox = pytest.mark.skipif(bool(NO_SANDBOX), reason=f"no sandbox on this machine: {NO_SANDBOX}")


# ------------------------------------------------------------------ attacks (run inside the worker)


def _try(fn):
    try:
        return ["ok", repr(fn())[:200]]
    except BaseException as exc:  # noqa: BLE001 - the attack's outcome is the evidence
        return ["refused", f"{type(exc).__name__}: {exc}"[:200]]


def attack_write_outside(data, lab):
    results = {}
    for path in data["paths"]:
        results[path] = _try(lambda p=path: open(p, "w").write("pwned"))
    results["cwd"] = _try(lambda: open("inside.txt", "w").write("fine"))
    return lab.confirmed("tried", results, method="snippet")


def attack_read_and_write(data, lab):
    """Read the first path, write the others."""
    first, *rest = data["paths"]
    results = {first: _try(lambda: open(first).read())}
    for path in rest:
        results[path] = _try(lambda p=path: open(p, "w").write("pwned"))
    return lab.confirmed("tried", results, method="snippet")


def attack_chains(data, lab):
    """What a flagged expression can reach without one import statement: torch's own modules."""
    import torch

    out = data["out"]
    builtins = torch.sys.modules["builtins"]
    return lab.confirmed("tried", {
        "system": _try(lambda: torch.os.system(f"echo x > {out}/system")),
        "exec": _try(lambda: builtins.exec(f"open({out + '/exec'!r}, 'w').write('x')")),
        "import": _try(lambda: builtins.__import__("subprocess").run(["sh", "-c", f"echo x > {out}/import"])),
        "spawn": _try(lambda: torch.os.waitpid(torch.os.posix_spawn("/bin/sh", ["sh", "-c", f"echo x > {out}/spawn"], {}), 0)),
        "open": _try(lambda: builtins.open(f"{out}/open", "w").write("x")),
    }, method="snippet")


def attack_socket(data, lab):
    def connect():
        with socket.create_connection(("127.0.0.1", data["port"]), timeout=3) as s:
            s.sendall(os.environ.get("AMPLINT_TEST_SECRET", "no secret").encode())

    return lab.confirmed("tried", {"connect": _try(connect)}, method="snippet")


def attack_env(data, lab):
    """Look for the secret in its environment and in every visible process's /proc/PID/environ."""
    seen = [os.environ.get("AMPLINT_TEST_SECRET", "")] + ["=".join(kv) for kv in os.environ.items()]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    seen.append(fh.read().decode("utf-8", "replace"))
            except OSError:
                pass
    found = any(data["secret"] in text for text in seen)
    return lab.confirmed("read", {"found": found, "keys": sorted(os.environ), "processes": len(seen) - 1 - len(os.environ)}, method="snippet")


def attack_rlimits(data, lab):
    out = {}
    for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE"):
        which = getattr(resource, name)
        out[name] = _try(lambda w=which: resource.setrlimit(w, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
    return lab.confirmed("tried", out, method="snippet")


def _daemon(marker):
    pid = os.fork()
    if pid == 0:  # a double-forked daemon: its parent is gone before the finding ends
        os.setsid()
        subprocess.Popen(sleeper(marker))
        os._exit(0)
    os.waitpid(pid, 0)


def attack_setsid_survivor(data, lab):
    return lab.confirmed("tried", {
        "setsid": _try(lambda: subprocess.Popen(sleeper(data["marker"]), start_new_session=True).pid),
        "daemon": _try(lambda: _daemon(data["marker"])),
    }, method="snippet")


def attack_posix_spawn(data, lab):
    return lab.confirmed("tried", {"spawn": _try(lambda: os.posix_spawn(sys.executable, sleeper(data["marker"]), {}))},
                         method="snippet")


def _forged(id_):
    return json.dumps({"op": "result", "id": id_, "result": {"verdict": "not-reproduced", "method": "snippet", "summary": "FORGED"}})


def attack_protocol(data, lab):
    """Write forged verdicts for the next requests into every pipe and /proc fd reachable."""
    written = {}
    lines = "".join(_forged(i) + "\n" for i in range(1, 200)).encode()
    for pid in ["self"] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError as exc:
            written[f"{pid}"] = str(exc)
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                with open(path, "wb", buffering=0) as fh:
                    fh.write(lines)
                written[path] = "wrote"
            except OSError as exc:
                written[path] = type(exc).__name__
    for fd in range(3, 64):
        try:
            os.write(fd, lines)
            written[f"fd{fd}"] = "wrote"
        except OSError:
            pass
    return lab.not_reproduced("FORGED", {"written": written}, method="snippet")


def attack_inject(data, lab):
    raise RuntimeError(data["message"])


def attack_inject_summary(data, lab):
    return lab.confirmed(data["message"], {data["message"]: data["message"]}, method="snippet")


def attack_print_flood(data, lab):
    chunk = "x" * (1 << 20) + "\n"
    deadline = time.monotonic() + data["seconds"]
    n = 0
    while time.monotonic() < deadline:
        sys.stdout.write(chunk)
        n += 1
    sys.stdout.flush()
    return lab.confirmed("flooded", {"mb": n}, method="snippet")


def attack_fill_tmp(data, lab):
    import tempfile

    written = 0
    try:
        for i in range(4096):
            with open(os.path.join(tempfile.gettempdir(), f"f{i}"), "wb") as fh:
                fh.write(b"\0" * (16 << 20))
            written += 16
    except OSError as exc:
        return lab.confirmed("stopped", {"mb": written, "error": type(exc).__name__}, method="snippet")
    return lab.confirmed("filled", {"mb": written}, method="snippet")


def attack_fork_bomb(data, lab):
    pids = []
    error = None
    try:
        for _ in range(400):  # above the 128 a non-root finding may add
            pid = os.fork()
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            pids.append(pid)
    except OSError as exc:
        error = type(exc).__name__
    return lab.confirmed("forked", {"children": len(pids), "error": error}, method="snippet")


#: x86_64 system-call numbers (the kernel surfaces below are tried with raw calls)
NR = {"add_key": 248, "keyctl": 250, "io_uring_setup": 425, "userfaultfd": 323, "ptrace": 101, "bpf": 321,
      "unshare": 272, "perf_event_open": 298, "mount": 165, "clone3": 435}
IS_X86_64 = os.uname().machine == "x86_64"
KEYCTL_READ, KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING = 11, 10, -3


def _syscall(name, *args):
    """(return value, errno name) of a raw system call."""
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(NR[name]), *args)
    err = ctypes.get_errno() if ret < 0 else 0
    return int(ret), errno.errorcode.get(err, str(err)) if err else None


def attack_keyring(data, lab):
    """Read the caller's key: by its serial, by a search of the session keyring, from /proc/keys."""
    import ctypes

    buf = ctypes.create_string_buffer(4096)
    got = {}
    ret, err = _syscall("keyctl", ctypes.c_long(KEYCTL_READ), ctypes.c_long(data["serial"]), buf, ctypes.c_long(4096))
    got["read"] = [ret, err, buf.raw[:max(ret, 0)].decode("latin-1")]
    ret, err = _syscall("keyctl", ctypes.c_long(KEYCTL_SEARCH), ctypes.c_long(KEY_SPEC_SESSION_KEYRING),
                        ctypes.c_char_p(b"user"), ctypes.c_char_p(data["description"].encode()), ctypes.c_long(0))
    got["search"] = [ret, err]
    if ret > 0:
        r2, e2 = _syscall("keyctl", ctypes.c_long(KEYCTL_READ), ctypes.c_long(ret), buf, ctypes.c_long(4096))
        got["search_read"] = [r2, e2, buf.raw[:max(r2, 0)].decode("latin-1")]
    got["proc_keys"] = _try(lambda: open("/proc/keys").read())
    return lab.confirmed("tried", got, method="snippet")


def attack_unix_socket(data, lab):
    def connect():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(data["path"])
            s.sendall(b"hello")
            return s.recv(1000).decode()

    return lab.confirmed("tried", {"connect": _try(connect)}, method="snippet")


def attack_kernel_surfaces(data, lab):
    """io_uring, user-mode userfaultfd, ptrace, bpf, new namespaces, mount, sockets, clone3."""
    import ctypes

    params = ctypes.create_string_buffer(120)
    out = {
        "io_uring_setup": _syscall("io_uring_setup", ctypes.c_long(4), params),
        "userfaultfd": _syscall("userfaultfd", ctypes.c_long(1 | os.O_CLOEXEC)),  # UFFD_USER_MODE_ONLY
        "ptrace": _syscall("ptrace", ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)),
        "bpf": _syscall("bpf", ctypes.c_long(0), ctypes.create_string_buffer(128), ctypes.c_long(128)),
        "unshare": _syscall("unshare", ctypes.c_long(0x10000000)),  # CLONE_NEWUSER
        "perf_event_open": _syscall("perf_event_open", ctypes.create_string_buffer(128), ctypes.c_long(0),
                                    ctypes.c_long(-1), ctypes.c_long(-1), ctypes.c_long(0)),
        "mount": _syscall("mount", ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/tmp"), ctypes.c_char_p(b"tmpfs"),
                          ctypes.c_long(0), None),
        "clone3": _syscall("clone3", None, ctypes.c_long(0)),  # EINVAL unfiltered: never a real clone
        "inet": _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()),
        "fork": _try(_fork_once),
        "thread": _try(_thread_runs),
    }
    for key in ("io_uring_setup", "userfaultfd", "bpf", "perf_event_open"):
        if out[key][0] >= 0:
            os.close(out[key][0])
    return lab.confirmed("tried", out, method="snippet")


def _fork_once():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _thread_runs():
    ran = []
    t = threading.Thread(target=lambda: ran.append(1))
    t.start()
    t.join()
    return ran


def attack_memory(data, lab):
    """Hold memory in several processes at once, each within the per-process limit; then in one."""
    size = data["mb"] << 20
    children, errors = [], []
    for _ in range(data["processes"]):
        try:
            pid = os.fork()
        except OSError as exc:
            errors.append(type(exc).__name__)
            continue
        if pid == 0:
            block = b"x" * size  # touched: resident
            time.sleep(data["hold"])
            os._exit(len(block) and 0)
        children.append(pid)
    held = []
    try:
        for _ in range(data["processes"]):
            held.append(b"x" * size)
    except MemoryError:
        errors.append("MemoryError")
    time.sleep(data["hold"] if children else 0)
    for pid in children:
        os.waitpid(pid, 0)
    return lab.confirmed("held", {"children": len(children), "errors": errors, "held_mb": len(held) * data["mb"]},
                         method="snippet")


def hang(data, lab):
    time.sleep(600)


def ok(data, lab):
    return lab.confirmed("fine", {"n": data.get("n")}, method="snippet")


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def runner():
    """One lazy (torch-free) sandboxed worker for the attacks; the secret is in amplint's env."""
    if NO_SANDBOX:
        pytest.skip(f"no sandbox on this machine: {NO_SANDBOX}")
    os.environ["AMPLINT_TEST_SECRET"] = SECRET
    try:
        with Runner(device="cpu", timeout=20, extra_sys_path=[HERE], lazy=True) as r:
            r.start()
            yield r
    finally:
        os.environ.pop("AMPLINT_TEST_SECRET", None)


def _run(runner, name, data=None, timeout=None):
    return runner.run("TEST", data or {}, target=f"{T}:{name}", timeout=timeout)


def _still_warm(runner, worker):
    v = _run(runner, "ok", {"n": 1})
    assert v["verdict"] == "confirmed" and v["evidence"] == {"n": 1}, v
    assert runner.pid == worker, "an attack cost the warm worker"


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _diag(verification):
    return Diagnostic(
        code="AMP301", name="x", message="m", severity=Severity.ERROR, filename="train.py",
        location=Location(3, 1), end_location=Location(3, 9), verification=verification,
    )


# ------------------------------------------------------------------ tests


def test_the_sandbox_reports_its_layers(runner):
    layers = " ".join(runner.layers)
    assert "bubblewrap" in layers and "namespaces" in layers and "rlimits" in layers, runner.layers


def test_writes_stay_in_the_findings_temp_folder(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the unconfined control run below writes into its cwd
    targets = [
        str(tmp_path / "outside.txt"),
        os.path.join(ROOT, "amplint", "pwned.py"),
        os.path.join(os.path.expanduser("~"), "amplint-pwned"),
        "/tmp/amplint-pwned-" + uuid.uuid4().hex,
        "/etc/amplint-pwned",
    ]
    # the attack is real: the same code, unconfined, writes the first file
    attack_write_outside({"paths": targets[:1]}, type("L", (), {"confirmed": staticmethod(lambda s, e, **_: e)})())
    assert (tmp_path / "outside.txt").exists()
    (tmp_path / "outside.txt").unlink()

    v = _run(runner, "attack_write_outside", {"paths": targets})
    assert v["verdict"] == "confirmed", v
    assert v["evidence"]["cwd"][0] == "ok", v  # its own folder is writable
    for path in targets:
        assert not os.path.exists(path), f"the sandbox let the code write {path}"
        assert v["evidence"][path][0] == "refused", v


def test_module_attribute_chains_reach_nothing_outside(runner, tmp_path):
    out = tmp_path / "escaped"
    out.mkdir()
    v = _run(runner, "attack_chains", {"out": str(out)}, timeout=180)  # this finding imports torch
    assert v["verdict"] == "confirmed", v
    assert v["evidence"]["system"] in (["ok", "-1"], ["ok", "32512"]), v  # system() could not spawn: no new process (seccomp)
    for how in ("spawn", "import"):
        assert v["evidence"][how][0] == "refused" and "PermissionError" in v["evidence"][how][1], v
    for how in ("exec", "open"):  # the code ran; the host's folder is not there to write
        assert v["evidence"][how][0] == "refused", v
    time.sleep(0.2)
    assert os.listdir(out) == [], "the finding wrote outside the sandbox"


def test_no_network_even_to_localhost(runner):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.5)
    got = []

    def accept():
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            got.append(conn.recv(1000))
            conn.close()

    listener = threading.Thread(target=accept)
    listener.start()
    try:
        socket.create_connection(srv.getsockname(), timeout=3).close()  # the listener is reachable from here
        v = _run(runner, "attack_socket", {"port": srv.getsockname()[1]})
    finally:
        listener.join()
        srv.close()
    assert got == [b""], f"the finding reached the listener: {got}"
    assert v["evidence"]["connect"][0] == "refused", v


def test_no_environment_secret_reaches_the_code(runner):
    assert os.environ["AMPLINT_TEST_SECRET"] == SECRET  # amplint itself has it
    v = _run(runner, "attack_env", {"secret": SECRET})
    assert v["verdict"] == "confirmed" and v["evidence"]["found"] is False, v
    assert "AMPLINT_TEST_SECRET" not in v["evidence"]["keys"], v
    assert SECRET not in json.dumps(v)


def test_hard_limits_cannot_be_raised(runner):
    v = _run(runner, "attack_rlimits")
    for name, (outcome, detail) in v["evidence"].items():
        assert outcome == "refused", f"{name} was raised: {detail}"


@pytest.mark.parametrize("attack", ["attack_setsid_survivor", "attack_posix_spawn"])
def test_no_process_survives_its_finding(runner, attack):
    marker = f"amplint-attack-{uuid.uuid4().hex}"
    worker = runner.pid
    try:
        v = _run(runner, attack, {"marker": marker})
        assert v["verdict"] == "confirmed", v
        for how, (outcome, detail) in v["evidence"].items():  # refused: a finding starts no process
            assert outcome == "refused" and "PermissionError" in detail, (how, detail)
        assert wait_gone(marker, 10), f"{attack}: a process outlived its finding"
    finally:
        kill_marked(marker)
    _still_warm(runner, worker)


def test_a_fork_bomb_is_bounded_and_cleaned_up(runner):
    worker = runner.pid
    v = _run(runner, "attack_fork_bomb", timeout=20)
    # refused for root too (the kernel does not apply RLIMIT_NPROC to uid 0; seccomp binds everyone)
    assert v["verdict"] == "confirmed" and v["evidence"] == {"children": 0, "error": "PermissionError"}, v
    _still_warm(runner, worker)


def test_the_protocol_cannot_be_forged(runner):
    worker = runner.pid
    v = _run(runner, "attack_protocol")
    # its own verdict: only what its own process returned (its own result pipe got garbage first)
    assert v.get("summary") != "FORGED" or v["verdict"] == "not-reproduced" and "written" in v["evidence"], v
    written = v.get("evidence", {}).get("written", {})
    leaked = [p for p, how in written.items() if how == "wrote" and not p.startswith("/proc/self/") and not p.startswith("fd")]
    assert not leaked, f"the finding opened another process's descriptors: {leaked}"
    for n in range(2, 6):  # later findings get their own verdicts, not the forged ones
        later = _run(runner, "ok", {"n": n})
        assert later["verdict"] == "confirmed" and later["evidence"] == {"n": n}, later
    assert runner.pid == worker and runner.restarts == 0


INJECTION = "boom\n::error file=train.py,line=1::forged\r\x1b[2J\x1b[31mred\x07\u202egnp.exe\x00::warning::x"


@pytest.mark.parametrize("attack", ["attack_inject", "attack_inject_summary"])
def test_injected_text_is_inert_in_every_format(runner, attack):
    v = _run(runner, attack, {"message": INJECTION})
    assert v["verdict"] in ("error", "confirmed"), v
    assert "::error file=train.py" in json.dumps(v)  # the text came back, escaped
    for string in _strings(v):  # every string as it is, keys included
        for raw in ("\n", "\r", "\x1b", "\x07", "\u202e", "\x00"):
            assert raw not in string, (raw, string)
    for fmt in sorted(FORMATS):
        out = renderer(fmt)([_diag(v)])
        assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out, fmt
        for line in out.splitlines():
            assert not line.lstrip().startswith("::error file=train.py,line=1::forged"), (fmt, line)
            assert not line.lstrip().startswith("::warning::x"), (fmt, line)


def test_print_floods_stay_bounded(runner, tmp_path):
    before = shutil.disk_usage(runner.workdir).used
    v = _run(runner, "attack_print_flood", {"seconds": 4})
    assert v["verdict"] == "confirmed" and v["evidence"]["mb"] > 10, v  # it flooded, and still got its verdict
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(runner.workdir) for f in fs)
    assert size < 1 << 20, f"the flood reached the disk: {size} bytes under {runner.workdir}"
    assert shutil.disk_usage(runner.workdir).used - before < 64 << 20


def test_temp_files_are_capped(runner):
    v = _run(runner, "attack_fill_tmp")
    assert v["evidence"]["error"] in ("OSError",), v  # ENOSPC from the size-capped tmpfs
    assert v["evidence"]["mb"] <= 256, v


@pytest.fixture
def session_key():
    """A user key in this process's session keyring (where a CI runner keeps its token),
    readable by its possessor and by its user: what the finding must not read."""
    import ctypes

    if not IS_X86_64:
        pytest.skip("raw keyring calls are written for x86_64")
    description = f"amplint-test-{uuid.uuid4().hex}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    serial = libc.syscall(ctypes.c_long(NR["add_key"]), b"user", description.encode(), SECRET.encode(),
                          ctypes.c_size_t(len(SECRET)), ctypes.c_long(KEY_SPEC_SESSION_KEYRING))
    if serial < 0:
        pytest.skip(f"this machine refuses keyrings: {os.strerror(ctypes.get_errno())}")
    libc.syscall(ctypes.c_long(NR["keyctl"]), ctypes.c_long(5), ctypes.c_long(serial), ctypes.c_long(0x3F3F0000))  # SETPERM
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(ctypes.c_long(NR["keyctl"]), ctypes.c_long(KEYCTL_READ), ctypes.c_long(serial), buf, ctypes.c_long(4096))
    assert buf.raw[:n].decode() == SECRET  # the key is real and readable here
    try:
        yield {"serial": serial, "description": description}
    finally:
        libc.syscall(ctypes.c_long(NR["keyctl"]), ctypes.c_long(21), ctypes.c_long(serial))  # INVALIDATE


def test_the_callers_session_keyring_is_out_of_reach(runner, session_key):
    v = _run(runner, "attack_keyring", session_key)
    assert v["verdict"] == "confirmed", v
    assert SECRET not in json.dumps(v), "the finding read the caller's key"
    ev = v["evidence"]
    assert ev["read"][1] == "EPERM" and ev["search"][1] == "EPERM", ev  # no keyring call at all
    assert "fresh session keyring" in " ".join(runner.layers), runner.layers


def test_pathname_unix_sockets_are_unreachable():
    """A world-connectable socket in a folder the sandbox sees (as under /usr, the Python prefix, /sys)."""
    import tempfile

    # short (AF_UNIX paths hold ~100 bytes), and not under /tmp, which the sandbox replaces
    folder = tempfile.mkdtemp(prefix="amplint-sock-", dir="/var/tmp" if os.path.isdir("/var/tmp") else HERE)
    path = os.path.join(folder, "s")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(folder, 0o755)
    os.chmod(path, 0o777)
    srv.listen(5)
    srv.settimeout(0.5)
    got = []

    def serve():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            got.append(conn.recv(100))
            conn.sendall(SECRET.encode())
            conn.close()

    listener = threading.Thread(target=serve)
    listener.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:  # reachable from here
            probe.connect(path)
            probe.sendall(b"probe")
            assert probe.recv(1000).decode() == SECRET
        with Runner(device="cpu", timeout=20, extra_sys_path=[HERE, folder], lazy=True) as r:
            v = r.run("TEST", {"path": path}, target=f"{T}:attack_unix_socket")
    finally:
        listener.join()
        srv.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert got == [b"probe"], f"the finding reached the socket: {got}"
    assert v["evidence"]["connect"][0] == "refused" and SECRET not in json.dumps(v), v


@pytest.mark.skipif(not IS_X86_64, reason="raw system calls are written for x86_64")
def test_kernel_surfaces_are_refused(runner):
    v = _run(runner, "attack_kernel_surfaces")
    assert v["verdict"] == "confirmed", v
    ev = v["evidence"]
    for name in ("io_uring_setup", "userfaultfd", "ptrace", "bpf", "unshare", "perf_event_open", "mount"):
        assert ev[name][1] == "EPERM", (name, ev[name])
    assert ev["clone3"][1] == "ENOSYS", ev["clone3"]  # the C library then falls back to clone()
    assert ev["inet"][0] == "refused" and ev["fork"][0] == "refused", ev
    assert ev["thread"] == ["ok", "[1]"], ev  # threads still work
    assert "seccomp" in " ".join(runner.layers), runner.layers


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants, from the host's /proc."""
    parents, rss = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                parents[int(name)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{name}/statm", "rb") as fh:
                rss[int(name)] = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, pp in parents.items():
            if pp == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(rss.get(pid, 0) for pid in tree)


def test_a_findings_memory_is_bounded_in_all():
    """Four processes of 300 MB each, under a 256 MB bound: the total is what is bounded."""
    with Runner(device="cpu", timeout=30, extra_sys_path=[HERE], lazy=True, memory_mb=256) as r:
        r.start()
        baseline = _tree_rss(r.pid)
        peak, done = [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], _tree_rss(r.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            v = r.run("TEST", {"mb": 300, "processes": 4, "hold": 2}, target=f"{T}:attack_memory")
        finally:
            done.set()
            sampler.join()
        layers = " ".join(r.layers)
    assert v["verdict"] == "confirmed", v
    assert v["evidence"]["children"] == 0 and "PermissionError" in v["evidence"]["errors"], v
    assert v["evidence"]["held_mb"] <= 256 and "MemoryError" in v["evidence"]["errors"], v
    grown = peak[0] - baseline
    assert grown < (256 + 128) << 20, f"the sandbox grew by {grown >> 20} MB under a 256 MB bound"
    assert "memory: one process per finding" in layers and "no cgroup v2" in layers, layers


def test_verify_starts_from_a_venv_under_tmp(tmp_path):
    """A newcomer's venv in /tmp: its interpreter is bound over the sandbox's private /tmp."""
    import tempfile
    import venv

    home = tempfile.mkdtemp(prefix="amplint-venv-", dir="/tmp")
    try:
        venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
        python = os.path.join(home, "bin", "python")
        site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        assert site_dir.startswith("/tmp/")
        here_site = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
        with open(os.path.join(site_dir, "amplint-test.pth"), "w") as fh:  # this venv's packages, and the checkout
            fh.write("\n".join([ROOT, *here_site]) + "\n")
        host_secret = os.path.join("/tmp", f"amplint-host-{uuid.uuid4().hex}")
        with open(host_secret, "w") as fh:
            fh.write(SECRET)
        code = (
            "import json, sys\n"
            "from amplint.verify import Runner\n"
            f"with Runner(device='cpu', timeout=20, extra_sys_path=[{HERE!r}], lazy=True) as r:\n"
            f"    v = r.run('TEST', {{'paths': [{host_secret!r}, {os.path.join(site_dir, 'pwned.py')!r}]}}, target='{T}:attack_read_and_write')\n"
            "    print(json.dumps(v))\n"
        )
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                              env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "execvp" not in proc.stderr
        v = json.loads(proc.stdout.strip().splitlines()[-1])
        assert v["verdict"] == "confirmed", v
        assert v["evidence"][host_secret][0] == "refused" and SECRET not in json.dumps(v), v  # the host's /tmp stays out
        assert not os.path.exists(os.path.join(site_dir, "pwned.py")), "the venv under /tmp was writable"
        os.unlink(host_secret)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_budget_spent_after_the_total(tmp_path):
    with Runner(device="cpu", timeout=3, budget=4, extra_sys_path=[HERE], lazy=True) as r:
        r.start()
        verdicts = [r.run("TEST", {}, target=f"{T}:hang") for _ in range(4)]
    reasons = [v["reason"] for v in verdicts]
    assert reasons[0].startswith("timeout after 3"), reasons
    assert reasons[-1] == "budget spent" and reasons[-2] == "budget spent", reasons
    assert all(v["verdict"] == "inconclusive" for v in verdicts)


@needs_sandbox
def test_unsandboxed_mode_still_reaps_and_confines(tmp_path):
    """--verify-unsandboxed: no namespaces, but the subreaper, Landlock and rlimits still hold."""
    marker = f"amplint-attack-{uuid.uuid4().hex}"
    try:
        with Runner(device="cpu", timeout=20, extra_sys_path=[HERE], lazy=True, unsandboxed=True) as r:
            r.start()
            assert r.layers[0].startswith("no sandbox"), r.layers
            assert any(layer.startswith("seccomp") for layer in r.layers), r.layers
            v = r.run("TEST", {"marker": marker}, target=f"{T}:attack_setsid_survivor")
            assert v["verdict"] == "confirmed" and wait_gone(marker, 10), v
            assert v["evidence"]["setsid"][0] == "refused", v
            if any(layer.startswith("landlock") for layer in r.layers):
                v = r.run("TEST", {"paths": [str(tmp_path / "out.txt")]}, target=f"{T}:attack_write_outside")
                assert not (tmp_path / "out.txt").exists(), v
    finally:
        kill_marked(marker)


# ------------------------------------------------------------------ end to end: the user's own code


def _amplint(args, cwd, env=None, **kwargs):
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "amplint.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=600, **kwargs)


HOSTILE = '''import torch


def attend(scores, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = scores.masked_fill(mask | bool({attack}), -1e9)
    return scores
'''


@needs_sandbox
def test_hostile_flagged_expressions_do_nothing_outside(tmp_path):
    """Module attribute chains to os, sys and builtins, exec through them: they run, confined."""
    out = tmp_path / "escaped"
    out.mkdir()
    attacks = {
        "system": f'torch.os.system("echo x > {out}/system")',
        "exec": f'torch.sys.modules["builtins"].exec("open({str(out / "exec")!r}, \'w\').write(\'x\')")',
        "spawn": f'torch.os.posix_spawn("/bin/sh", ["sh", "-c", "echo x > {out}/spawn"], {{}})',
        "env": 'torch.sys.modules["builtins"].print(torch.os.environ.get("AMPLINT_TEST_SECRET"))',
    }
    tree = tmp_path / "repo"
    tree.mkdir()
    for name, attack in attacks.items():
        (tree / f"{name}.py").write_text(HOSTILE.format(attack=attack))
    # the attacks are real: evaluated unconfined, with `torch` standing for the module, they write
    import types

    fake = types.SimpleNamespace(os=os, sys=sys)
    for name in ("system", "exec", "spawn"):
        eval(attacks[name], {"torch": fake})
    deadline = time.monotonic() + 10
    while len(os.listdir(out)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(os.listdir(out)) == ["exec", "spawn", "system"]
    for f in os.listdir(out):
        os.unlink(out / f)

    proc = _amplint(["--verify", "--device", "cpu", "--no-cache", "--output-format", "json", "."], cwd=str(tree),
                    env={"AMPLINT_TEST_SECRET": SECRET})
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)
    verified = {f["filename"].split("/")[-1]: f["verification"] for f in findings if f.get("verification")}
    assert set(verified) >= {f"{n}.py" for n in attacks}
    # the user's own expression ran, confined: the spawn it makes is refused (a finding starts no process)
    assert "raised PermissionError" in verified["spawn.py"]["reason"], verified["spawn.py"]
    time.sleep(0.5)
    assert os.listdir(out) == [], "user code wrote outside the sandbox"
    assert SECRET not in proc.stdout + proc.stderr
    assert "verify sandbox: bubblewrap" in proc.stderr


@pytest.mark.parametrize(
    "table,message",
    [
        ("timeout = 1e9", "up to 600"),
        ("timeout = inf", "positive, finite"),
        ("timeout = nan", "positive, finite"),
        ("timeout = -1", "positive, finite"),
        ("budget = 1e12", "up to 3600"),
        ('timeout = "60"', "positive, finite"),
    ],
)
def test_hostile_timeouts_in_config_are_refused(tmp_path, table, message):
    (tmp_path / "pyproject.toml").write_text(f"[tool.amplint.verify]\n{table}\n")
    (tmp_path / "t.py").write_text("x = 1\n")
    proc = _amplint(["--verify", "t.py"], cwd=str(tmp_path))
    assert proc.returncode == 2, proc
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--verify-timeout=nan", "--verify-timeout=inf", "--verify-timeout=601", "--verify-budget=0"])
def test_hostile_timeouts_on_the_command_line_are_refused(tmp_path, flag):
    (tmp_path / "t.py").write_text("x = 1\n")
    proc = _amplint(["--verify", flag, "t.py"], cwd=str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_no_sandbox_means_no_user_code_unless_asked(tmp_path):
    """Where bwrap cannot start, --verify refuses plainly; --verify-unsandboxed says it ran bare."""
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "a.py").write_text(HOSTILE.format(attack="0"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    proc = _amplint(["--verify", "--device", "cpu", "--no-cache", "a.py"], cwd=str(tree), env=env)
    assert proc.returncode == 2, proc
    assert "No permissions to create new namespace" in proc.stderr and "--verify-unsandboxed" in proc.stderr, proc.stderr
    assert "verify:" not in proc.stdout
    proc = _amplint(["--verify", "--verify-unsandboxed", "--device", "cpu", "--no-cache", "a.py"], cwd=str(tree), env=env)
    assert proc.returncode == 1, proc.stderr
    assert "verify sandbox: no sandbox" in proc.stderr and "verify: " in proc.stdout


def test_sigterm_removes_temp_folders_and_processes(tmp_path):
    marker = f"amplint-term-{uuid.uuid4().hex}"
    tree = tmp_path / "repo"
    tree.mkdir()
    name = comm(marker).encode()  # the finding names itself (it may start no process), then hangs
    hang = f'bool(torch.sys.modules["ctypes"].CDLL(None).prctl(15, {name!r}, 0, 0, 0)) | bool(torch.sys.modules["time"].sleep(600))'
    (tree / "a.py").write_text(HOSTILE.format(attack=hang))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp))
    args = ["--verify", "--device", "cpu", "--no-cache", "a.py"]
    if NO_SANDBOX:
        args.insert(1, "--verify-unsandboxed")
    proc = subprocess.Popen([sys.executable, "-m", "amplint.cli", *args], cwd=str(tree), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        from tests.procs import wait_seen

        assert wait_seen(marker, 300), "the hanging snippet never started"
        assert os.listdir(tmp), "no temp folder while verifying?"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert wait_gone(marker, 15), "the finding's processes outlived amplint"
        assert os.listdir(tmp) == [], f"temp folders left behind: {os.listdir(tmp)}"
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


def test_clean_text_leaves_no_line_breaker_or_control():
    from amplint.verify.escape import clean_text

    hostile = "".join(chr(c) for c in range(0x20)) + "\x7f\x85\x9b\u2028\u2029\u202e\u2066\ufeff" + "::error ok é 中"
    cleaned = clean_text(hostile, limit=10_000)
    assert cleaned.splitlines() == [cleaned], "a line break survived"
    assert cleaned.isprintable(), repr(cleaned)
    assert cleaned.endswith("::error ok é 中") and "\\n" in cleaned and "\\x1b" in cleaned and "\\u202e" in cleaned
    assert len(clean_text("x" * 5000)) == 600


# ------------------------------------------------------------------ the per-finding process, directly


def _link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _forked(body, timeout=10.0, close=()):
    from amplint.verify.forked import Limits, run_forked

    return run_forked(body, Limits(memory_mb=0), timeout, list(close))


def test_a_findings_reply_is_parsed_strictly():
    ok_ = _forked(lambda: {"verdict": "confirmed", "method": "snippet", "summary": "s"})
    assert ok_.result == {"verdict": "confirmed", "method": "snippet", "summary": "s"}, ok_.problem
    for body in (
        lambda: {"verdict": "maybe"},
        lambda: {"verdict": "confirmed", "method": "snippet\n::error::x"},
        lambda: ["confirmed"],
    ):
        out = _forked(body)
        assert out.result is None and out.problem.startswith("bad reply"), out.problem
    out = _forked(lambda: {"verdict": "confirmed", "x": float("nan")})  # not JSON: the child cannot send it
    assert out.result is None and "exit code 70" in out.problem, out.problem


def test_a_finding_cannot_reach_the_workers_descriptors_or_outlive_its_timeout():
    proto_r, proto_w = os.pipe()
    try:
        link = f"pipe:[{os.fstat(proto_w).st_ino}]"
        ours = {_link(fd) for fd in os.listdir("/proc/self/fd")}  # pytest's own pipes: not the finding's
        line = b'{"op": "result", "id": 1, "result": {"verdict": "not-reproduced"}}\n'

        def forge():
            # the protocol pipe by its number, by its inode among all open fds, and its own result pipe
            targets = {proto_w} | {int(fd) for fd in os.listdir("/proc/self/fd") if _link(fd) == link}
            targets |= {int(fd) for fd in os.listdir("/proc/self/fd") if _link(fd).startswith("pipe:") and _link(fd) not in ours}
            for fd in targets:
                try:
                    os.write(fd, line)
                except OSError:
                    pass
            return {"verdict": "confirmed", "method": "experiment"}

        out = _forked(forge, close=[proto_w])
        os.set_blocking(proto_r, False)
        with pytest.raises(BlockingIOError):
            os.read(proto_r, 100)  # nothing reached the worker's protocol pipe
        assert out.result is None and out.problem.startswith("bad reply"), out.problem  # its own pipe: garbage first
    finally:
        os.close(proto_r)
        os.close(proto_w)
    out = _forked(lambda: time.sleep(60), timeout=1)
    assert out.kind == "timeout" and out.problem == "timeout after 1 s"
    out = _forked(lambda: os._exit(3))
    assert out.problem.endswith("(exit code 3)")
    printed = _forked(lambda: (os.write(1, b"y" * 60_000), os.write(2, b"z" * 40_000), {"verdict": "confirmed"})[2])
    assert printed.result and printed.output_bytes == 100_000 and printed.output_tail == b"z" * 4000
