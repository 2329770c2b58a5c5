"""Literal values without `ast.literal_eval` (`model.literals.evaluated`): its nested functions
are a reference cycle per call, and with the cycle collector paused while a file is analysed
(`engine.gc_paused`) two per AMP301 site stayed until the file was done: the 140,000-line
AMP-dense file of issue 26 outgrew the analysis's 1 GB bound on them. The same values as
libcst's `evaluated_value` on every number and string of every rule example and fixture."""
from __future__ import annotations

import ast
import gc
import glob
import os

import libcst as cst
import pytest

from amplint import Config
from amplint.core.rule import example_source
from amplint.engine.pipeline import lint_file_source, selected_rules
from amplint.engine.registry import all_rules
from amplint.model.literals import evaluated
from amplint.model.walk import parent_map

HERE = os.path.dirname(os.path.abspath(__file__))
ODD = (
    "x = [0, 7, 10_000, 0x1F, 0X_ff, 0o17, 0b1010, 0B_1, 1_0, 123456789012345678901234567890]\n"
    "y = [1e9, -1e9, 1E+09, 1.5e-300, 1e999, 1., .5, 0.0, 1_000.000_1, 3.14e-08, 65504.0, 0e0, 1_0e1_0]\n"
    "z = ['a', \"b\", r'\\d+', b'bytes', rb'\\x00', u'u', '''t\nq''', 'esc\\n\\t\\x41\\u00e9\\N{BULLET}', 'fp16', '  Accelerator ']\n"
)


def _texts():
    yield ODD
    for rule in all_rules():
        for case in (*rule.VALID, *rule.INVALID):
            yield example_source(case.code)
    for path in sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            yield fh.read()


def test_the_same_values_as_evaluated_value():
    seen = 0
    for text in _texts():
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue
        for node in parent_map(module):
            if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
                expected = node.evaluated_value
                got = evaluated(node)
                assert type(got) is type(expected) and (got == expected or got != got and expected != expected), node.value
                seen += 1
    assert seen > 1000


def test_no_reference_cycle_is_left_behind():
    module = cst.parse_module(ODD)
    nodes = [n for n in parent_map(module) if isinstance(n, (cst.Integer, cst.Float, cst.SimpleString))]
    gc.collect()
    gc.disable()
    try:
        for node in nodes * 20:
            evaluated(node)
        assert gc.collect() == 0
        for node in nodes:
            ast.literal_eval(node.value)  # what it replaces: the test can tell
        assert gc.collect() > 0
    finally:
        gc.enable()


@pytest.mark.parametrize("lines", [400])
def test_a_dense_module_leaves_no_cycle_from_its_literals(lines):
    source = "import torch\n\nk = 0.5\nscores = torch.randn(8, 8, dtype=torch.float16)\n" + "".join(
        f"s{i} = scores.masked_fill(scores > k, -1e9)\n" for i in range(lines)
    )
    config = Config()
    codes, rules = selected_rules(config)
    lint_file_source(source, "dense.py", config, rules, codes)  # imports, first-use memos
    gc.collect()
    gc.disable()
    try:
        found = lint_file_source(source, "dense.py", config, rules, codes).diagnostics
        assert len(found) == lines
        assert gc.collect() < lines  # was ~22 objects a site (literal_eval's closures, two a site)
    finally:
        gc.enable()
