"""Hostile paths in the linted tree: pipes, sockets and devices are never opened, a symbolic
link loop named on the command line is a usage error, an unreadable folder is reported.

Runs that could hang are separate processes with a timeout, so a regression fails the test
instead of hanging the suite.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from amplint import Config, lint_paths
from amplint.engine.parallel import open_cache
from amplint.core.safe_read import NotRegularFile, read_bytes
from tests.privileges import permissions_enforced

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
AMPLINT = [sys.executable, "-c", "import sys; from amplint._start import main; sys.exit(main())"]

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX file types")


def _run(args, cwd, timeout=120):
    return subprocess.run([*AMPLINT, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _lines_for(output: str, name: str):
    return [line for line in output.splitlines() if line.startswith(f"{name}:") or line.startswith(f"./{name}:")]


@pytest.fixture
def hostile(tmp_path):
    """A folder with a finding in good.py and a pipe, a socket and two devices named *.py."""
    (tmp_path / "good.py").write_text(BAD)
    os.mkfifo(tmp_path / "pipe.py")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a short relative name: AF_UNIX paths are limited to ~100 bytes
    try:
        sock.bind("sock.py")
    finally:
        os.chdir(cwd)
    (tmp_path / "zero.py").symlink_to("/dev/zero")  # read, it never ends
    (tmp_path / "null.py").symlink_to("/dev/null")
    yield tmp_path
    sock.close()


EXPECTED = {
    "pipe.py": "AMP000 cannot lint: not a regular file (a named pipe)",
    "sock.py": "AMP000 cannot lint: not a regular file (a socket)",
    "zero.py": "AMP000 cannot lint: not a regular file (a character device)",
    "null.py": "AMP000 cannot lint: not a regular file (a character device)",
}


@pytest.mark.parametrize("args", [["--no-cache", "--jobs", "1"], ["--jobs", "2"], ["--jobs", "1"]], ids=["serial", "jobs2+cache", "cache"])
def test_pipes_sockets_devices_are_skipped_with_one_line(hostile, args, tmp_path_factory):
    cache = ["--cache-dir", str(tmp_path_factory.mktemp("cache"))] if "--no-cache" not in args else []
    for _ in range(2 if cache else 1):  # cold, then warm
        out = _run(["--isolated", *args, *cache, "."], cwd=hostile)
        assert out.returncode == 1, out.stderr
        assert "Traceback" not in out.stderr
        for name, message in EXPECTED.items():
            lines = _lines_for(out.stdout, name)
            if name in ("zero.py", "null.py"):  # links out of the project: a note, never opened
                assert lines == [], (name, out.stdout)
                assert f"amplint: warning: ./{name}: not linted: a symbolic link to a file outside the project" in out.stderr
                continue
            assert len(lines) == 1 and lines[0].endswith(f":1:1: {message}"), (name, out.stdout)
        assert [line.split(": ", 1)[0].rsplit(":", 2)[0] for line in _lines_for(out.stdout, "good.py")] == ["./good.py"]
        assert " AMP101 " in _lines_for(out.stdout, "good.py")[0]


def test_named_on_the_command_line_too(hostile):
    out = _run(["--isolated", "--no-cache", "pipe.py", "zero.py", "good.py"], cwd=hostile)
    assert out.returncode == 1
    assert _lines_for(out.stdout, "pipe.py") == ["pipe.py:1:1: " + EXPECTED["pipe.py"]]
    assert _lines_for(out.stdout, "zero.py") == ["zero.py:1:1: " + EXPECTED["zero.py"]]


def test_pipes_where_amplint_reads_metadata_are_never_opened(tmp_path):
    """A pipe as .gitignore, as .git (a worktree's pointer file), or planted under a cache store's
    name: the run neither blocks nor fails."""
    (tmp_path / "good.py").write_text(BAD)
    os.mkfifo(tmp_path / ".gitignore")
    os.mkfifo(tmp_path / ".git")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    os.mkfifo(open_cache(Config(), str(cache_dir)).path)
    out = _run(["--isolated", "--cache-dir", str(cache_dir), "."], cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert " AMP101 " in _lines_for(out.stdout, "good.py")[0]


def test_pipes_named_like_requirement_files_are_never_opened(tmp_path):
    """The torch-version floor is read from the project's files: pipes there are skipped."""
    (tmp_path / "good.py").write_text(BAD)
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(install_requires=['numpy'])\n")
    os.mkfifo(tmp_path / "requirements.txt")
    os.mkfifo(tmp_path / "requirements-dev.txt")
    out = _run(["--no-cache", "."], cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert " AMP101 " in _lines_for(out.stdout, "good.py")[0]


def test_read_bytes_refuses_without_opening(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "p")
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    with pytest.raises(NotRegularFile) as err:
        read_bytes(str(tmp_path / "p"))
    assert err.value.what == "a named pipe" and opened == []
    (tmp_path / "f.py").write_bytes(b"x = 1\n")
    assert read_bytes(str(tmp_path / "f.py")) == b"x = 1\n"
    with pytest.raises(IsADirectoryError):
        read_bytes(str(tmp_path))


@pytest.mark.parametrize("target", ["loop1", "loop1.py", "sub/../loop1"])
def test_symlink_loop_on_the_command_line_exits_2_with_one_line(tmp_path, target):
    (tmp_path / "sub").mkdir()
    for a, b in (("loop1", "loop2"), ("loop2", "loop1"), ("loop1.py", "loop2.py"), ("loop2.py", "loop1.py")):
        (tmp_path / a).symlink_to(b)
    (tmp_path / "good.py").write_text(BAD)
    out = _run([target, "good.py"], cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == f"amplint: error: {target}: symbolic link loop (too many levels of symbolic links)\n"


def test_symlink_loop_inside_a_walked_folder_is_a_finding(tmp_path):
    (tmp_path / "loop1.py").symlink_to("loop2.py")
    (tmp_path / "loop2.py").symlink_to("loop1.py")
    (tmp_path / "good.py").write_text(BAD)
    out = _run(["--isolated", "--no-cache", "."], cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert _lines_for(out.stdout, "loop1.py") == ["./loop1.py:1:1: AMP000 cannot lint: Too many levels of symbolic links"]


def test_unreadable_folder_is_named_in_one_amp000_line(tmp_path):
    (tmp_path / "good.py").write_text(BAD)
    locked = tmp_path / "pkg" / "locked"
    locked.mkdir(parents=True)
    (locked / "hidden_finding.py").write_text(BAD)
    locked.chmod(0)
    try:
        with permissions_enforced():  # root too is refused by the kernel: a real EACCES
            result = lint_paths([str(tmp_path)], Config())
    finally:
        locked.chmod(0o755)
    mine = [d for d in result.diagnostics if d.filename == str(locked)]
    assert [(d.code, d.message) for d in mine] == [("AMP000", "cannot read folder: permission denied; its files were not linted")]
    assert [d.code for d in result.diagnostics if d.filename == str(tmp_path / "good.py")] == ["AMP101"]
    assert str(locked / "hidden_finding.py") not in result.files


def test_unreadable_folder_given_on_the_command_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "a.py").write_text(BAD)
    locked.chmod(0)
    try:
        with permissions_enforced():
            result = lint_paths([str(locked)], Config())
    finally:
        locked.chmod(0o755)
    assert [(d.filename, d.code) for d in result.diagnostics] == [(str(locked), "AMP000")]


def test_unreadable_folder_is_silent_without_amp000(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        with permissions_enforced():
            result = lint_paths([str(tmp_path)], Config(ignore=("AMP000",)))
    finally:
        locked.chmod(0o755)
    assert result.diagnostics == []


# ------------------------------------------------------------------ links out of the project (issue 24 item 5)


OUTSIDE = BAD.replace("scaler.update()", "scaler.update()  # OUTSIDE-SECRET-7f3a")


def _escape_tree(tmp_path):
    """A repository whose files link to the user's cache key and to a training script elsewhere."""
    machine = tmp_path / "home-cache"
    (machine / "amplint").mkdir(parents=True)
    key = machine / "amplint" / "cache-key"
    key.write_bytes(b"\xfe" + os.urandom(31))  # not UTF-8 from its first byte
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret_train.py").write_text(OUTSIDE)
    (elsewhere / "pkg").mkdir()
    (elsewhere / "pkg" / "deep.py").write_text(OUTSIDE)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[tool.amplint]\n")
    (repo / "good.py").write_text(BAD)
    (repo / "key.py").symlink_to(key)
    (repo / "train_link.py").symlink_to(elsewhere / "secret_train.py")
    (repo / "vendor").symlink_to(elsewhere / "pkg")  # a folder link: never walked
    (repo / "inside.py").symlink_to(repo / "good.py")  # a link inside the project is linted
    env = dict(os.environ, XDG_CACHE_HOME=str(machine))
    return repo, key, env


@pytest.mark.parametrize("fmt", ["text", "sarif", "json", "github"])
def test_links_out_of_the_project_are_not_read(tmp_path, fmt):
    repo, key, env = _escape_tree(tmp_path)
    out = subprocess.run([*AMPLINT, "--output-format", fmt, "--jobs", "1", "."], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    both = out.stdout + out.stderr
    assert "OUTSIDE-SECRET" not in both, "a line of a file outside the project was printed"
    assert "0xfe" not in both and "key.py" not in out.stdout and "train_link.py" not in out.stdout, out.stdout
    assert "good.py" in out.stdout and "inside.py" in out.stdout  # in-project files and links still linted
    notes = [line for line in out.stderr.splitlines() if "outside the project" in line]
    assert sorted(n.split(": ", 3)[2] for n in notes) == ["./key.py", "./train_link.py"], out.stderr
    assert all(n.startswith("amplint: warning: ") and n.endswith("(name it on the command line to lint it)") for n in notes)
    assert "Traceback" not in out.stderr


def test_a_link_named_on_the_command_line_is_linted(tmp_path):
    repo, key, env = _escape_tree(tmp_path)
    out = subprocess.run([*AMPLINT, "--no-cache", "train_link.py"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and " AMP101 " in out.stdout, out.stdout + out.stderr


# ------------------------------------------------------------------ nesting no parser can hold (issue 24 item 6)


@pytest.mark.parametrize("value", ["[" * 50_000 + "]" * 50_000, "{a = " * 50_000 + "1" + "}" * 50_000], ids=["arrays", "inline-tables"])
def test_a_pyproject_nested_50000_deep_is_one_line(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(f"[tool.amplint]\nselect = {value}\n")
    (tmp_path / "good.py").write_text(BAD)
    out = _run(["good.py"], cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr == f"amplint: error: {tmp_path / 'pyproject.toml'}: invalid TOML: arrays or tables nested too deeply to read\n"


def test_a_notebook_nested_50000_deep_is_one_finding_and_the_rest_is_linted(tmp_path):
    (tmp_path / "nb.ipynb").write_text("[" * 50_000 + "]" * 50_000)
    (tmp_path / "good.py").write_text(BAD)
    out = _run(["--isolated", "--no-cache", "--output-format", "concise", "."], cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "nb.ipynb:1:1: AMP000 cannot lint: invalid notebook JSON: arrays or objects nested too deeply to read" in out.stdout
    assert " AMP101 " in out.stdout
