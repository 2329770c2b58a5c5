"""amplint.model.fastgen generates what libcst generates: the same ranges as `PositionProvider`
and the same text as `Module.code_for_node`, for every node of every example, fixture and an
odd-syntax corpus (the classes it transcribes and the ones it hands back to libcst)."""
from __future__ import annotations

import glob
import os

import libcst as cst
import pytest
from libcst._nodes.base import CSTCodegenError
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.core.rule import example_source
from amplint.engine.registry import all_rules
from amplint.model import fastgen
from amplint.model.walk import parent_map

HERE = os.path.dirname(os.path.abspath(__file__))
ODD = [
    "",
    "\n",
    "\n\n# only comments\n\n",
    "x = 1",  # no trailing newline
    "# header\n\n\nimport a; import b\n\n\n@d\n\n# between\n@e(1)\ndef f(\n    a,\n):\n    '''doc\n\n    '''\n    return a\n# footer\n\n",
    "if a:\r\n    b = '''x\r\ny'''\r\nelse:\r\n    pass\r\n",
    "class C:\n\tdef m(self):\n\t\treturn [\n1,\n\t2]\n\nx = (\\\n  1)\n",
    "s = 'a\\\nb'\nasync def g():\n    async with a as b:\n        await c(lambda q=1e9: -q)\n",
    "x = ( ( a ) . b [ 1 , 2 : 3 , ] ( * c , ** d , e = - 1e9 , ) )\n",
    "a = b = (c,)\nd += ~e ; f @= g\ny = not a and b or c is not d not in e\n",
    "def f(a, /, b: int = 1, *c, d=2, **e) -> 'r':\n    return\n    return (1)\n",
    "class K(B, metaclass=M):  # c\n    x: int = 1\n\n    @p . q\n    def m(self): pass\n\n\nclass E: ...\n",
    "for i in range(3):\n    if i > 1:\n        continue\n    elif i:\n        break\n    else:\n        x = [i , ]\nelse:\n    y = (  # why\n        1\n    )\n",
    "while x:\n    try:\n        f(x)[0]\n    except E as e:\n        raise\n    finally:\n        del x\n",
    "print(f'{x!r:>{w}}', b'\\x00', 1j, 0x1F, 1_000, *a, **b)\nz = {1: 2, **c}\nw = {*a}\n",
    "def f():\n    if a:\n        pass\n\n\n\n    # trailing comment\n",
    "x = [\n    1,  # one\n\n    2\n]\n",
    "if x: y = 1; z = 2\n",
]


def _cases():
    for i, text in enumerate(ODD):
        yield pytest.param(text, id=f"odd{i}")
    for rule in all_rules():
        for j, case in enumerate((*rule.VALID, *rule.INVALID)):
            yield pytest.param(example_source(case.code), id=f"{rule.code}-{j}")
    for path in sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            yield pytest.param(fh.read(), id=os.path.relpath(path, os.path.join(HERE, "..")))


CASES = list(_cases())


@pytest.mark.parametrize("source", CASES)
def test_same_ranges_and_text_as_libcst_for_every_node(source):
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got: dict = {}
    fastgen.ranges(module, module, 1, got)
    nodes = [module, *parent_map(module)]
    for node in nodes:
        assert fastgen.as_range(got[node]) == expected[node], (type(node).__name__, module.code_for_node(node))
        try:
            text = module.code_for_node(node)
        except CSTCodegenError:  # a node libcst cannot generate alone (an `Annotation`)
            continue
        assert fastgen.code(module, node) == text, type(node).__name__


def test_unknown_classes_are_generated_by_libcst():
    source = "try:\n    with a as b, c:\n        yield (x async for x in y)\nexcept* E:\n    pass\n"
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got: dict = {}
    fastgen.ranges(module, module, 1, got)
    assert all(fastgen.as_range(got[n]) == expected[n] for n in [module, *parent_map(module)])
    assert fastgen.code(module, module.body[0]) == module.code_for_node(module.body[0])
