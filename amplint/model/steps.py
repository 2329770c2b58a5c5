"""Source text of a flagged training step, for the verifier (`Diagnostic.data["step_source"]`).

The GradScaler-protocol rules (AMP101-AMP104) hand the verifier the user's own
statements so `amplint --verify` can run them on a tiny real model, optimizer
and GradScaler (amplint/verify/snippet.py). Two shapes:

* `step_source(ctx, first, last)`: verbatim lines from the statement of `first`
  (usually the scaled backward) through `last` (the step/update), extended
  through the `update()`/`zero_grad()` that close the same step, so the slice
  runs the whole protocol the finding is about.
* `loop_body_source(ctx, loop)`: the body of a loop (one micro-batch of a
  gradient-accumulation loop); the verifier runs it once per micro-batch with
  the loop's index and batch bound.
* `step_data(ctx, scope, backward, optimizer)`: `dtype`/`device` of the loss's
  autocast region and the optimizer's constructor (`optimizer_class`).

Lines are verbatim (indentation is repaired by the verifier). Never raises: an
empty string means "no slice" and the verifier runs its canonical reproduction.
"""
from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from .context import ModuleContext
from .event_index import events_after, region_calls_before
from .paths import exclusive
from .types import AutocastRegion, Event, Frame, Path, Scope

#: events that close a step after the optimizer/scaler step
_CLOSERS = ("update", "zero_grad")
_BACKWARDS = ("scaled_backward", "backward", "framework_backward")


def lines_between(ctx: ModuleContext, first: cst.CSTNode, last: cst.CSTNode) -> str:
    """The source lines from `first`'s first line through `last`'s last line."""
    try:
        start, _ = ctx.position(first)
        _, end = ctx.position(last)
    except KeyError:
        return ""
    if end.row < start.row:
        return ""
    return "\n".join(_source_lines(ctx)[start.row - 1 : end.row])


def _source_lines(ctx: ModuleContext) -> list:
    """The file's lines, split once per file (cached on the context, which `release` clears)
    rather than once per finding: n findings in a file of n lines cost n, not n^2."""
    lines = ctx.__dict__.get("_source_lines")
    if lines is None:
        lines = ctx.__dict__["_source_lines"] = ctx.source.splitlines()
    return lines


def step_source(
    ctx: ModuleContext,
    first: Event,
    last: Event,
    scope: Optional[Scope] = None,
    closers: Sequence[str] = _CLOSERS,
) -> str:
    """The flagged step's statements: from `first` through `last`, then through the
    `closers` events (update/zero_grad) that follow `last` in `scope` before the
    next backward and can run in the same pass."""
    end = last
    owner = scope if scope is not None else first.call.scope
    events = owner.events
    for at in range(events_after(owner, last.order), len(events)):
        e = events[at]
        if e.kind in _BACKWARDS:
            break
        if e.kind in closers and not exclusive(e.path, last.path) and _same_loops(e, last):
            end = e
    return lines_between(ctx, _start(ctx, first), end.call.statement)


def _start(ctx: ModuleContext, first: Event) -> cst.CSTNode:
    """`first`'s statement, or the earlier one that assigns its receiver
    (`scaled = scaler.scale(loss)` before `scaled.backward()`)."""
    receiver = first.call.receiver
    if not isinstance(receiver, cst.Name):
        return first.call.statement
    before = [
        a
        for a in ctx.assignments_to(receiver.value, first.call.scope)
        if a.order < first.order and a.scope is first.call.scope and not exclusive(a.path, first.path)
    ]
    latest = max(before, key=lambda a: a.order) if before else None
    if latest is not None and latest.statement is not None:
        return latest.statement
    return first.call.statement


def _same_loops(a: Event, b: Event) -> bool:
    """`a` runs in the same loop iterations as `b` (not after the loop ended)."""
    loops_a = [f for f in a.path if f.kind == "loop"]
    loops_b = [f for f in b.path if f.kind == "loop"]
    return all(any(g is f for g in loops_a) for f in loops_b)


def innermost_common_loop(a: Path, b: Path) -> Optional[Frame]:
    """The innermost loop frame that both paths run in, or None."""
    for f in reversed(a):
        if f.kind == "loop" and any(g is f for g in b):
            return f
    return None


def loop_body_source(ctx: ModuleContext, loop: Optional[Frame]) -> str:
    """The body of a `for`/`while` loop frame (one micro-batch), or "". One string per loop,
    shared by its findings: n findings in a loop of n steps hold one body, not n copies."""
    if loop is None or loop.kind != "loop" or not isinstance(loop.node, (cst.For, cst.While)):
        return ""
    bodies = ctx.__dict__.setdefault("_loop_bodies", {})
    if id(loop.node) not in bodies:
        bodies[id(loop.node)] = _loop_body(ctx, loop.node)
    return bodies[id(loop.node)]


def _loop_body(ctx: ModuleContext, loop: cst.CSTNode) -> str:
    body = loop.body
    statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
    if not statements:
        return ""
    return lines_between(ctx, statements[0], statements[-1])


def step_region(scope: Scope, event: Event) -> Optional[AutocastRegion]:
    """The autocast region the step's loss was computed in: the region of `event`'s
    call, else the last region entered in `scope` before it (same pass)."""
    if event.call.region is not None:
        return event.call.region
    for call in region_calls_before(scope, event.order):  # latest first
        if not exclusive(call.path, event.path):
            return call.region
    return None


def step_data(ctx: ModuleContext, scope: Scope, backward: Event, optimizer: Optional[str]) -> dict:
    """`dtype`, `device` (of the loss's autocast region, else the scaler's device) and
    `optimizer_class` (the optimizer's constructor) for a training-step finding."""
    region = step_region(scope, backward)
    info = ctx.optimizers.get(optimizer or "")
    ctor = next((c.qualname for c in info.constructors if c.qualname), None) if info is not None else None
    scaler = ctx.scaler(backward.scaler)
    device = region.device if region is not None and region.device else (scaler.device if scaler is not None else None)
    return {
        "dtype": region.dtype if region is not None and region.enabled is not False else None,
        "device": device,
        "optimizer_class": ctor,
    }
