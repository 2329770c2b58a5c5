"""The per-file time budget (amplint/engine/budget.py): a file whose analysis runs too long is
reported as one AMP000 line and the run goes on, serially and with worker processes."""
from __future__ import annotations

import threading
import time

import pytest
from click.testing import CliRunner

from amplint import Config, lint_paths
from amplint.engine import parallel
from amplint.engine.budget import BudgetExceeded, file_budget, wait
from amplint.engine.cache import Cache
from amplint.cli import main
from amplint.engine.pipeline import TIMEOUT_NAME

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
SLOW = BAD + "# slow-marker\n"
#: the budget of these tests: the slow file naps far past it; the good one (six lines, libcst
#: and the model imported beforehand by the `project` fixture) needs milliseconds of it, so a
#: loaded machine does not time it out
BUDGET = 2
MESSAGE = f"analysis took longer than {BUDGET} s; skipped"


@pytest.fixture
def slow_rule(monkeypatch):
    """AMP101 sleeps (in short naps, up to a minute) on files holding the marker."""
    from amplint.engine.registry import rules_by_code

    rule = rules_by_code()["AMP101"]
    original = rule.check
    naps = []

    def check(self, ctx):
        if "slow-marker" in ctx.source:
            for _ in range(1200):
                naps.append(1)
                time.sleep(0.05)
        return original(self, ctx)

    monkeypatch.setattr(rule, "check", check)
    return naps


@pytest.fixture
def project(tmp_path):
    from amplint import lint_source

    lint_source(BAD, "warm.py", Config())  # imports libcst, the model and the rule outside any budget
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "good.py").write_text(BAD)
    return tmp_path


def _by_file(result):
    out = {}
    for d in result.diagnostics:
        out.setdefault(d.filename.rsplit("/", 1)[-1], []).append((d.code, d.name if d.code == "AMP000" else "", d.message if d.code == "AMP000" else ""))
    return out


def _assert_skipped_and_went_on(result):
    found = _by_file(result)
    assert found["slow.py"] == [("AMP000", TIMEOUT_NAME, MESSAGE)], found
    assert [c for c, _, _ in found["good.py"]] == ["AMP101"], found


def _lint_threads():
    return [t for t in threading.enumerate() if t.name == "amplint-lint"]


def test_slow_file_is_skipped_serially(project, slow_rule):
    result = lint_paths([str(project)], Config(file_timeout=BUDGET), jobs=1)
    _assert_skipped_and_went_on(result)
    # the abandoned analysis thread is told to stop: it does, at its next nap
    for _ in range(400):
        if not _lint_threads():
            break
        time.sleep(0.05)
    assert not _lint_threads()
    assert len(slow_rule) < 1200


def test_slow_file_is_skipped_with_worker_processes(project, slow_rule, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_FILES", 1)
    used = []
    real = parallel._run_parallel
    monkeypatch.setattr(parallel, "_run_parallel", lambda todo, jobs: used.append(jobs) or real(todo, jobs))
    result = lint_paths([str(project)], Config(file_timeout=BUDGET), jobs=2)
    assert used == [2]
    _assert_skipped_and_went_on(result)


def test_no_budget_means_no_limit(tmp_path, monkeypatch):
    """0 turns the budget off: a rule slower than any small budget still reports."""
    from amplint.engine.registry import rules_by_code

    rule = rules_by_code()["AMP101"]
    original = rule.check

    def check(self, ctx):
        time.sleep(0.3)
        return original(self, ctx)

    monkeypatch.setattr(rule, "check", check)
    (tmp_path / "good.py").write_text(BAD)
    assert [c for c, _, _ in _by_file(lint_paths([str(tmp_path)], Config(file_timeout=0)))["good.py"]] == ["AMP101"]
    found = _by_file(lint_paths([str(tmp_path)], Config(file_timeout=0.1)))["good.py"]
    assert found == [("AMP000", TIMEOUT_NAME, "analysis took longer than 0.1 s; skipped")]


def test_skipped_file_is_not_cached(project, slow_rule, monkeypatch, tmp_path_factory):
    cache_dir = str(tmp_path_factory.mktemp("cache"))
    config = Config(file_timeout=BUDGET)
    cache = Cache(cache_dir, "fp")
    _assert_skipped_and_went_on(lint_paths([str(project)], config, cache=cache))
    cache.save()
    monkeypatch.undo()  # the rule is fast again: the next run must analyse the file
    result = lint_paths([str(project)], config, cache=Cache(cache_dir, "fp"))
    assert [c for c, _, _ in _by_file(result)["slow.py"]] == ["AMP101"]


def test_cli_flag_and_config_key(project, slow_rule, monkeypatch):
    monkeypatch.chdir(project)
    runner = CliRunner()
    out = runner.invoke(main, ["--no-cache", "--jobs", "1", "--file-timeout", str(BUDGET), "slow.py", "good.py"])
    assert out.exit_code == 1
    assert f"slow.py:1:1: AMP000 {MESSAGE}" in out.output
    assert "good.py:4:1: AMP101" in out.output
    (project / "pyproject.toml").write_text(f"[tool.amplint]\nfile-timeout = {BUDGET}\n")
    out = runner.invoke(main, ["--no-cache", "--jobs", "1", "slow.py", "good.py"])
    assert f"slow.py:1:1: AMP000 {MESSAGE}" in out.output


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_bad_budget_exits_2_with_one_line(tmp_path, value):
    out = CliRunner().invoke(main, ["--no-cache", "--file-timeout", value, str(tmp_path)])
    assert out.exit_code == 2
    assert out.output.count("\n") == 1 and "--file-timeout must be a number of seconds" in out.output


def test_bad_budget_in_config_exits_2(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nfile-timeout = "soon"\n')
    out = CliRunner().invoke(main, ["--no-cache", str(tmp_path)])
    assert out.exit_code == 2 and "file-timeout must be a number of seconds" in out.output


def test_wait_without_budget_waits_for_the_thread():
    done = []
    t = threading.Thread(target=lambda: (time.sleep(0.2), done.append(1)), daemon=True)
    t.start()
    wait(t)
    assert done == [1]


def test_budget_passed_before_the_wait_raises_and_stops_the_thread():
    stopped = []

    def naps():
        try:
            for _ in range(200):
                time.sleep(0.05)
        except BaseException as exc:  # what the engine's thread does with it too
            stopped.append(type(exc).__name__)

    t = threading.Thread(target=naps, daemon=True)
    with file_budget(0.01):
        time.sleep(0.05)
        t.start()
        with pytest.raises(BudgetExceeded):
            wait(t)
    t.join()
    assert stopped == ["_Abandoned"]


# ------------------------------------------------------------------ budgets that bind (issue 24 item 9)

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PADDING = "".join(f"def helper_{i}(x):\n    return x * {i} + 1\n\n\n" for i in range(16_000))  # ~600 KB

# AMP101's check, on the marked file, runs a regular expression that backtracks for ever:
# one call into C that holds the GIL, which no thread-level budget can interrupt
_GIL_HOG = r"""
import json, re, sys
from amplint import Config, lint_paths
from amplint.engine.registry import rules_by_code

rule = rules_by_code()["AMP101"]
original = rule.check

def check(self, ctx):
    if "gil-hog-marker" in ctx.source:
        re.match(r"(a+)+$", "a" * 40 + "!")  # about 2**40 steps in C
    return original(self, ctx)

rule.check = check
result = lint_paths(sys.argv[2:], Config(file_timeout=float(sys.argv[1])))
print(json.dumps([[d.filename.rsplit("/", 1)[-1], d.code, d.message] for d in result.diagnostics]))
"""


def test_the_budget_binds_on_a_call_that_holds_the_gil(tmp_path):
    hog = tmp_path / "hog.py"
    hog.write_text(BAD + PADDING + "# gil-hog-marker\n")
    (tmp_path / "good.py").write_text(BAD)
    assert hog.stat().st_size > 512 * 1024
    # the budget outlasts the parse (seconds), so the rule's call into C is what it must stop
    proc = subprocess.run([sys.executable, "-c", _GIL_HOG, "20", str(hog), str(tmp_path / "good.py")],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert ["hog.py", "AMP000", "analysis took longer than 20 s; skipped"] in found, found
    assert [f for f in found if f[0] == "good.py"][0][1] == "AMP101"  # and the run went on


def test_a_file_whose_analysis_outgrows_the_memory_bound_is_one_line(tmp_path, monkeypatch):
    from amplint.engine import isolate

    if not isolate.available():
        pytest.skip("a big file is analysed in place here (not Linux, or threads running)")
    monkeypatch.setattr(isolate, "MEMORY_MB", 48)  # the real bound is 1024 MB: a 10 MB file's tree
    dense = "import torch\nk = 0.5\nscores = torch.randn(8, 8, dtype=torch.float16)\n" + "".join(
        f"s{i} = scores.masked_fill(scores > k, -1e9)\n" for i in range(14_000))  # ~600 KB, all parsed
    (tmp_path / "dense.py").write_text(dense)
    (tmp_path / "good.py").write_text(BAD)
    result = lint_paths([str(tmp_path)], Config(file_timeout=0))
    by = _by_file(result)
    assert by["dense.py"] == [("AMP000", TIMEOUT_NAME, "analysis needed more than 48 MB of memory; skipped")], by["dense.py"][:3]
    assert by["good.py"][0][0] == "AMP101"
    assert result.read == {"failed": 1, "analysed": 1}  # "could not be analysed", not "without AMP code"


def test_a_big_plain_file_costs_its_excerpt_not_its_size(tmp_path, monkeypatch):
    """The 10 MB shape of benchmarks/scaling.py, scaled down: libcst parses only the function
    holding the finding, and the memory a line costs stays that of reading it (issue 24: the
    10 MB file had grown to 99 s and 3.7 GB when nothing counted this)."""
    import importlib.util
    import tracemalloc

    import amplint.model.parse as parse

    spec = importlib.util.spec_from_file_location("scaling", os.path.join(ROOT, "benchmarks", "scaling.py"))
    scaling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaling)
    source = scaling.big_source(400 * 1024)  # under the confinement threshold: measured in this process
    path = tmp_path / "big.py"
    path.write_text(source)
    parsed = []
    original = parse.parse_module
    monkeypatch.setattr(parse, "parse_module", lambda text, *a, **k: parsed.append(len(text.strip())) or original(text, *a, **k))
    lint_paths([str(path)], Config(file_timeout=0))  # imports and first-use costs out of the count
    parsed.clear()
    tracemalloc.start()
    try:
        result = lint_paths([str(path)], Config(file_timeout=0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    lines = source.count("\n")
    assert [d.code for d in result.diagnostics] == ["AMP301"]
    assert sum(parsed) < len(source) // 20, f"libcst parsed {sum(parsed)} of {len(source)} characters"
    assert peak / lines < 1000, f"{peak / lines:.0f} bytes of Python memory per line"


@pytest.mark.parametrize("value", ["0", "601", "1e9"])
def test_a_repository_cannot_lift_the_budget(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(f"[tool.amplint]\nfile-timeout = {value}\n")
    (tmp_path / "t.py").write_text("x = 1\n")
    out = CliRunner().invoke(main, ["--no-cache", str(tmp_path)])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "must be more than 0 and at most 600 seconds in a config file" in out.output


def test_a_thread_that_cannot_start_under_the_cap_is_the_memory_outcome():
    """Under the child's address-space cap the analysis thread's stack may not fit once the work
    before it took its share: that is the memory bound binding, not a crash (CI saw it so)."""
    from amplint.engine.isolate import _ran_out_of_memory

    assert _ran_out_of_memory(RuntimeError("can't start new thread"))
    assert _ran_out_of_memory(MemoryError())
    assert not _ran_out_of_memory(RuntimeError("dictionary changed size during iteration"))


def _fill_to_the_cap():
    """Map address space (never touched: no memory used) until the child's cap refuses more."""
    import mmap

    held = []
    try:
        while True:
            held.append(mmap.mmap(-1, 16 << 20))
    except (OSError, MemoryError):
        pass
    return held


def _segfault_at_the_cap():
    import os
    import signal

    held = _fill_to_the_cap()
    time.sleep(1.0)  # the waiting parent reads the child's peak every 25 ms
    os.kill(os.getpid(), signal.SIGSEGV)
    return len(held)


def _segfault_far_from_the_cap():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def _system_error(fill):
    held = _fill_to_the_cap() if fill else []
    raise SystemError(f"error return without exception set ({len(held)})")


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")


@needs_linux
def test_a_segfault_under_the_cap_is_the_memory_outcome_only_at_the_cap():
    """CPython's own C code may use the NULL of an allocation refused under the cap (SIGSEGV:
    tests/test_speed_fix_bounds' 8 MB check died so under load): the memory outcome only when
    the child's peak address space came near its cap; any other segfault stays a crash."""
    from amplint.engine.isolate import run_confined

    assert run_confined(_segfault_at_the_cap, (), 0, memory_mb=64) == ("memory", None)
    assert run_confined(_segfault_far_from_the_cap, (), 0, memory_mb=64) == ("crash", "killed by signal 11")


@needs_linux
def test_an_error_under_the_cap_is_the_memory_outcome_only_at_the_cap():
    """A C function that failed to allocate and returned without setting MemoryError (the
    SystemError the same 8 MB check sometimes ended with) is the memory outcome at the cap."""
    from amplint.engine.isolate import run_confined

    assert run_confined(_system_error, (True,), 0, memory_mb=64) == ("memory", None)
    how, why = run_confined(_system_error, (False,), 0, memory_mb=64)
    assert (how, why) == ("crash", "SystemError: error return without exception set (0)")
