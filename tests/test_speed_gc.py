"""The cycle collector stays out of the per-file work (amplint/engine/pipeline.py `gc_paused`).

A cold run pauses CPython's cycle collector while a file is parsed and
analysed; that is only safe while a file's libcst tree and AMP model are freed
by reference counting, i.e. while nothing builds a reference cycle that holds
them (`ModuleContext.release` and `walk` break the ones they need).
"""
from __future__ import annotations

import gc
from pathlib import Path

import libcst as cst
import pytest

from amplint.core.config import Config
from amplint.engine.registry import all_rules
from amplint.engine.run import lint_source
from amplint.model.context import ModuleContext

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("*.py"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_file_s_tree_and_model_die_without_the_cycle_collector(path):
    source = path.read_text()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        module = cst.parse_module(source)
        ctx = ModuleContext.build(module, source, str(path), Config())
        for rule in all_rules():
            list(rule().check(ctx))
        ctx.release()
        del ctx, module
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what the collector finds, to look at it
        gc.collect()
        # a class made per call (a rule's local visitor) is itself cyclic garbage, and its
        # closure may hold the context: visitors are module-level classes
        made = [o.__qualname__ for o in gc.garbage if isinstance(o, type) and o.__module__.startswith("amplint.")]
        assert not made, f"classes created per call: {sorted(set(made))}"
        kept = [
            o
            for o in gc.garbage
            if isinstance(o, cst.CSTNode) or (type(o).__module__.startswith("amplint.model.") and vars(o))
        ]
        assert not kept, f"a reference cycle holds the file's tree or model: {sorted({type(o).__name__ for o in kept})}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def test_linting_leaves_the_collector_as_it_found_it():
    source = FIXTURES[0].read_text()
    assert gc.isenabled()
    lint_source(source, "t.py")
    assert gc.isenabled()
    gc.disable()
    try:
        lint_source(source, "t.py")
        assert not gc.isenabled()
    finally:
        gc.enable()
