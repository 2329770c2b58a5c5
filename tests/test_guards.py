"""Guard clauses as branches (amplint/model/guards.py): after `if c: return` / `continue` the rest
of the block runs only when `c` is false, which the plain branch paths do not show."""
from __future__ import annotations

import textwrap

import libcst as cst

from amplint.model.context import ModuleContext
from amplint.model.guards import GuardedPaths
from amplint.model.paths import exclusive

SOURCE = textwrap.dedent(
    """\
    def step(loader, accum):
        prepare()
        for i, batch in enumerate(loader):
            backward(batch)
            if (i + 1) % accum:
                skipped(i)
                continue
            if batch is None:
                pass
            boundary(i)
            if late:
                return
            after_return(i)
        done()
    """
)


def _calls():
    ctx = ModuleContext.build(cst.parse_module(SOURCE), SOURCE, "t.py")
    guards = GuardedPaths(ctx)
    return ctx, {c.dotted: (c, guards.path(c.path, c.statement)) for c in ctx.calls if c.dotted}


def test_code_after_a_guard_is_exclusive_with_its_body_and_not_with_code_before_it():
    ctx, calls = _calls()
    _, skipped = calls["skipped"]
    _, boundary = calls["boundary"]
    _, backward = calls["backward"]
    assert exclusive(skipped, boundary)
    assert not exclusive(backward, boundary) and not exclusive(backward, skipped)
    plain = calls["boundary"][0].path
    assert not exclusive(calls["skipped"][0].path, plain)  # what the model alone says


def test_guard_frames_sit_inside_the_loop_in_source_order_and_only_real_exits_count():
    _, calls = _calls()
    call, guarded = calls["after_return"]
    kinds = [(f.kind, type(f.node).__name__) for f in guarded]
    assert kinds == [("loop", "For"), ("else", "If"), ("else", "If")]  # `if batch is None: pass` is no guard
    assert guarded[0] is call.path[0]
    tests = [cst.Module([]).code_for_node(f.test) for f in guarded[1:]]
    assert sorted(tests) == ["(i + 1) % accum", "late"]
    # one frame object per guard, shared by every statement after it
    assert calls["boundary"][1][1] in guarded


def test_no_guard_leaves_the_path_unchanged_and_guards_stop_at_the_function():
    _, calls = _calls()
    call, guarded = calls["prepare"]
    assert guarded is call.path
    call, guarded = calls["done"]
    assert guarded == call.path  # the `continue`/`return` guards are inside the loop, not before `done()`
