"""A plain run's check of the fixes it offers starts from the run's own lint of the file
(`LintResult.linted`) instead of linting the same text again (issue 26: at 10,000 AMP-dense
lines the check's first lint was 14 of the run's 29 CPU-s). Same outcome: what the check drops
and why, on every fixture and on texts whose fixes the check withdraws; a file whose bytes
changed between the lint and the check is linted again."""
from __future__ import annotations

import copy
import glob
import os
import shutil

import pytest

from amplint import Config
from amplint.engine import dispatch, pipeline
from amplint.engine.run import lint_paths
from amplint.fix import fixer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = sorted(glob.glob(os.path.join(REPO, "fixtures", "*.py")))
#: AMP001 with a safe fix, AMP301 with an unsafe one
MIXED = (
    "import torch\nscaler = torch.cuda.amp.GradScaler()\nscores = torch.randn(4, 4).half()\n"
    "s = scores.masked_fill(scores > 0, -1e9)\n"
)


@pytest.fixture
def lints(monkeypatch):
    texts = []
    real = pipeline.lint_file_source

    def counting(source, *args, **kwargs):
        texts.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pipeline, "lint_file_source", counting)  # the check's (imported where it lints)
    monkeypatch.setattr(dispatch, "lint_file_source", counting)  # the run's
    return texts


def _checked(paths, config, unsafe, linted_too):
    """(withdrawn lines, the diagnostics' fixes after the check) of a plain run over `paths`."""
    result = lint_paths(paths, config)
    diagnostics = copy.deepcopy(result.diagnostics)
    lines = fixer.withdraw_failing_fixes(diagnostics, result.facts, config, unsafe, None, result.noqa_used, result.linted if linted_too else None)
    return lines, [(d.filename, d.code, d.location, d.fix) for d in diagnostics]


@pytest.mark.parametrize("unsafe", [False, True])
def test_the_same_outcome_from_the_runs_lint(tmp_path, unsafe):
    """Every fixture (copied into one project, so that the run reads nothing else)."""
    for path in FIXTURES:
        shutil.copy(path, tmp_path / os.path.basename(path))
    config = Config(select=("ALL",))
    with_run = _checked([str(tmp_path)], config, unsafe, True)
    assert with_run == _checked([str(tmp_path)], config, unsafe, False)
    assert any(fix is not None for *_, fix in with_run[1])


def test_the_check_lints_the_text_once_less(tmp_path, lints):
    (tmp_path / "t.py").write_text(MIXED)
    config = Config()
    result = lint_paths([str(tmp_path)], config)
    assert list(result.linted) == [str(tmp_path / "t.py")]
    assert len(lints) == 1
    fixer.withdraw_failing_fixes(copy.deepcopy(result.diagnostics), result.facts, config, True, None, result.noqa_used)
    without = len(lints) - 1
    del lints[1:]
    fixer.withdraw_failing_fixes(copy.deepcopy(result.diagnostics), result.facts, config, True, None, result.noqa_used, result.linted)
    assert len(lints) - 1 == without - 1 and MIXED not in lints[1:]


def test_a_file_changed_after_its_lint_is_linted_again(tmp_path, lints):
    path = tmp_path / "t.py"
    path.write_text(MIXED)
    config = Config()
    result = lint_paths([str(tmp_path)], config)
    changed = MIXED.replace("GradScaler()", "GradScaler() ")
    path.write_text(changed)
    del lints[:]
    fixer.withdraw_failing_fixes(copy.deepcopy(result.diagnostics), result.facts, config, True, None, result.noqa_used, result.linted)
    assert lints and lints[0] == changed


def test_a_withdrawn_fix_is_withdrawn_as_before(tmp_path, monkeypatch):
    """The check's other lints (of fixed texts) still decide: a stand-in linter that adds a
    finding to every fixed text makes the check withdraw every fix, with or without the run's lint."""
    from amplint.core.diagnostics import Diagnostic, Location, Severity

    real = fixer._linter

    def make(path, config, facts, *rest):
        lint = real(path, config, facts, *rest)

        def stand_in(source):
            found = lint(source)
            if source != MIXED:
                found.append(Diagnostic("AMP104", "x", "created", Severity.ERROR, path, Location(1, 1), Location(1, 2)))
            return found

        return stand_in

    monkeypatch.setattr(fixer, "_linter", make)
    (tmp_path / "t.py").write_text(MIXED)
    config = Config()
    with_run = _checked([str(tmp_path)], config, True, True)
    assert with_run == _checked([str(tmp_path)], config, True, False)
    assert with_run[0] and all(fix is None for *_, fix in with_run[1])


def _fix_copy(folder, monkeypatch, reuse):
    from amplint.engine import run

    def without_linted(*args, **kwargs):
        result = lint_paths(*args, **kwargs)
        result.linted = {}
        return result

    monkeypatch.setattr(run, "lint_paths", lint_paths if reuse else without_linted)
    outcome = fixer.fix_paths([str(folder)], Config(select=("ALL",)), unsafe=True, write=True)
    written = {p.name: p.read_text() for p in sorted(folder.iterdir())}
    key = lambda d: (os.path.basename(d.filename), d.code, d.location, d.message, d.fix)  # noqa: E731
    return written, [key(d) for d in outcome.diagnostics], [r.replace(str(folder), "") for r in outcome.rejected]


def test_fix_starts_from_the_runs_lint_and_writes_the_same(tmp_path, monkeypatch, lints):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for path in FIXTURES:
            shutil.copy(path, tmp_path / name / os.path.basename(path))
        (tmp_path / name / "mixed.py").write_text(MIXED)
    without = _fix_copy(tmp_path / "a", monkeypatch, reuse=False)
    linted_without = len(lints)
    del lints[:]
    reused = _fix_copy(tmp_path / "b", monkeypatch, reuse=True)
    assert reused == without
    assert without[0]["mixed.py"] != MIXED  # fixed
    assert len(lints) < linted_without and MIXED in lints and lints.count(MIXED) == 1
