"""amplint.model.parse: libcst's parse without node validation gives the same trees,
and validation is back for every node built outside a parse."""
from __future__ import annotations

import glob
import os
import threading

import libcst as cst
import pytest

from amplint.model import parse as parse_mod
from amplint.model.parse import parse_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _texts():
    paths = sorted(glob.glob(os.path.join(REPO, "fixtures", "**", "*.py"), recursive=True))
    paths += sorted(glob.glob(os.path.join(REPO, "amplint", "model", "*.py")))
    return paths


@pytest.mark.parametrize("path", _texts(), ids=lambda p: os.path.relpath(p, REPO))
def test_same_tree_as_the_validated_parse(path):
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    fast = parse_module(source)
    assert fast.deep_equals(cst.parse_module(source))
    assert fast.code == source


def test_validation_is_restored_after_a_parse_and_after_a_failed_one():
    parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def (:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    assert parse_mod._parsing == 0


def test_validation_is_off_only_while_parsing():
    """While a parse runs in one thread the switch is off; the count brings it back when the
    last overlapping parse ends (the server parses in threads)."""
    started, release = threading.Event(), threading.Event()
    original = cst.CSTNode.__dict__["__post_init__"]

    def slow_parse() -> None:
        parse_mod._skip_validation(cst.CSTNode)
        try:
            started.set()
            release.wait(10)
            parse_module("y = 2\n")  # overlaps with the outer one
        finally:
            parse_mod._restore_validation(cst.CSTNode)

    thread = threading.Thread(target=slow_parse)
    thread.start()
    started.wait(10)
    assert cst.CSTNode.__dict__["__post_init__"] is not original
    release.set()
    thread.join(10)
    assert cst.CSTNode.__dict__["__post_init__"] is original
    with pytest.raises(cst.CSTValidationError):
        cst.Name("still checked")
