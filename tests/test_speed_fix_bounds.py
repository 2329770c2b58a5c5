"""The check of a file's fixes runs under the bounds of its lint (issue 26): a big file's is done
in the forked, memory-capped child its lint runs in, never in the process the bounds protect
(libcst's trees of a 20,000-line file made that process 1.5 GB, of a 70,000-line one 5 GB); a
check that cannot finish within them fixes nothing and withdraws the fixes, with the reason;
the fixed text is judged by CPython's parser a piece at a time, exactly as a whole parse would."""
from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from amplint import Config, lint_paths
from amplint.core.diagnostics import Diagnostic, Location, Severity
from amplint.engine import excerpt, isolate
from amplint.engine.budget import remaining
from amplint.fix import fixer
from amplint.fix.apply import parses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: one AMP301 finding (an unsafe fix) and ~630 KB of a plain function the lint's excerpt blanks:
#: cheap to lint, over `isolate.CONFINED_BYTES`; libcst's tree of it all, which the check used
#: to build in the parent, is ~770 MB
FINDING = '''import torch


def attend(q, k, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores
'''
BIG = FINDING + "\n\ndef padding(x):\n" + "    x = x + 1\n" * 45_000 + "    return x\n"
#: the parent's own peak may not come near what a whole-file tree of BIG takes (it is ~40 MB)
PARENT_MB = 200

#: amplint's entry point, then the process's own peak: VmHWM (`ru_maxrss` would be no good here:
#: Linux carries it over `exec` from the forked pytest process the command was started from)
_PEAK = """
import sys
from amplint._start import main
try:
    main()
finally:
    with open("/proc/self/status") as status:
        print("PEAK", next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:")), file=sys.stderr)
"""

needs_fork = pytest.mark.skipif(not isolate.available(), reason="a big file is worked on in place here (not Linux, or threads running)")


def _amplint_peak(path, *args):
    """(process, the amplint process's own peak resident set in MB: its forked children not counted)."""
    proc = subprocess.run([sys.executable, "-c", _PEAK, "--isolated", "--no-cache", *args, str(path)], capture_output=True, text=True, timeout=600)
    peak = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK ")]
    assert peak, proc.stderr[-2000:]
    return proc, peak[0]


@needs_fork
def test_a_big_files_fixes_are_checked_and_applied_outside_the_protected_process(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(BIG)
    assert os.path.getsize(path) > isolate.CONFINED_BYTES
    plain, peak = _amplint_peak(path)
    assert plain.returncode == 1 and "1 hidden fix can be enabled with the `--unsafe-fixes` option" in plain.stdout, plain.stdout[-2000:]
    assert peak < PARENT_MB, f"the plain run's own peak: {peak} MB"
    fixed, peak = _amplint_peak(path, "--fix", "--unsafe-fixes")
    assert fixed.returncode == 0 and "1 fixed, 0 remaining" in fixed.stdout, fixed.stdout[-2000:]
    assert peak < PARENT_MB, f"--fix's own peak: {peak} MB"
    assert path.read_text() == BIG.replace("-1e9", "torch.finfo(scores.dtype).min")


#: a plain run's check and --fix of the file argv[1], each linted under the real bound and checked
#: under 8 MB (the check needs ~200 MB), in a fresh process: the child's cap is counted from the
#: parent's address space, whose free memory (a long pytest process has plenty) it may reuse
_OUT_OF_MEMORY = """
import json, sys
from amplint import Config, lint_paths
from amplint.engine import isolate
from amplint.fix import fixer

path, config = sys.argv[1], Config(file_timeout=0)
plain, fixing = lint_paths([path], config), lint_paths([path], config)
isolate.MEMORY_MB = 8
lines = fixer.withdraw_failing_fixes(plain.diagnostics, plain.facts, config, unsafe=True)
outcome = fixer.fix_files(fixing.diagnostics, fixing.facts, config, unsafe=True, write=True)
print(json.dumps({
    "withdrawn": lines, "fixes": [d.fix is not None for d in plain.diagnostics],
    "changes": len(outcome.changes), "errors": outcome.errors, "rejected": outcome.rejected,
    "remaining": [[d.code, d.fix is not None] for d in outcome.diagnostics],
}))
"""


@needs_fork
def test_a_check_past_the_memory_bound_withdraws_the_fixes_and_writes_nothing(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(BIG)
    proc = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    why = "checking the fixed file needed more than 8 MB of memory"
    assert out["withdrawn"] == [f"{path}:7:48: AMP301 fix withdrawn: {why}"] and out["fixes"] == [False]
    assert out["changes"] == 0 and out["errors"] == []
    assert out["rejected"] == [f"{path}:7:48: AMP301 fix not applied: {why}"]
    assert out["remaining"] == [["AMP301", False]]  # still reported, no longer offered as fixable
    assert path.read_text() == BIG


def _spin():
    while True:
        remaining()  # raises once the budget has passed


@pytest.mark.parametrize("size", [0, pytest.param(isolate.CONFINED_BYTES + 1, marks=needs_fork)], ids=["here", "child"])
def test_a_check_past_its_budget_is_unchecked(size):
    with pytest.raises(fixer.Unchecked, match=r"^checking the fixed file took longer than 0.05 s$"):
        fixer._within_bounds(_spin, (), size, 0.05)


_REAL_LINTER = fixer._linter


def _creating_linter(path, config, facts, used=frozenset()):
    """The file's real lint, plus a new finding in any text but the file's own: every fix is dropped."""
    lint = _REAL_LINTER(path, config, facts, used)

    def stand_in(source):
        found = lint(source)
        if source != BIG:
            found.append(Diagnostic("AMP104", "x", "created", Severity.ERROR, path, Location(1, 1), Location(1, 2)))
        return found

    return stand_in


@needs_fork
def test_a_big_files_fix_that_would_not_relint_clean_is_still_dropped(tmp_path, monkeypatch):
    """The check in the child is the check: its re-lint still keeps out a fix that creates a finding."""
    path = tmp_path / "big.py"
    path.write_text(BIG)
    config = Config(file_timeout=0)
    monkeypatch.setattr(fixer, "_linter", _creating_linter)  # the forked child inherits it
    result = lint_paths([str(path)], config)
    lines = fixer.withdraw_failing_fixes(result.diagnostics, result.facts, config, unsafe=True)
    assert lines == [f"{path}:7:48: AMP301 fix withdrawn: the fix would create AMP104 (created)"]
    result = lint_paths([str(path)], config)
    outcome = fixer.fix_files(result.diagnostics, result.facts, config, unsafe=True, write=True)
    assert outcome.changes == [] and outcome.rejected == [f"{path}:7:48: AMP301 fix not applied: the fix would create AMP104 (created)"]
    assert path.read_text() == BIG


# ------------------------------------------------------------------ CPython's parser, in pieces


def _texts():
    for name in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True)):
        with open(name, encoding="utf-8") as fh:
            yield os.path.relpath(name, ROOT), fh.read()
    yield "a string holding lines at column 0", 'x = 1\ndoc = """\ndef f():\nclass C:\n"""\n\n\ndef g():\n    return doc\n' * 20
    yield "decorators, else, brackets at column 0", "@a\n@b\ndef f():\n    pass\nif x:\n    y = [\n1,\n]\nelse:\n    pass\n" * 20
    # one big function: its body read a run of statements at a time after its header
    body = "".join(f"    s{i} = scores.masked_fill(scores > k, -1e9)\n" for i in range(40))
    yield "a function's body", "import torch\ndef attend(q, kt):  # note\n    scores = (q @ kt).half()\n" + body + "    return scores\n"
    yield "a string in a body holding lines at its indent", "def f(x):\n" + body + '    doc = """\n    y = 1\n    if y:\n"""\n' + body + "    return doc\n"
    yield "else, except, brackets, decorators at a body's indent", "def f(x):\n" + (body + "    if x:\n        pass\n    else:\n        pass\n    try:\n        y = [\n    1,\n    ]\n    except E:\n        pass\n    @d\n    def g():\n        pass\n") * 3
    yield "an async body, comments at column 0", "async def f(x):\n" + body + "# a comment\n    await x\n" + body + "\n\n# end\n"
    yield "a body indented by a tab", "def f(x):\n" + body.replace("    ", "\t") + "\treturn x\n"


@pytest.mark.parametrize("name, text", list(_texts()), ids=[n for n, _ in _texts()])
def test_pieces_decide_as_one_whole_parse(name, text):
    """Parsed in 200-byte runs of statements, every fixture (and each with a line broken in it
    here and there) gets the answer of one whole parse."""

    def whole(t):
        try:
            ast.parse(t)
        except SyntaxError:
            return False
        return True

    assert excerpt.python_parses(text, 200) == whole(text)
    rows = text.split("\n")
    for at in range(0, len(rows), max(1, len(rows) // 7)):
        if rows[at].strip() and not rows[at].lstrip().startswith("#"):
            broken = "\n".join(rows[:at] + [rows[at] + " ("] + rows[at + 1 :])
            assert excerpt.python_parses(broken, 200) == whole(broken), (name, at)


def test_pieces_of_a_text_that_parses_are_never_parsed_whole(monkeypatch):
    """The runs of a valid text parse alone, so no tree of the whole text is built."""
    parsed = []
    real = excerpt._parse
    monkeypatch.setattr(excerpt, "_parse", lambda t: parsed.append(len(t)) or real(t))
    text = BIG.replace("-1e9", "torch.finfo(scores.dtype).min") + "y = 2\n" * 60_000
    assert excerpt.python_parses(text)
    assert len(parsed) > 2 and max(parsed) < len(text)


def test_code_newer_than_this_interpreter_is_judged_by_libcst():
    """A text CPython refuses is read by libcst, as the lint reads it: a PEP 695 alias (Python
    3.12) does not make its file's fixes look like syntax errors on an older interpreter."""
    assert parses("import torch\nscaler = torch.amp.GradScaler('cuda')\ntype X = int\n")
    assert not parses("import torch\nscaler = torch.amp.GradScaler('cuda'\ntype X = int\n")


def test_a_huge_functions_body_is_never_parsed_whole(monkeypatch):
    """The 140,000-line function shape's fix check: the body is parsed a run at a time after the
    function's header (CPython's tree of the whole function: 1.5 GB at 140,000 lines)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from scaling import dense_source

    parsed = []
    real = excerpt._parse
    monkeypatch.setattr(excerpt, "_parse", lambda t: parsed.append(len(t)) or real(t))
    text = dense_source(3000, "function").replace("-1e9", "torch.finfo(scores.dtype).min")
    assert excerpt.python_parses(text, 4000)
    assert len(parsed) > 10 and max(parsed) < 5000
    parsed.clear()
    broken = text.replace("s1500 = scores", "s1500 = (scores")
    assert not excerpt.python_parses(broken, 4000)
    assert max(parsed) == len(broken)  # a run that does not parse: the whole text decides
