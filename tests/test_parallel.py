"""--jobs: results identical to a serial run, in a stable order; project facts from unparsed files."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import amplint.engine.parallel as parallel
from amplint import Config
from amplint.core.rule import example_source
from amplint.engine.registry import all_rules
from amplint.engine.run import lint_paths


@pytest.fixture
def project(tmp_path):
    """Every rule's INVALID examples as files, files that pass no gate, a big one early in the order
    (it finishes last), and one that does not parse."""
    root = tmp_path / "proj"
    root.mkdir()
    n = 0
    for rule in all_rules():
        for case in rule.INVALID:
            sub = root / rule.code.lower()
            sub.mkdir(exist_ok=True)
            (sub / f"case_{n:03d}.py").write_text(example_source(case.code))
            n += 1
    for i in range(5):
        (root / f"plain_{i}.py").write_text(f"x = {i}\n")
    clip = example_source(next(r for r in all_rules() if r.code == "AMP101").INVALID[0].code)
    (root / "aaa_big.py").write_text("# filler\n" * 20000 + clip)
    (root / "broken.py").write_text("def f(:\n    autocast\n")
    return root


def _view(result):
    return [d.to_json() | {"condition": d.condition, "data": d.data} for d in result.diagnostics], result.files, result.facts


@pytest.fixture
def always_parallel(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_FILES", 1)
    calls = []
    real = parallel._run_parallel

    def spy(todo, jobs):
        calls.append(len(todo))
        return real(todo, jobs)

    monkeypatch.setattr(parallel, "_run_parallel", spy)
    return calls


def test_parallel_equals_serial(project, always_parallel):
    config = Config(select=("ALL",))
    serial = lint_paths([str(project)], config, jobs=1)
    assert not always_parallel
    two = lint_paths([str(project)], config, jobs=2)
    assert always_parallel, "the pool was not used"
    assert _view(two) == _view(serial)
    assert len(serial.diagnostics) > 50
    assert any(d.code == "AMP000" for d in serial.diagnostics)


def test_parallel_with_cache_equals_serial(project, always_parallel, tmp_path):
    from amplint.engine.parallel import open_cache

    config = Config()
    serial = lint_paths([str(project)], config, jobs=1)
    cache = open_cache(config, str(tmp_path / "c"))
    cold = lint_paths([str(project)], config, jobs=2, cache=cache)
    cache.save()
    warm_cache = open_cache(config, str(tmp_path / "c"))
    warm = lint_paths([str(project)], config, jobs=2, cache=warm_cache)
    assert _view(cold) == _view(serial) == _view(warm)


def test_small_runs_stay_in_process(tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(parallel, "_run_parallel", lambda todo, jobs: called.append(1))
    (tmp_path / "a.py").write_text("x = 1\n")
    lint_paths([str(tmp_path)], Config(), jobs=8)
    assert not called


MASK = "import torch\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"


@pytest.mark.parametrize("jobs", [1, 2])
def test_facts_come_from_files_no_rule_parses(tmp_path, always_parallel, jobs):
    """fp16 is decided in a file that passes no rule's gate: the facts pass reads it."""
    (tmp_path / "mask.py").write_text(MASK)
    (tmp_path / "buffers.py").write_text("import torch\nt = torch.zeros(3, dtype=torch.float16)\n")
    from amplint.core.gating import passing
    from amplint.engine.registry import rule_specs

    assert not passing(rule_specs(), (tmp_path / "buffers.py").read_text()), "the test needs a file no rule parses"
    result = lint_paths([str(tmp_path)], Config(), jobs=jobs)
    assert [d.code for d in result.diagnostics] == ["AMP301"]
    assert result.facts.fp16
    (tmp_path / "buffers.py").write_text("import torch\nt = torch.zeros(3, dtype=torch.bfloat16)\n")
    result = lint_paths([str(tmp_path)], Config(), jobs=jobs)
    assert not result.diagnostics and not result.facts.fp16


def test_facts_pass_stops_when_decided(tmp_path, monkeypatch):
    (tmp_path / "a_mask.py").write_text(MASK)
    for i in range(5):
        (tmp_path / f"b_{i}.py").write_text("import torch\nt = torch.zeros(3, dtype=torch.float16)\n")
    seen = []
    real = parallel.facts_of_path
    monkeypatch.setattr(parallel, "facts_of_path", lambda path, config: seen.append(path) or real(path, config))
    result = lint_paths([str(tmp_path)], Config(), jobs=1)
    assert [d.code for d in result.diagnostics] == ["AMP301"]
    assert len(seen) == 1  # the first fp16 file decided it


def test_no_facts_pass_without_pending_conditions(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("import torch\nt = torch.zeros(3, dtype=torch.float16)\n")
    monkeypatch.setattr(parallel, "facts_of_path", lambda *a: (_ for _ in ()).throw(AssertionError("parsed for facts")))
    assert not lint_paths([str(tmp_path)], Config()).diagnostics


def test_cli_jobs_flag(tmp_path):
    (tmp_path / "a.py").write_text(MASK + "x = y.half()\n")
    for jobs in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-m", "amplint._start", str(tmp_path), "--isolated", "--no-cache", "--jobs", jobs, "--output-format", "concise"],
            capture_output=True, text=True,
        )
        assert out.returncode == 1 and "AMP301" in out.stdout, out.stderr
