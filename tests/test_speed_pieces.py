"""A huge file of sites is parsed in pieces (`excerpt.pieces`, one libcst tree at a time): the
findings are those of one whole-file parse, the same diagnostics in the same order."""
from __future__ import annotations

import glob
import os
import sys
import textwrap

import pytest

from amplint.core.config import Config
from amplint.engine import excerpt, pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from scaling import dense_source  # noqa: E402

CONFIG = Config(file_timeout=0)
_REAL_PIECES = excerpt.pieces


def _lint(source: str, monkeypatch, limit):
    """(diagnostics as comparable text, how many pieces were parsed) with pieces of `limit` bytes
    (None: never in pieces)."""
    calls = []
    real = _REAL_PIECES

    def spy(text, limit_=None, wanted=None):
        if limit is None:
            return None
        got = real(text, limit, wanted)
        calls.append(0 if got is None else len(got))
        return got

    monkeypatch.setattr(excerpt, "pieces", spy)
    codes, rules = pipeline.selected_rules(CONFIG)
    result = pipeline.lint_file_source(source, "big.py", CONFIG, rules, codes)
    return [repr(d) for d in result.diagnostics], max(calls, default=0)


MIXED = textwrap.dedent('''\
    """A module of masks."""
    import torch
    from torch import nn

    k = 0.5
    scores = torch.randn(8, 8, dtype=torch.float16)
    wide = torch.randn(8, 8)
    NEG = -1e9
    EPS = 1e-8


    def _fill(x, m):
        return x.masked_fill(m, -1e9)


    def attend(q, kt):
        s = (q @ kt).half()
        return s.masked_fill(s > 0, -1e9) + EPS

    ''')


def _mixed(n: int, blocks: bool = False) -> str:
    body = []
    for i in range(n):
        if i % 7 == 0:
            body.append(f"a{i} = wide.masked_fill(wide > k, -1e9)")
        elif i % 11 == 0:
            body.append(f"b{i} = _fill(scores, scores > k)")
        elif i % 13 == 0:
            body.append(f"c{i} = scores.masked_fill(scores > k,\n    NEG)")
        elif i % 17 == 0:
            body.append(f"d{i} = scores + 1e-8")
        elif i % 43 == 0:
            body.append(f"used{i} = scores.masked_fill(scores > k, -1e9)\nscores = used{i}")
        elif blocks and i % 59 == 0:
            body.append(f"with torch.autocast('cuda', dtype=torch.float16):\n    w{i} = wide.masked_fill(wide > k, -1e9)")
        elif i % 31 == 0:
            body.append(f"e{i}: torch.Tensor = scores.masked_fill(scores > k, -1e9)  # noqa: AMP301")
        else:
            body.append(f"s{i} = scores.masked_fill(scores > k, -1e9)")
    return MIXED + "\n".join(body) + "\n\ndef tail(x):\n    return x.half().masked_fill(x > 0, -1e9)\n"


@pytest.mark.parametrize("shape", ["module", "function"])
def test_dense_file_in_pieces_gives_the_whole_files_findings(shape, monkeypatch):
    source = dense_source(1200, shape)
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, 4000)
    assert whole and split == whole
    if shape == "module":
        assert parts > 5  # the module's statements were parsed a few hundred lines at a time


@pytest.mark.parametrize("limit", [6000, 9000])
def test_mixed_module_in_pieces_gives_the_whole_files_findings(limit, monkeypatch):
    source = _mixed(600)
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, limit)
    assert parts > 2
    assert split == whole


def _runs_of_fills(n: int, shape: str) -> str:
    """`n` leaves (dead stores of fills of `scores`) with, every 97th, two fills in a row of
    another tensor that AMP301 reports as one finding (kept in every piece: not leaves)."""
    pad = "    " if shape == "function" else ""
    head = ["import torch", "", "k = 0.5"]
    if shape == "function":
        head += ["def attend(q, kt):", "    scores = (q @ kt).half()", "    other = scores.clone()"]
    else:
        head += ["scores = torch.randn(8, 8, dtype=torch.float16)", "other = scores.clone()"]
    body = []
    for i in range(n):
        if i % 97 == 50:
            body += [f"{pad}other.masked_fill_(other > {i}, -1e10)", f"{pad}# and below", f"{pad}other.masked_fill_(other < {i}, -1e10)"]
        body.append(f"{pad}s{i} = scores.masked_fill(scores > k, -1e9)")
    tail = ["    return scores"] if shape == "function" else []
    return "\n".join(head + body + tail) + "\n"


@pytest.mark.parametrize("shape", ["module", "function"])
def test_fills_in_a_row_are_one_finding_whatever_the_pieces(shape, monkeypatch):
    # AMP301 groups the same constant filled into one tensor in consecutive statements: the
    # groups must be those of the whole parse (a dead store, what pieces are cut into, is never
    # grouped; blanked rows between two fills end a run)
    source = _runs_of_fills(1200, shape)
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, 4000)
    assert parts > 5
    assert split == whole
    grouped = [d for d in whole if "also filled" in d]
    assert len(grouped) == len(range(50, 1200, 97))
    assert len(whole) == 1200 + len(grouped)


def test_a_block_with_a_site_keeps_what_it_names_whole(monkeypatch):
    source = _mixed(600, blocks=True)  # module-level `with autocast` blocks holding sites
    whole, _ = _lint(source, monkeypatch, None)
    split, _ = _lint(source, monkeypatch, 6000)
    assert split == whole


def test_leaves_are_only_assignments_nothing_else_mentions():
    source = _mixed(300)
    got = excerpt.pieces(source, 6000, pipeline_sites(source))
    assert got is not None
    rows = source.split("\n")
    own = [r for _, span in got for r in span]
    assert own == list(range(1, len(rows) + 1))  # every row's findings come from one piece
    for text, _ in got:
        assert len(text.split("\n")) == len(rows)  # rows keep their numbers
        kept = text.split("\n")
        for i, row in enumerate(rows):
            if row.startswith(("used", "scores = used", "with ", "k = ", "NEG", "def ", "import")):
                assert kept[i] == row  # the core: in every piece


def pipeline_sites(source):
    from amplint.core.gating import passing, site_lines

    codes, rules = pipeline.selected_rules(CONFIG)
    return site_lines(passing(rules, source), source)


def test_a_string_that_looks_like_statements_is_not_cut():
    inner = "\n".join(f"x{i} = {i}" for i in range(400))
    source = f'import torch\ns = torch.zeros(2).half()\nt = """\n{inner}\n"""\nu = s.masked_fill(s > 0, -1e9)\n'
    assert excerpt.pieces(source, 500) is None


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "fixtures", "*.py"))))
def test_fixture_findings_unchanged_with_tiny_pieces(path, monkeypatch):
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    whole, _ = _lint(source, monkeypatch, None)
    split, _ = _lint(source, monkeypatch, 200)
    assert split == whole


def _pieces_parsing_every_leaf(monkeypatch, text, limit, wanted):
    """`excerpt.pieces` as before the stand-ins: each piece checked with its leaves' own text."""
    real = excerpt._filled
    monkeypatch.setattr(excerpt, "_filled", lambda rows, runs, expected, kept=(): real(rows, runs, expected))
    try:
        return excerpt.pieces(text, limit, wanted)
    finally:
        monkeypatch.setattr(excerpt, "_filled", real)


_ODD = [
    _mixed(300),
    _mixed(300, blocks=True),
    dense_source(400, "module"),
    # a backslash closing a leaf's last row, and a comment after it
    "import torch\n" + "".join(f"v{i} = torch.ones(2) \\\n    + {i}\n# note\n" for i in range(200)),
    "import torch\n" + "".join(f"w{i} = {i}  # c \\\n" for i in range(300)),
    # statements that look like leaves inside strings and brackets (a wrong split)
    "import torch\nt = '''\n" + "".join(f"x{i} = {i}\n" for i in range(200)) + "'''\n" + "".join(f"y{i} = {i}\n" for i in range(200)),
    "import torch\nL = [\n" + "".join(f"z{i} = {i}\n" for i in range(200)) + "]\n" + "".join(f"q{i} = {i}\n" for i in range(200)),
    # a compound statement with no body before a leaf, a decorator before one
    "import torch\nif torch:\n" + "".join(f"a{i} = {i}\n" for i in range(300)),
    "import torch\n@torch.no_grad\n" + "".join(f"b{i} = {i}\n" for i in range(300)),
    # multi-line leaves, annotated ones, chained targets
    "import torch\n" + "".join(f"m{i}: int = (\n    {i}\n)\nn{i} = o{i} = {i}\n" for i in range(200)),
]


@pytest.mark.parametrize("i", range(len(_ODD)))
def test_the_pieces_check_with_stand_ins_decides_as_parsing_every_leaf(i, monkeypatch):
    # `_filled` parses each kept leaf as `pass`: the pieces (or None) are those of parsing the
    # leaves themselves again
    for wanted in (None, pipeline_sites(_ODD[i]), [1]):
        for limit in (300, 1000, 4000):
            got = excerpt.pieces(_ODD[i], limit, wanted)
            assert got == _pieces_parsing_every_leaf(monkeypatch, _ODD[i], limit, wanted)


# ------------------------------------------------------------------ the body of one huge function


def _in_function(n: int, blocks: bool = False, tail: str = "    return scores\n") -> str:
    """`_mixed`'s statements as the body of one function (its own `scores`, a leaf read later,
    `with autocast` blocks, noqa), then a top-level function after it."""
    body = _mixed(n, blocks)[len(MIXED) :].split("\n\ndef tail")[0]
    inner = "\n".join("    " + row if row else row for row in body.split("\n"))
    return MIXED + "def big(q, kt):\n    scores = (q @ kt).half()\n" + inner + "\n" + tail + "\n\ndef tail(x):\n    return x.half().masked_fill(x > 0, -1e9)\n"


def test_a_huge_functions_body_is_parsed_in_pieces(monkeypatch):
    source = dense_source(1200, "function")
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, 4000)
    assert whole and split == whole
    assert parts > 5  # the body's statements, a few hundred lines at a time
    got = excerpt.pieces(source, 4000, pipeline_sites(source))
    assert got is not None
    rows = source.split("\n")
    assert [r for _, span in got for r in span] == list(range(1, len(rows) + 1))
    for text, _ in got:
        kept = text.split("\n")
        assert len(kept) == len(rows)
        assert kept[3:5] == rows[3:5] and kept[-2] == rows[-2]  # the header, the core, `return`


@pytest.mark.parametrize("blocks", [False, True])
@pytest.mark.parametrize("limit", [3000, 6000, 9000])
def test_mixed_function_body_in_pieces_gives_the_whole_files_findings(limit, blocks, monkeypatch):
    source = _in_function(600, blocks)
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, limit)
    if limit > 3000 and not blocks:  # 3000: the core does not fit; blocks with sites: no leaves
        assert parts > 2
    assert split == whole
    assert any("AMP301" in d for d in whole)


@pytest.mark.parametrize(
    "tail",
    [
        "    def inner():\n        return s1\n    return inner\n",  # a nested definition
        "    global NEG\n    return scores\n",
        "    yield scores\n",
        "    f = lambda: scores\n    return f\n",
    ],
)
def test_an_unsure_body_is_parsed_whole(tail, monkeypatch):
    source = _in_function(600, tail=tail)
    assert excerpt.pieces(source, 6000, pipeline_sites(source)) is None
    whole, _ = _lint(source, monkeypatch, None)
    split, parts = _lint(source, monkeypatch, 6000)
    assert split == whole and parts == 0


def test_a_body_leaf_returned_is_not_a_leaf():
    source = _in_function(600, tail="    return s1, s2\n")
    got = excerpt.pieces(source, 6000, pipeline_sites(source))
    assert got is not None
    for text, _ in got:
        assert "    s1 = scores" in text and "    s2 = scores" in text  # in the core of every piece


def test_a_string_in_a_body_that_looks_like_statements_is_not_cut(monkeypatch):
    inner = "\n".join(f"    x{i} = {i}" for i in range(400))
    source = f'import torch\ndef f(s):\n    s = s.half()\n    t = """\n{inner}\n"""\n    return s.masked_fill(s > 0, -1e9)\n'
    assert excerpt.pieces(source, 500) is None


@pytest.mark.parametrize("shape", ["function", "module"])
def test_a_file_in_pieces_never_builds_the_whole_files_cpython_tree(shape, monkeypatch):
    # the exact excerpt's `ast.parse` of the whole file (1.2 GB for 140,000 lines in a function)
    # waits until neither the cut read off the indentation nor the pieces answer
    source = dense_source(1200, shape) + "\n\ndef unused(x):\n    return x\n" * (shape == "module")
    whole, _ = _lint(source, monkeypatch, None)
    calls = []
    real = excerpt._by_ast
    monkeypatch.setattr(excerpt, "_by_ast", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(excerpt, "PIECE_BYTES", 4000)
    split, parts = _lint(source, monkeypatch, 4000)
    assert split == whole and parts > 5
    assert not calls


def test_a_huge_file_the_pieces_refuse_still_gets_the_exact_excerpt(monkeypatch):
    # a string at column 0 inside a function defeats the cut read off the indentation and the
    # pieces; the exact cut (CPython's tree) still blanks the definition holding no site
    inner = "\n".join(f"x{i} = {i}" for i in range(400))
    source = f'import torch\n\n\ndef f(s):\n    t = """\n{inner}\n"""\n    return s.masked_fill(s > 0, -1e9)\n\n\ndef g(s):\n    u = """\n{inner}\n"""\n    return u\n'
    whole, _ = _lint(source, monkeypatch, None)
    calls = []
    real = excerpt._by_ast
    monkeypatch.setattr(excerpt, "_by_ast", lambda *a: calls.append(real(*a)) or calls[-1])
    monkeypatch.setattr(excerpt, "PIECE_BYTES", 500)
    split, parts = _lint(source, monkeypatch, 500)
    assert split == whole and any("AMP301" in d for d in whole)
    assert parts == 0 and calls and calls[0] is not None
