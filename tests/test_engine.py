"""The engine: lint_source / lint_paths, noqa (bare, coded, unused), per-file-ignores, AMP000."""
from __future__ import annotations

import pytest

from amplint import Config, lint_paths, lint_source
from amplint.core.noqa import noqa_map
from amplint.engine.pipeline import default_codes, known_codes
from amplint.fix.apply import fix_source

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0){comment}
scaler.step(optimizer)
scaler.update()
"""


def codes(source, config=None, path="t.py"):
    return [(d.code, d.location.row) for d in lint_source(source, path, config)]


def test_finding():
    assert codes(BAD.format(comment="")) == [("AMP101", 4)]


@pytest.mark.parametrize("comment", ["  # noqa", "  # noqa: AMP101", "  # NOQA:AMP101,E501", "  # type: ignore  # noqa: E501, AMP101"])
def test_noqa_suppresses(comment):
    assert codes(BAD.format(comment=comment)) == []


@pytest.mark.parametrize("comment", ["  # noqa: E501", "  # noqa: AMP102", "  # noqa:AMP1"])
def test_noqa_for_other_codes_does_not(comment):
    assert codes(BAD.format(comment=comment)) == [("AMP101", 4)]


def test_noqa_map():
    rows = noqa_map("a = 1  # noqa\nb = 2  # noqa: AMP101, amp102\nc = 3\n")
    assert rows == {1: None, 2: frozenset({"AMP101", "AMP102"})}


def test_per_file_ignores(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(BAD.format(comment=""))
    (tmp_path / "train.py").write_text(BAD.format(comment=""))
    config = Config(per_file_ignores=(("tests/*", ("AMP101",)),), root=str(tmp_path))
    found = lint_paths([str(tmp_path)], config).diagnostics
    assert [d.filename.rsplit("/", 1)[-1] for d in found] == ["train.py"]


def test_syntax_error_is_amp000():
    broken = "scaler.scale(loss).backward()\nclip_grad_norm_(\n"  # passes AMP101's gate, so it is parsed
    found = lint_source(broken, "t.py")
    assert [d.code for d in found] == ["AMP000"] and found[0].message.startswith("SyntaxError")
    assert lint_source(broken, "t.py", Config(ignore=("AMP000",))) == []


def test_unreadable_file_is_amp000_and_others_still_linted(tmp_path):
    (tmp_path / "latin.py").write_bytes(b"# coding: nope-codec\nx = 1\n")
    (tmp_path / "train.py").write_text(BAD.format(comment=""))
    found = lint_paths([str(tmp_path)]).diagnostics
    assert {d.code for d in found} == {"AMP000", "AMP101"}


def test_files_without_triggers_are_not_parsed():
    # a syntax error in a file no rule's gate accepts is never seen (the gate is the speed path)
    assert lint_source("def f(:\n", "t.py") == []


def test_results_do_not_depend_on_file_order(tmp_path):
    (tmp_path / "a.py").write_text(BAD.format(comment=""))
    (tmp_path / "b.py").write_text("x = 1\n")
    one = lint_paths([str(tmp_path / "a.py"), str(tmp_path / "b.py")]).diagnostics
    two = lint_paths([str(tmp_path / "b.py"), str(tmp_path / "a.py")]).diagnostics
    assert [d.to_json() for d in one] == [d.to_json() for d in two]


# ------------------------------------------------------------------ AMP900 unused-noqa

UNUSED = Config(extend_select=("AMP900",))


def test_unused_noqa_is_opt_in():
    assert "AMP900" in known_codes() and "AMP900" not in default_codes()
    assert codes("x = 1  # noqa: AMP101\n") == []
    assert codes("x = 1  # noqa: AMP101\n", UNUSED) == [("AMP900", 1)]


@pytest.mark.parametrize(
    "source,message,fixed",
    [
        ("x = 1  # noqa: AMP101\n", "(unused: `AMP101`)", "x = 1\n"),
        ("x = 1  # noqa: AMP101, E501\n", "(unused: `AMP101`)", "x = 1  # noqa: E501\n"),
        ("x = 1  # noqa: E501,AMP101\n", "(unused: `AMP101`)", "x = 1  # noqa: E501\n"),
        ("x = 1  # type: ignore  # noqa: AMP101\n", "(unused: `AMP101`)", "x = 1  # type: ignore\n"),
        ("x = 1  # noqa: AMP999 -- old code\n", "(unknown: `AMP999`)", "x = 1  # -- old code\n"),
        ("x = 1  # noqa: AMP1\n", "(unknown: `AMP1`)", "x = 1\n"),
    ],
)
def test_unused_noqa_messages_and_fixes(source, message, fixed):
    found = lint_source(source, "t.py", UNUSED)
    assert len(found) == 1 and found[0].code == "AMP900" and message in found[0].message
    assert found[0].fix is not None and found[0].fix.applicability.value == "safe"
    out, n = fix_source(source, lambda s: lint_source(s, "t.py", UNUSED))
    assert (out, n) == (fixed, 1)


@pytest.mark.parametrize(
    "source",
    [
        "x = 1  # noqa\n",  # bare: other linters read it too
        "x = 1  # noqa: E501\n",  # another linter's code
        's = "# noqa: AMP101"\n',  # inside a string, not a comment
        "x = 1  # noqa: AMP101, AMP900\n",  # kept on purpose
    ],
)
def test_unused_noqa_stays_silent(source):
    assert codes(source, UNUSED) == []


def test_used_noqa_is_not_reported():
    assert codes(BAD.format(comment="  # noqa: AMP101"), UNUSED) == []
    found = codes(BAD.format(comment="  # noqa: AMP101, AMP000"), Config(select=("AMP101", "AMP900")))
    assert found == [], "AMP000 is not selected, so its use cannot be judged"


def test_unused_noqa_respects_per_file_ignores(tmp_path):
    (tmp_path / "t.py").write_text("x = 1  # noqa: AMP101\n")
    ignore_rule = Config(extend_select=("AMP900",), per_file_ignores=(("t.py", ("AMP101",)),), root=str(tmp_path))
    assert lint_paths([str(tmp_path)], ignore_rule).diagnostics == []
    ignore_900 = Config(extend_select=("AMP900",), per_file_ignores=(("t.py", ("AMP900",)),), root=str(tmp_path))
    assert lint_paths([str(tmp_path)], ignore_900).diagnostics == []
