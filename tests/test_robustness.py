"""Never crash, never lose code: the bad-input table (issue 7).

Every row puts one bad file next to a file with a real finding and checks
that the bad file yields exactly one clear one-line AMP000 message (or none,
where there is nothing to lint), and that the good file's finding is still
reported: one file never stops the run. Config and usage problems exit 2
with one line on stderr and no traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import Config, lint_paths, lint_source
from amplint.cli import main
from amplint.engine.pipeline import INTERNAL_ERROR_NAME, is_internal_error, read_file

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
BAD_ROW = 4  # the clip
FIXED = BAD.replace("torch.nn.utils.clip_grad_norm_", "scaler.unscale_(optimizer)\ntorch.nn.utils.clip_grad_norm_")
ALL = Config(select=("ALL",))


def _codes(diagnostics, filename):
    return [(d.code, d.location.row) for d in diagnostics if d.filename == filename]


def _lint_dir(tmp_path, config=ALL):
    good = tmp_path / "good.py"
    good.write_text(BAD)
    result = lint_paths([str(tmp_path)], config)
    assert ("AMP101", BAD_ROW) in _codes(result.diagnostics, str(good)), "the run did not go on past the bad file"
    assert not any(is_internal_error(d) for d in result.diagnostics), [d.message for d in result.diagnostics]
    return result


def _only_amp000(result, path) -> str:
    mine = [d for d in result.diagnostics if d.filename == str(path)]
    assert len(mine) == 1 and mine[0].code == "AMP000", [(d.code, d.message) for d in mine]
    message = mine[0].message
    assert "\n" not in message and len(message) < 400
    return message


# ------------------------------------------------------------------ the bad-input table

# (file name, bytes, a substring of the one AMP000 message); each mentions GradScaler, AMP107's one
# trigger, so that it passes a gate and is parsed
SYNTAX_ROWS = [
    ("python2.py", b'import torch\nprint "x"\nscaler = torch.amp.GradScaler()\n', "SyntaxError"),
    ("python2_exec.py", b"import torch\nexec 'GradScaler()'\n", "SyntaxError"),
    ("python2_octal.py", b"import torch\nx = 0777  # GradScaler\n", "SyntaxError"),
    ("half_typed.py", b"import torch\ndef step(:\n    torch.amp.GradScaler(", "SyntaxError"),
    ("unclosed_string.py", b'import torch\nx = "GradScaler\n', "SyntaxError"),
    ("nul_byte.py", b"import torch\x00\nscaler = torch.amp.GradScaler()\n", "SyntaxError"),
    ("latin1_no_cookie.py", b'# caf\xe9\nimport torch\nGradScaler()\n', "byte 0xe9 on line 1 is not UTF-8"),
    ("latin1_line5_no_cookie.py", b'import torch\n\n\n\nx = "caf\xe9"  # GradScaler\n', "byte 0xe9 on line 5 is not UTF-8"),
    ("wrong_cookie.py", b'# -*- coding: ascii -*-\nx = "caf\xe9"  # GradScaler\n', "not valid ascii"),
    ("unknown_cookie.py", b"# -*- coding: klingon -*-\nimport torch  # GradScaler\n", "unknown encoding"),
    ("bad_dedent.py", b"import torch\nif x:\n        a = 1\n    GradScaler()\n", "SyntaxError"),
]


@pytest.mark.parametrize("name,data,expected", SYNTAX_ROWS, ids=[r[0] for r in SYNTAX_ROWS])
def test_unparsable_file_is_one_line_and_run_goes_on(tmp_path, name, data, expected):
    bad = tmp_path / name
    bad.write_bytes(data)
    result = _lint_dir(tmp_path)
    assert expected in _only_amp000(result, bad)


@pytest.mark.parametrize("name,data,expected", SYNTAX_ROWS[:3], ids=[r[0] for r in SYNTAX_ROWS[:3]])
def test_unparsable_file_without_amp000_selected_is_silent(tmp_path, name, data, expected):
    bad = tmp_path / name
    bad.write_bytes(data)
    result = _lint_dir(tmp_path, Config(ignore=("AMP000",)))
    assert not [d for d in result.diagnostics if d.filename == str(bad)]


def _same_findings_as_lf(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    result = lint_paths([str(path)], ALL)
    reference = lint_source(BAD, "ref.py", ALL)
    got = [(d.code, d.location, d.end_location) for d in result.diagnostics]
    assert got == [(d.code, d.location, d.end_location) for d in reference]
    return result


def test_latin1_with_cookie_lints_normally(tmp_path):
    src = "# -*- coding: latin-1 -*-\n# café\n" + BAD
    path = tmp_path / "latin1.py"
    path.write_bytes(src.encode("latin-1"))
    result = lint_paths([str(path)], ALL)
    assert _codes(result.diagnostics, str(path)) == [("AMP101", BAD_ROW + 2)]


def test_utf8_bom_positions_unchanged(tmp_path):
    _same_findings_as_lf(tmp_path, "bom.py", b"\xef\xbb\xbf" + BAD.encode())


def test_crlf_positions_unchanged(tmp_path):
    _same_findings_as_lf(tmp_path, "crlf.py", BAD.replace("\n", "\r\n").encode())


def test_cr_only_positions_unchanged(tmp_path):
    _same_findings_as_lf(tmp_path, "cr.py", BAD.replace("\n", "\r").encode())


def test_mixed_line_endings_positions_unchanged(tmp_path):
    lines = BAD.splitlines(keepends=True)
    mixed = "".join(line.replace("\n", "\r\n") if i % 2 else line for i, line in enumerate(lines))
    _same_findings_as_lf(tmp_path, "mixed.py", mixed.encode())


def test_tabs_indentation(tmp_path):
    src = "import torch\nscaler = torch.amp.GradScaler('cuda')\nfor b in loader:\n\tscaler.scale(loss).backward()\n\ttorch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)\n\tscaler.step(opt)\n\tscaler.update()\n"
    path = tmp_path / "tabs.py"
    path.write_text(src)
    assert _codes(lint_paths([str(path)], ALL).diagnostics, str(path)) == [("AMP101", 5)]


def test_form_feed_does_not_shift_rows_noqa_or_fixes(tmp_path):
    """str.splitlines() breaks at \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028: rows must be counted like libcst."""
    for odd in ("\x0c", "\x0b", "\x1c", "\x85", "\u2028"):
        src = f"# page one{odd}still line one\n" + BAD
        found = lint_source(src, "ff.py", ALL)
        assert [(d.code, d.location.row) for d in found] == [("AMP101", BAD_ROW + 1)], repr(odd)
        noqa = src.replace("1.0)\n", "1.0)  # noqa: AMP101\n")
        assert lint_source(noqa, "ff.py", ALL) == [], repr(odd)
    # the unsafe fix lands right before the clip, not one row early (before the backward)
    src = "# page one\x0c\n" + BAD
    path = tmp_path / "ff.py"
    path.write_bytes(src.encode())
    _fix(path, unsafe=True)
    assert path.read_bytes().decode() == "# page one\x0c\n" + FIXED


def test_form_feed_indentation(tmp_path):
    src = "import torch\n\x0c\ndef f():\n\x0c    x = 1\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\n"
    path = tmp_path / "ff_indent.py"
    path.write_text(src)
    lint_paths([str(path)], ALL)  # no crash; nothing to assert about findings


def test_empty_and_blank_files(tmp_path):
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "blank.py").write_bytes(b"\n\n   \n")
    (tmp_path / "bom_only.py").write_bytes(b"\xef\xbb\xbf")
    (tmp_path / "comment_trigger.py").write_bytes(b"# clip_grad autocast GradScaler half")
    result = _lint_dir(tmp_path)
    assert [d for d in result.diagnostics if "good.py" not in d.filename] == []


def test_five_megabyte_file(tmp_path):
    """A 5 MB generated file (functions with long docstrings and data strings, as
    generated protobuf/vocabulary modules look) passes the gate, is parsed and linted."""
    blob = "abcdefghij" * 240
    funcs = [f'def f{i}(x):\n    """{blob}"""\n    return x + {i}\n\n\n' for i in range(2100)]
    src = "import torch\n" + "".join(funcs) + BAD
    assert len(src) > 5_000_000
    path = tmp_path / "generated.py"
    path.write_text(src)
    result = lint_paths([str(path)], ALL)
    assert _codes(result.diagnostics, str(path)) == [("AMP101", BAD_ROW + 1 + 5 * len(funcs))]


DEEP = {
    "parens": "x = " + "(" * 5000 + "1" + ")" * 5000,
    "unary": "x = " + "-" * 50_000 + "1",
    "binary": "x = " + "1+" * 50_000 + "1",
    "lambdas": "x = " + "lambda: " * 5000 + "1",
    "indent": "".join(" " * i + "if x:\n" for i in range(120)) + " " * 120 + "pass\n",
    # CPython keeps `a and b and ...` flat but libcst nests it: 8000 terms overflow
    # libcst's native parser on an 8 MB main-thread stack (a segfault without the guard)
    "and_chain": "x = " + "a and " * 8000 + "1",
}


def test_deep_nesting_never_kills_the_process(tmp_path):
    """libcst's native parser overflows the C stack on deep nesting: a segfault
    cannot be caught, so the engine must not get there. One subprocess, all cases."""
    for name, body in DEEP.items():
        (tmp_path / f"deep_{name}.py").write_text("import torch\n# GradScaler half\n" + body + "\n")
    (tmp_path / "good.py").write_text(BAD)
    proc = subprocess.run(
        [sys.executable, "-m", "amplint.cli", "--select", "ALL", "--no-cache", "--output-format", "json", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    found = json.loads(proc.stdout)
    by_file = {}
    for d in found:
        by_file.setdefault(os.path.basename(d["filename"]), []).append(d)
    assert [d["code"] for d in by_file["good.py"]] == ["AMP101"]
    for name in ("parens", "unary", "binary", "lambdas", "indent"):
        (d,) = by_file[f"deep_{name}.py"]
        assert d["code"] == "AMP000" and d["name"] == "syntax-error", d
        assert "nested" in d["message"] or "indentation" in d["message"], d["message"]
    # the and-chain is valid Python: it parses on the big stack and lints (or is
    # reported as too deep to analyse), never an internal error
    for d in by_file.get("deep_and_chain.py", []):
        assert d["name"] == "syntax-error" and "deeply" in d["message"], d


def test_facts_pass_survives_deep_files():
    """The project-facts pass parses files no rule's gate let through: same guards."""
    code = textwrap.dedent(
        """
        import sys, tempfile
        from amplint import Config
        from amplint.engine.parallel import facts_of_path
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("# Half\\ny = " + "a and " * 8000 + "1\\n")
        print(facts_of_path(f.name, Config()).parsed)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


def test_recursion_error_in_context_build_is_reported(monkeypatch):
    import amplint.model.context as context

    def boom(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(context.ModuleContext, "build", classmethod(lambda cls, *a, **k: boom()))
    found = lint_source(BAD, "x.py", ALL)
    assert [(d.code, d.name) for d in found] == [("AMP000", "syntax-error")]
    assert "too deeply" in found[0].message


# ------------------------------------------------------------------ files that cannot be read


def test_unreadable_file(tmp_path):
    from tests.privileges import permissions_enforced

    bad = tmp_path / "secret.py"
    bad.write_text(BAD)
    bad.chmod(0)
    try:
        with permissions_enforced():  # root too is refused by the kernel: a real EACCES
            result = _lint_dir(tmp_path)
        assert _only_amp000(result, bad) == "cannot lint: permission denied"
    finally:
        bad.chmod(0o644)


def test_broken_symlink_and_symlink_loop(tmp_path):
    broken = tmp_path / "broken.py"
    broken.symlink_to(tmp_path / "nowhere.py")
    loop_a, loop_b = tmp_path / "loop_a.py", tmp_path / "loop_b.py"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    folder_loop = tmp_path / "pkg"
    folder_loop.mkdir()
    (folder_loop / "self").symlink_to(folder_loop)  # a folder loop: the walk must not recurse forever
    result = _lint_dir(tmp_path)
    assert "broken symbolic link" in _only_amp000(result, broken)
    for loop in (loop_a, loop_b):
        assert "symbolic links" in _only_amp000(result, loop)


def test_paths_that_do_not_exist(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(BAD)
    missing = tmp_path / "missing.py"
    result = lint_paths([str(missing), str(good)], ALL)
    assert _only_amp000(result, missing) == "cannot lint: no such file or directory"
    assert ("AMP101", BAD_ROW) in _codes(result.diagnostics, str(good))


def test_directory_named_like_a_python_file(tmp_path):
    folder = tmp_path / "x.py"
    folder.mkdir()
    (folder / "inner.py").write_text(BAD)
    result = _lint_dir(tmp_path)
    assert _codes(result.diagnostics, str(folder / "inner.py")) == [("AMP101", BAD_ROW)]
    assert not [d for d in result.diagnostics if d.filename == str(folder)]
    # named explicitly, it is a folder to walk
    result = lint_paths([str(folder)], ALL)
    assert _codes(result.diagnostics, str(folder / "inner.py")) == [("AMP101", BAD_ROW)]


def test_read_file_reasons(tmp_path):
    assert read_file(str(tmp_path))[1] == "is a directory"
    assert read_file(str(tmp_path / "nope.py"))[1] == "no such file or directory"
    assert read_file("a\x00b.py")[1].startswith("invalid path")


# ------------------------------------------------------------------ notebooks


def _notebook(cells, language="python"):
    return json.dumps(
        {
            "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c} for c in cells],
            "metadata": {"kernelspec": {"name": language, "language": language, "display_name": language}, "language_info": {"name": language}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


@pytest.mark.parametrize(
    "name,text",
    [
        ("truncated.ipynb", _notebook([BAD])[:-20]),
        ("not_json.ipynb", "this is not json\n"),
        ("a_list.ipynb", "[1, 2, 3]"),
        ("cells_not_list.ipynb", json.dumps({"cells": 5, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})),
        ("cell_source_number.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": 5}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})),
    ],
)
def test_broken_notebook_is_one_line(tmp_path, name, text):
    bad = tmp_path / name
    bad.write_text(text)
    result = _lint_dir(tmp_path)
    mine = [d for d in result.diagnostics if d.filename == str(bad)]
    assert len(mine) <= 1
    for d in mine:
        assert d.code == "AMP000" and "\n" not in d.message


def test_notebook_not_utf8(tmp_path):
    bad = tmp_path / "latin.ipynb"
    bad.write_bytes(_notebook(["x = 'caf\u00e9'"]).encode("utf-8").replace(b"\\u00e9", b"\xe9").replace("é".encode(), b"\xe9"))
    result = _lint_dir(tmp_path)
    assert len([d for d in result.diagnostics if d.filename == str(bad)]) <= 1


def test_notebook_of_another_language_is_skipped(tmp_path):
    r = tmp_path / "analysis.ipynb"
    r.write_text(_notebook(["library(torch)\nclip_grad <- function(x) x\n"], language="R"))
    result = _lint_dir(tmp_path)
    assert not [d for d in result.diagnostics if d.filename == str(r)]


def test_notebook_with_syntax_error_cell(tmp_path):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(_notebook(["import torch\n", "def f(:\n  clip_grad_norm_(", BAD]))
    result = _lint_dir(tmp_path)
    mine = [d for d in result.diagnostics if d.filename == str(nb)]
    assert [d.code for d in mine] == ["AMP000"]


# ------------------------------------------------------------------ config and usage: exit 2, one line


def _cli(*args, cwd=None):
    runner = CliRunner()
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return runner.invoke(main, list(args), catch_exceptions=True)
    finally:
        os.chdir(old)


def _assert_exit_2_one_line(result):
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    err = result.stderr if hasattr(result, "stderr") else result.output
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amplint: error:"), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "pyproject",
    [
        "[tool.amplint\nselect = [",  # invalid TOML
        '[tool.amplint]\nselect = "AMP101',  # unterminated string
        "[tool.amplint]\nselect = 5",
        "[tool.amplint]\nselect = [1, 2]",
        "[tool.amplint]\nignore = {a = 1}",
        "[tool.amplint]\nprecision = 3",
        '[tool.amplint]\nprecision = "fp8"',
        '[tool.amplint]\ntorch-version = "two"',
        "[tool.amplint]\ntorch-version = [2, 1]",
        "[tool.amplint]\nper-file-ignores = [1]",
        '[tool.amplint]\nper-file-ignores = {"*.py" = 1}',
        "[tool.amplint]\nexclude = true",
        "[tool.amplint]\nverify = 1",
        '[tool.amplint.verify]\ntimeout = "soon"',
        "[tool.amplint.verify]\ntimeout = -1",
        "[tool.amplint.verify]\ndevice = 0",
        "[tool.amplint]\nselct = []",
        '[tool.amplint]\nselect = ["AMP999"]',
        "tool = 1\n[tool.amplint]",  # duplicate key: invalid TOML
        "[tool]\namplint = 3",
    ],
)
def test_bad_config_exits_2_with_one_line(tmp_path, pyproject):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "a.py").write_text(BAD)
    _assert_exit_2_one_line(_cli("a.py", cwd=tmp_path))


def test_undecodable_pyproject_exits_2(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.amplint]\nselect = ['\xff']\n")
    (tmp_path / "a.py").write_text(BAD)
    _assert_exit_2_one_line(_cli("a.py", cwd=tmp_path))


@pytest.mark.parametrize(
    "args",
    [
        ("--select", "AMP99x", "a.py"),
        ("--output-format", "xml", "a.py"),
        ("--torch-version", "banana", "a.py"),
        ("--config", "missing.toml", "a.py"),
        ("--no-such-flag",),
        ("-", "a.py"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, args):
    (tmp_path / "a.py").write_text(BAD)
    _assert_exit_2_one_line(_cli(*args, cwd=tmp_path))


def test_missing_path_on_the_command_line_is_a_usage_error_not_a_crash(tmp_path):
    (tmp_path / "a.py").write_text(BAD)
    result = _cli("--no-cache", "a.py", "missing.py", cwd=tmp_path)
    _assert_exit_2_one_line(result)
    assert "missing.py: no such file or directory" in result.output


# ------------------------------------------------------------------ internal errors: one rule, one file


def _break_rule(monkeypatch, code, exc):
    from amplint.engine.registry import rules_by_code

    rule = rules_by_code()[code]

    def check(self, ctx):
        if "boom" in ctx.source:
            raise exc
        return original(self, ctx)

    original = rule.check
    monkeypatch.setattr(rule, "check", check)
    return rule


def test_internal_error_in_one_rule_on_one_file(tmp_path, monkeypatch):
    rule = _break_rule(monkeypatch, "AMP101", ValueError("unexpected node"))
    (tmp_path / "boom.py").write_text(BAD + "boom = 1\nx = torch.cuda.amp.autocast()\n")
    result = lint_paths([str(tmp_path / "boom.py"), *[]], ALL)
    errors = [d for d in result.diagnostics if is_internal_error(d)]
    assert len(errors) == 1
    message = errors[0].message
    assert "AMP101" in message and rule.name in message and "ValueError: unexpected node" in message and "report" in message
    # the other rules still ran on that file
    assert any(d.code != "AMP000" for d in result.diagnostics), [d.code for d in result.diagnostics]
    # and the other files are linted as usual
    good = tmp_path / "good.py"
    good.write_text(BAD)
    result = lint_paths([str(tmp_path)], ALL)
    assert ("AMP101", BAD_ROW) in _codes(result.diagnostics, str(good))


def test_internal_error_is_reported_even_if_amp000_is_ignored(monkeypatch):
    _break_rule(monkeypatch, "AMP101", KeyError("x"))
    found = lint_source(BAD + "boom = 1\n", "x.py", Config(ignore=("AMP000",)))
    assert [d.name for d in found] == [INTERNAL_ERROR_NAME]


def test_generator_rules_failing_late_are_caught(monkeypatch):
    from amplint.engine.registry import rules_by_code

    rule = rules_by_code()["AMP101"]

    def check(self, ctx):
        yield from ()
        raise IndexError("late")

    monkeypatch.setattr(rule, "check", check)
    found = lint_source(BAD, "x.py", ALL)
    assert any(is_internal_error(d) and "IndexError: late" in d.message for d in found)


def test_internal_error_in_context_build(monkeypatch):
    import amplint.model.context as context

    def build(cls, *a, **k):
        raise AttributeError("no attribute 'value'")

    monkeypatch.setattr(context.ModuleContext, "build", classmethod(build))
    found = lint_source(BAD, "x.py", ALL)
    assert len(found) == 1 and is_internal_error(found[0]) and "AMP model" in found[0].message


def test_cli_exits_2_on_internal_error_but_prints_everything(tmp_path, monkeypatch):
    _break_rule(monkeypatch, "AMP101", RuntimeError("bug"))
    (tmp_path / "boom.py").write_text(BAD + "boom = 1\n")
    (tmp_path / "good.py").write_text(BAD)
    result = _cli("--no-cache", "--jobs", "1", ".", cwd=tmp_path)
    assert result.exit_code == 2, result.output
    assert "good.py:4:1: AMP101" in result.output
    assert "boom.py:1:1: AMP000 internal error in rule AMP101" in result.output
    # --exit-zero does not hide an internal error
    assert _cli("--no-cache", "--jobs", "1", "--exit-zero", ".", cwd=tmp_path).exit_code == 2


# ------------------------------------------------------------------ fixes keep the file's form


def _fix(path: Path, unsafe: bool):
    from amplint.fix.fixer import fix_paths

    outcome = fix_paths([str(path)], Config(select=("ALL",)), unsafe=unsafe, write=True)
    assert not outcome.errors, outcome.errors
    return outcome


def test_unsafe_fix_on_crlf_file_keeps_crlf_and_parses(tmp_path):
    import libcst as cst

    path = tmp_path / "crlf.py"
    path.write_bytes(BAD.replace("\n", "\r\n").encode())
    outcome = _fix(path, unsafe=True)
    assert outcome.fixed_count == 1
    data = path.read_bytes()
    assert data == FIXED.replace("\n", "\r\n").encode()
    assert b"\n" not in data.replace(b"\r\n", b"")
    cst.parse_module(data.decode())
    assert not [d for d in lint_paths([str(path)], ALL).diagnostics if d.code == "AMP101"]


def test_unsafe_fix_keeps_bom_latin1_and_cr(tmp_path):
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + BAD.encode())
    _fix(bom, unsafe=True)
    assert bom.read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n# café\n" + BAD).encode("latin-1"))
    _fix(latin, unsafe=True)
    assert latin.read_bytes() == ("# -*- coding: latin-1 -*-\n# café\n" + FIXED).encode("latin-1")
    cr = tmp_path / "cr.py"
    cr.write_bytes(BAD.replace("\n", "\r").encode())
    _fix(cr, unsafe=True)
    assert cr.read_bytes() == FIXED.replace("\n", "\r").encode()


def test_fix_on_unfixable_inputs_writes_nothing(tmp_path):
    """--fix over the whole bad-input table: every file is byte-for-byte unchanged."""
    for name, data, _ in SYNTAX_ROWS:
        (tmp_path / name).write_bytes(data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    from amplint.fix.fixer import fix_paths

    fix_paths([str(tmp_path)], ALL, unsafe=True, write=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# ------------------------------------------------------------------ verifier faults
#
# Experiments that misbehave in the ways real code does. The worker imports
# them from this file (`target="test_robustness:..."`). Each must become a
# verdict with its reason, the warm worker survives (each finding runs in its own
# process), the run finishes, and no process is left behind. (tests/test_verify_isolation.py
# covers hang-with-child, hard exit, segfault, exceptions and stdout prints.)

TESTS = os.path.dirname(os.path.abspath(__file__))
R = "test_robustness"


def fault_hog_progressive(data, lab):
    """Grow until the worker's RLIMIT_AS stops it (never the machine's memory)."""
    blocks = []
    for _ in range(10_000):
        blocks.append(bytearray(256 * 1024 * 1024))
    return lab.confirmed("allocated everything", {"blocks": len(blocks)}, method="snippet")


def fault_binary_stdout(data, lab):
    os.write(1, b"\xff\xfe\x00 not json {\n")
    print("\x00garbage", flush=True)
    sys.stdout.write('{"op": "result", "id": 1, "result": {"verdict": "confirmed"}}\n')
    return lab.not_reproduced("quiet", {}, method="snippet")


def _protocol_fds():
    """The worker's protocol pipe: the pipe fds other than stdin (0)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and os.fstat(fd).st_mode and os.get_blocking(fd) is not None:
                out.append(fd)
        except OSError:
            pass
    return out


def fault_garbage_on_protocol(data, lab):
    """A native library writing into the inherited protocol pipe."""
    for fd in _protocol_fds():
        try:
            os.write(fd, b"Segmentation fault (core dumped) \xff\n")
        except OSError:
            pass
    return lab.confirmed("wrote garbage", {}, method="snippet")


def _spawn(marker, **kwargs):
    """Start a marked sleeper: its pid, or why the finding's seccomp filter refused it."""
    from tests.procs import sleeper

    try:
        return {"child": subprocess.Popen(sleeper(marker), **kwargs).pid}
    except OSError as exc:  # a finding starts no process (verify/seccomp.py)
        return {"refused": type(exc).__name__}


def fault_leave_child(data, lab):
    return lab.confirmed("tried to leave a child running", _spawn(data["marker"]), method="snippet")


def fault_leave_detached_child(data, lab):
    return lab.confirmed("tried to leave a detached child running", _spawn(data["marker"], start_new_session=True), method="snippet")


def fault_ok(data, lab):
    return lab.confirmed("fine", {"pid": os.getpid()}, method="snippet")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_dead(pid: int, seconds: float = 15.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _verifier():
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the verifier needs it)")
    from amplint.verify import Runner

    return Runner


def test_verifier_garbage_and_children_become_verdicts(tmp_path):
    from tests.procs import kill_marked, wait_gone

    Runner = _verifier()
    marker = f"amplint-test-child-{os.getpid()}-{id(tmp_path)}"
    try:
        with Runner(device="cpu", timeout=20, extra_sys_path=[TESTS], lazy=True) as runner:
            v = runner.run("TEST", {}, target=f"{R}:fault_binary_stdout")
            assert v["verdict"] == "not-reproduced", v  # prints go to an output pipe, never into the protocol
            first = runner.pid

            v = runner.run("TEST", {}, target=f"{R}:fault_garbage_on_protocol")
            assert v["verdict"] == "error" and "bad reply" in v["reason"], v  # only its own result pipe was reachable
            assert runner.pid == first and runner.restarts == 0, "garbage from a finding cost the worker"
            v = runner.run("TEST", {}, target=f"{R}:fault_ok")
            assert v["verdict"] == "confirmed", "the run did not go on after garbage"

            v = runner.run("TEST", {"marker": marker}, target=f"{R}:fault_leave_child")
            assert v["verdict"] == "confirmed" and v["evidence"] == {"refused": "PermissionError"}, v
            assert wait_gone(marker), "an experiment's child process outlived its finding"
            worker = runner.pid
        assert _wait_dead(worker), "the worker outlived the run"
    finally:
        kill_marked(marker)


def test_verifier_memory_exhaustion_is_bounded(tmp_path):
    """On CPU the worker caps its address space (RLIMIT_AS): a runaway allocation is a
    MemoryError verdict, not the machine's OOM killer."""
    Runner = _verifier()
    if not os.path.exists("/proc/self/status"):
        pytest.skip("RLIMIT_AS sizing reads /proc/self/status (Linux)")
    with Runner(device="cpu", timeout=120, extra_sys_path=[TESTS]) as runner:
        v = runner.run("TEST", {}, target=f"{R}:fault_hog_progressive")
        assert v["verdict"] == "error" and "MemoryError" in v["reason"], v
        v = runner.run("TEST", {}, target=f"{R}:fault_ok")
        assert v["verdict"] == "confirmed", v


def test_verifier_detached_child_is_reaped(tmp_path):
    """A child that starts its own session (setsid) leaves any process group; the worker is
    the subreaper of every finding (and the sandbox a PID namespace), so it dies anyway."""
    from tests.procs import kill_marked, wait_gone

    Runner = _verifier()
    marker = f"amplint-test-setsid-{os.getpid()}-{id(tmp_path)}"
    try:
        with Runner(device="cpu", timeout=20, extra_sys_path=[TESTS], lazy=True) as runner:
            v = runner.run("TEST", {"marker": marker}, target=f"{R}:fault_leave_detached_child")
            assert v["verdict"] == "confirmed" and v["evidence"] == {"refused": "PermissionError"}, v
            assert wait_gone(marker, 5), "a setsid child outlived its finding"
    finally:
        kill_marked(marker)


def test_verifier_run_many_finishes_through_faults(tmp_path):
    """A mix of faults in one run: one verdict per request, in order, and the run ends."""
    Runner = _verifier()
    from amplint.verify.runner import run_many

    requests = [
        {"code": "TEST", "target": f"{R}:fault_ok"},
        {"code": "TEST", "target": "test_verify_isolation:segfault"},
        {"code": "TEST", "target": f"{R}:fault_garbage_on_protocol"},
        {"code": "TEST", "target": "test_verify_isolation:raises"},
        {"code": "TEST", "target": "no_such_module:run"},
        {"code": "TEST", "target": f"{R}:fault_ok"},
    ]
    verdicts = run_many(requests, device="cpu", timeout=20, extra_sys_path=[TESTS], lazy=True)
    assert [v["verdict"] for v in verdicts][0] == "confirmed"
    assert verdicts[1]["verdict"] == "error" and "SIGSEGV" in verdicts[1]["reason"]
    assert verdicts[3]["verdict"] == "error" and "ValueError" in verdicts[3]["reason"]
    assert verdicts[4]["verdict"] == "error" and "ModuleNotFoundError" in verdicts[4]["reason"]
    assert verdicts[5]["verdict"] == "confirmed"
    assert all(v.get("reason") or v["verdict"] == "confirmed" for v in verdicts)


# ------------------------------------------------------------------ interrupted writes


@pytest.mark.parametrize("where", ["write", "fsync", "chmod", "replace"])
def test_interrupted_fix_write_leaves_the_original(tmp_path, monkeypatch, where):
    """Ctrl-C (or a crash) at any point of writing a fixed file: the original bytes stay,
    no temporary file is left, and the interrupt is not swallowed."""
    import amplint.core.atomic as atomic

    path = tmp_path / "train.py"
    original = BAD.replace("\n", "\r\n").encode()
    path.write_bytes(original)
    path.chmod(0o640)

    real_fdopen = os.fdopen

    class Interrupting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[: len(data) // 2])  # half of the new content reached the temp file
            self.fh.flush()
            raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(self.fh, name)

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    if where == "write":
        monkeypatch.setattr(atomic.os, "fdopen", lambda fd, *a, **k: Interrupting(real_fdopen(fd, *a, **k)))
    else:
        monkeypatch.setattr(atomic.os, where, interrupt)
    from amplint.fix.fixer import fix_paths

    with pytest.raises(KeyboardInterrupt):
        fix_paths([str(path)], ALL, unsafe=True, write=True)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["train.py"], "a temporary file was left behind"
    assert (path.stat().st_mode & 0o777) == 0o640


def test_failed_write_of_one_file_leaves_it_and_fixes_the_others(tmp_path, monkeypatch):
    import amplint.fix.writer as writer
    from amplint.fix.fixer import fix_paths

    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(BAD)
    b.write_text(BAD)
    real = writer.write_atomic

    def flaky(p, data):
        if p.endswith("a.py"):
            raise OSError(28, "No space left on device")
        return real(p, data)

    monkeypatch.setattr(writer, "write_atomic", flaky)
    outcome = fix_paths([str(tmp_path)], ALL, unsafe=True, write=True)
    assert len(outcome.errors) == 1 and "a.py" in outcome.errors[0] and "\n" not in outcome.errors[0]
    assert a.read_text() == BAD and b.read_text() == FIXED


# ------------------------------------------------------------------ what the summary says was read


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nscaler = torch.amp.GradScaler()\ndef f(:\n    pass\n",
        "import torch\nscaler = torch.amp.GradScaler()\nx = (1,\n\ndef g():\n    pass\n",
        "import torch\nscaler = torch.amp.GradScaler()\nif x\n    y = 1\n",
    ],
    ids=["bad-parameter", "unclosed-bracket", "missing-colon"],
)
def test_a_syntax_error_is_located_as_python_locates_it(tmp_path, source):
    import ast

    with pytest.raises(SyntaxError) as python:
        ast.parse(source)
    (tmp_path / "broken.py").write_text(source)
    (d,) = lint_paths([str(tmp_path)], ALL).diagnostics
    assert (d.code, d.location.row, d.location.column) == ("AMP000", python.value.lineno, python.value.offset)
    assert d.message == f"SyntaxError: {python.value.msg}"


def test_a_nul_byte_is_a_syntax_error_even_in_a_file_without_amp_code(tmp_path):
    (tmp_path / "nul.py").write_bytes(b"import os\nx = 1\x00\n")
    (d,) = lint_paths([str(tmp_path)], ALL).diagnostics
    assert (d.code, d.location.row, d.location.column) == ("AMP000", 2, 6)
    assert d.message == "SyntaxError: source code cannot contain null bytes"


def _read_project(tmp_path):
    tmp_path.mkdir()
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "plain.py").write_text("x = 1\n")
    (tmp_path / "broken_plain.py").write_text("import os\n\ndef f(:\n    pass\n")  # no AMP code: not parsed
    (tmp_path / "exempt.py").write_text("# amplint: noqa\n" + BAD)
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "latin.py").write_bytes(b"s = '\xe9'\n")  # not UTF-8 and no coding cookie
    return tmp_path


@pytest.mark.parametrize("extra", [(), ("--fix",)], ids=["lint", "fix"])
def test_the_summary_says_what_was_read(tmp_path, extra):
    project = _read_project(tmp_path / "p")
    cache = str(tmp_path / "cache")
    line = (
        "Checked 6 files: 1 analysed, 2 without AMP code (not parsed), 1 exempt (`# amplint: noqa`), "
        "1 could not be analysed (AMP000), 1 could not be read (AMP000).\n"
    )
    for _ in ("cold", "warm"):
        r = _cli("--cache-dir", cache, *extra, ".", cwd=project)
        assert r.exit_code == 1 and r.stdout.endswith(line), r.stdout
    clean = _cli("--no-cache", "plain.py", cwd=project)
    assert clean.stdout == "All checks passed!\nChecked 1 file: 0 analysed, 1 without AMP code (not parsed).\n"
    assert _cli("--no-cache", "-q", ".", cwd=project).stdout.count("Checked") == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli("--no-cache", ".", cwd=empty).stdout == "All checks passed!\nNo Python files found.\n"
