"""amplint.model.positions gives every node the range libcst's PositionProvider gives it."""
from __future__ import annotations

import glob
import os

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.model.positions import Positions
from amplint.engine.registry import all_rules
from amplint.core.rule import example_source
from amplint.model.walk import parent_map

HERE = os.path.dirname(os.path.abspath(__file__))
ODD = [
    "",
    "\n\n# only comments\n\n",
    "x = 1",  # no trailing newline
    "# header\n\n\nimport a; import b\n\n\n@d\n\n# between\n@e(1)\ndef f(\n    a,\n):\n    '''doc\n\n    '''\n    return a\n# footer\n\n",
    "if a:\r\n    b = '''x\r\ny'''\r\nelse:\r\n    pass\r\n",
    "class C:\n\tdef m(self):\n\t\treturn [\n1,\n\t2]\n\nx = (\\\n  1)\n",
    "s = 'a\\\nb'\nasync def g():\n    async with a as b:\n        await c(lambda q=1e9: -q)\n",
]


def _cases():
    for i, text in enumerate(ODD):
        yield pytest.param(text, id=f"odd{i}")
    for rule in all_rules():
        for j, case in enumerate((*rule.VALID, *rule.INVALID)):
            yield pytest.param(example_source(case.code), id=f"{rule.code}-{j}")
    for path in sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "*.py"))):
        with open(path, encoding="utf-8") as fh:
            yield pytest.param(fh.read(), id=os.path.basename(path))


@pytest.mark.parametrize("source", list(_cases()))
def test_same_ranges_as_libcst_for_every_node(source):
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    parents = parent_map(module)
    nodes = [module, *parents]
    # fresh per query order: statements last-to-first, then the module (the whole-module path)
    positions = Positions(module)
    for node in reversed(nodes):
        assert positions[node] == expected[node], (type(node).__name__, module.code_for_node(node))


def test_only_the_statement_asked_about_is_generated(monkeypatch):
    source = "import torch\n" + "\n" * 1000 + "def big():\n" + "    x = 1\n" * 500 + "y = torch.zeros(1)\n"
    module = cst.parse_module(source)
    generated = []
    real = Positions._generate
    monkeypatch.setattr(Positions, "_generate", lambda self, stmt, line: generated.append(stmt) or real(self, stmt, line))
    last = module.body[-1]
    assert Positions(module)[last].start.line == 1503
    assert generated == [last]


def _expected(module):
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def _dense(n):
    return "import torch\n\n# dense\nk = 0.5\n" + "".join(f"s{i} = scores.masked_fill(\n    scores > k, -1e9)  # {i}\n\n" for i in range(n))


def _counting(monkeypatch):
    calls = {"statements": 0, "whole": 0}
    real_one, real_whole = Positions._generate, Positions._generate_whole

    def one(self, stmt, line):
        calls["statements"] += 1
        return real_one(self, stmt, line)

    def whole(self):
        calls["whole"] += 0 if self._whole else 1
        return real_whole(self)

    monkeypatch.setattr(Positions, "_generate", one)
    monkeypatch.setattr(Positions, "_generate_whole", whole)
    return calls


def test_a_module_of_findings_is_generated_whole_after_a_few_statements(monkeypatch):
    from amplint.model.positions import DENSE_AFTER

    module = cst.parse_module(_dense(300))
    expected = _expected(module)
    calls = _counting(monkeypatch)
    positions = Positions(module)
    for stmt in module.body[2:]:  # in order, two nodes of each statement (a finding and its fix)
        call = stmt.body[0].value
        for node in (call, call.args[1].value):
            assert positions[node] == expected[node]
    assert calls == {"statements": DENSE_AFTER, "whole": 1}


def test_statements_are_mapped_only_as_far_as_asked(monkeypatch):
    module = cst.parse_module(_dense(1000))
    expected = _expected(module)
    calls = _counting(monkeypatch)
    positions = Positions(module)
    node = module.body[12].body[0].value
    assert positions[node] == expected[node]
    assert positions._mapped == 13 and calls == {"statements": 1, "whole": 0}


def test_a_module_with_findings_on_a_third_of_its_statements_stays_per_statement(monkeypatch):
    module = cst.parse_module(_dense(600))
    expected = _expected(module)
    calls = _counting(monkeypatch)
    positions = Positions(module)
    asked = module.body[2::3]
    for stmt in asked:
        node = stmt.body[0].value
        assert positions[node] == expected[node]
    assert calls == {"statements": len(asked), "whole": 0}


def test_the_last_statement_mapped_is_not_generated_to_count_its_lines(monkeypatch):
    # a module that is mostly one function holding every finding: its code is generated once,
    # for the ranges, not a second time to count its lines (only a later statement needs them)
    from amplint.model import fastgen

    source = "import torch\n\n\ndef big(s):\n" + "".join(f"    s{i} = s.masked_fill(\n        s > 0, -1e9)\n" for i in range(300)) + "\n\ny = torch.zeros(1)\n"
    module = cst.parse_module(source)
    expected = _expected(module)
    counted = []
    real = fastgen.code
    monkeypatch.setattr(fastgen, "code", lambda module_, node: counted.append(node) or real(module_, node))
    positions = Positions(module)
    big = module.body[1]
    inner = big.body.body[150].body[0].value
    assert positions[inner] == expected[inner]
    assert big not in counted
    last = module.body[-1]
    assert positions[last] == expected[last] and big in counted  # a later statement: counted then
