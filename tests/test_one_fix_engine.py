"""One fix engine: `amplint server` offers exactly the fixes `amplint --fix` would apply,
re-linted the same way (`fix.fixer.dropped_fixes`), and the CLI's summary counts only those.

The same cases go through both: every fixture script, and the shapes where a fix is dropped
or must not be the obvious one (issue 25: the editor's AMP101 quick fix inserted a second
`unscale_` in a step that clips twice, which raises, while the CLI withdrew it)."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("lsprotocol")

from amplint import Config  # noqa: E402
from amplint.core.diagnostics import Location  # noqa: E402
from amplint.fix.fixer import fix_paths  # noqa: E402
from amplint.server.actions import actions_for, fix_all_action, withdrawn  # noqa: E402
from amplint.server.documents import lint_python, lint_text  # noqa: E402
from amplint.server.project import Projects  # noqa: E402
from amplint.server.protocol import Lines  # noqa: E402

from .fixture_expectations import FIXTURES  # noqa: E402

#: the step unscales, but after the first of two clips: the fix moves that unscale_ up
UNSCALED_BETWEEN_CLIPS = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.head.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""

#: the clip runs on every micro-batch, the step at the boundary: inserting unscale_ before the
#: clip would create AMP104 (it raises), so `--fix --unsafe-fixes` drops it
CLIP_OUTSIDE_THE_BOUNDARY = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = model(x, y) / accum
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""

CASES = {
    "unscaled_between_clips": UNSCALED_BETWEEN_CLIPS,
    "clip_outside_the_boundary": CLIP_OUTSIDE_THE_BOUNDARY,
    **{p.stem: p.read_text() for p in sorted(FIXTURES.glob("*.py"))},
}


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def _cli_fixed(path: Path, unsafe: bool) -> Counter:
    """(code, fix title) of every fix `amplint --fix [--unsafe-fixes]` applies to the file."""
    config = Config(root=str(path.parent))
    outcome = fix_paths([str(path)], config, unsafe=unsafe, write=False)
    assert outcome.errors == []
    return Counter((d.code, d.fix.message) for change in outcome.changes for d in change.fixed)


def _server_offered(path: Path, text: str):
    """(safe, unsafe) Counters of (code, fix title) the server's quick fixes offer anywhere in
    the buffer, and the server's fix-all result."""
    projects = Projects(str(path.parent), use_cache=False)
    linted = lint_python(text, str(path), projects)
    config = linted.config
    lines = Lines(text)

    def lint(source):
        return lint_text(source, str(path), config, projects)

    actions = actions_for(
        linted.diagnostics, lines, path.as_uri(), Location(1, 1), Location(len(lines.lines) + 1, 1),
        lambda: withdrawn(linted.diagnostics, text, lint, linted.memo),
    )
    safe, unsafe = Counter(), Counter()
    for action in actions:
        if "noqa" in action.title:
            continue
        code, _, title = action.title.partition(": ")
        if action.is_preferred:
            safe[(code, title)] += 1
        else:
            unsafe[(code, title.replace(" (unsafe: review the change)", ""))] += 1
    fix_all = fix_all_action(text, path.as_uri(), lint)
    return safe, unsafe, fix_all


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_server_offers_exactly_the_fixes_the_cli_applies(tmp_path, name):
    text = CASES[name]
    path = _project(tmp_path, text)
    safe, unsafe, fix_all = _server_offered(path, text)
    applied_safe = _cli_fixed(path, unsafe=False)
    applied_all = _cli_fixed(path, unsafe=True)
    assert safe == applied_safe
    assert unsafe == applied_all - applied_safe
    # the server's source.fixAll is `--fix`: the same text
    fixed = fix_paths([str(path)], Config(root=str(path.parent)), unsafe=False, write=False)
    if fix_all is None:
        assert not fixed.changes
    else:
        new_text = fix_all.edit.changes[path.as_uri()][0].new_text
        assert fixed.changes and fixed.changes[0].fixed
        from amplint.fix.fixer import unified_diff

        assert unified_diff(text, new_text, str(path)) == fixed.changes[0].diff


def test_the_cases_hold_a_dropped_fix_and_a_moved_unscale(tmp_path):
    """The comparison above is not vacuous: one case offers a fix only for `--fix` to drop it
    (the server must withhold it), and the step that clips twice gets a move, not a second
    unscale_ (which raises)."""
    (tmp_path / "a").mkdir()
    boundary = _project(tmp_path / "a", CLIP_OUTSIDE_THE_BOUNDARY)
    projects = Projects(str(boundary.parent), use_cache=False)
    linted = lint_python(CLIP_OUTSIDE_THE_BOUNDARY, str(boundary), projects)
    assert [d.code for d in linted.diagnostics if d.fix is not None] == ["AMP101"]  # offered by the rule
    assert _server_offered(boundary, CLIP_OUTSIDE_THE_BOUNDARY)[:2] == (Counter(), Counter())
    assert _cli_fixed(boundary, unsafe=True) == Counter()

    (tmp_path / "b").mkdir()
    twice = _project(tmp_path / "b", UNSCALED_BETWEEN_CLIPS)
    assert _server_offered(twice, UNSCALED_BETWEEN_CLIPS)[1] == Counter({("AMP101", "Move `scaler.unscale_(optimizer)` before the clip"): 1})
    fixed = fix_paths([str(twice)], Config(root=str(twice.parent)), unsafe=True, write=True)
    assert fixed.diagnostics == [] and twice.read_text().count("scaler.unscale_(optimizer)") == 1


@pytest.mark.parametrize("flags,summary", [
    ((), "Found 1 error.\n"),  # no "1 hidden fix can be enabled": --unsafe-fixes would drop it
    (("--unsafe-fixes",), "Found 1 error.\n"),
    (("--fix",), "Found 1 error.\n"),
    (("--fix", "--unsafe-fixes"), "Found 1 error.\n"),  # not "[*] 1 fixable" after fixing nothing
])
def test_the_summary_counts_only_fixes_that_would_apply(tmp_path, flags, summary):
    from click.testing import CliRunner

    from amplint.cli import main

    path = _project(tmp_path, CLIP_OUTSIDE_THE_BOUNDARY)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, ["--no-cache", *flags, "train.py"], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code == 1
    assert r.stdout.endswith("\n" + summary + "Checked 1 file: 1 analysed.\n"), r.stdout
    assert path.read_text() == CLIP_OUTSIDE_THE_BOUNDARY


def test_a_hidden_fix_that_would_apply_is_still_advertised(tmp_path):
    from click.testing import CliRunner

    from amplint.cli import main

    _project(tmp_path, UNSCALED_BETWEEN_CLIPS)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, ["--no-cache", "train.py"], catch_exceptions=False)
        stdin = CliRunner().invoke(main, ["--no-cache", "-", "--stdin-filename", "train.py"], input=CLIP_OUTSIDE_THE_BOUNDARY, catch_exceptions=False)
    finally:
        os.chdir(old)
    assert "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option)." in r.stdout
    assert stdin.stdout.endswith("\nFound 1 error.\n"), stdin.stdout  # stdin's fixes are checked too
