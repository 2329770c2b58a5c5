"""Whether a parameter update can follow a backward: the rules whose harm is a lost or changed
update (AMP105's underflowed gradients, AMP202's step under autocast) ask it of the function
holding the backward.

A benchmark timing `backward()`, a gradient or kernel-equivalence check comparing `.grad`
values, reads gradients and throws them away: no optimizer ever steps on them. `update_reachable`
says whether an update is within reach of the function, read along the file's own call graph
(`ModuleContext.callee` / `callers`):

* the function itself, or a function it calls (three levels), steps: an optimizer's `step()`
  (`optimizer.step()`, `scaler.step(optimizer)`, any `x.step()` but a profiler's: a scheduler, a
  DeepSpeed engine, an optimizer of a name the file does not know), `zero_grad()` of an
  optimizer, or a call named for an optimizer step the file does not define
  (`self.optimizer_step()` of a base class in another file);
* or a function calling it (three levels up; the loop that runs the step helper) does, or calls
  one that does;
* or the chain of callers reaches a function nothing in the file calls. A test of a test module
  (`test*`, in a file importing pytest or unittest, or one a test runner collects by its path) is
  run by the runner, and no optimizer steps after a test: only the test's own reach counts (a
  gradient-existence check, a backward smoke test under fp16 autocast). Otherwise who runs it is
  not known. Then the file decides (any optimizer built or stepped, or any `zero_grad()`, anywhere
  in it), or, in a file with none, the function itself: an instance method (a trainer's
  `training_step`, run by its base class or a framework between steps), a function handed an
  optimizer (a parameter named so) or returning a value (the loss, for its caller's step) may
  feed an update, and so may any other function handed something (the model, for its caller's
  step), unless the backward repeats in a loop of its own that steps nothing: every pass adds
  to gradients no update reads (a fwd+bwd timing). A free function or static method handed
  nothing and returning nothing (an equivalence check building its own nets and printing their
  `.grad` differences) hands its gradients to nobody who steps.

Module-level code is a script of its own: with no update in its reach it never updates.
"""
from __future__ import annotations

import re
from typing import List, Optional, Set

import libcst as cst

from .context import ModuleContext
from .types import Event, Scope

_DEPTH = 3
#: an unresolved call named for an optimizer step (`optimizer_step`, `step_optimizer`, `optim_step`)
_STEP_NAME = re.compile(r"optim\w*step|step\w*optim", re.IGNORECASE)
#: calls whose result steps a profiler, not an optimizer (`with torch.profiler.profile() as prof:`)
_PROFILERS = ("torch.profiler.", "torch.autograd.profiler.")


def file_updates(ctx: ModuleContext) -> bool:
    """The file takes an optimizer step somewhere: an optimizer built or stepped, or a
    `zero_grad()` (its caller's loop may step what it zeroes)."""
    if ctx.optimizers:
        return True
    return any(e.kind in ("optimizer_step", "scaler_step", "zero_grad") for s in ctx.scopes for e in s.events)


def update_reachable(ctx: ModuleContext, scope: Scope, event: Optional[Event] = None) -> bool:
    """An optimizer update can follow what `scope` runs, or its backward `event` (module docstring)."""
    memo = ctx.__dict__.setdefault("_update_reachable", {})
    key = (id(scope), _in_loop(event))
    found = memo.get(key)
    if found is None:
        found = memo[key] = _reachable(ctx, scope, key[1])
    return found


def _in_loop(event: Optional[Event]) -> bool:
    return event is not None and any(f.kind == "loop" for f in event.call.path)


def _reachable(ctx: ModuleContext, scope: Scope, looped: bool) -> bool:
    if _steps_below(ctx, scope):
        return True
    seen = {id(scope)}
    frontier = [scope]
    for _ in range(_DEPTH):
        following: List[Scope] = []
        for s in frontier:
            callers = ctx.callers(s)
            if not callers:
                if not s.is_module and not _test_runner_runs(ctx, s):
                    return file_updates(ctx) or _hands_on(ctx, s, looped and s is scope)  # run from elsewhere
                continue  # module-level code, or a test the runner runs: nothing steps after it
            for call in callers:
                up = call.scope
                if up is None or id(up) in seen:
                    continue
                seen.add(id(up))
                if _steps_below(ctx, up):
                    return True
                following.append(up)
        frontier = following
        if not frontier:
            return False
    return file_updates(ctx) if frontier else False  # callers further up: not followed


#: a test module: pytest / unittest imported, or a file a test runner collects by its path
_TEST_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(?:pytest|unittest)\b", re.MULTILINE)
_TEST_PATH = re.compile(r"(?:^|[/\\])(?:tests?[/\\]|test[^/\\]*\.py$|[^/\\]*_test\.py$|conftest\.py$)")


def _test_runner_runs(ctx: ModuleContext, scope: Scope) -> bool:
    """`scope` is a test (`def test_mixed_precision_training(self):`, `testBackward`) of a test
    module, a function nothing in the file calls: pytest or unittest runs it, and no optimizer
    steps after a test returns (what it computes is asserted, then thrown away). A helper it
    calls is no test (its reach is the test's)."""
    if not isinstance(scope.node, cst.FunctionDef) or not scope.node.name.value.startswith("test"):
        return False
    return bool(_TEST_IMPORT.search(ctx.source) or _TEST_PATH.search(ctx.path.replace("\\", "/")))


def _hands_on(ctx: ModuleContext, scope: Scope, looped: bool) -> bool:
    """A function run from outside the file may feed its caller's update (module docstring);
    `looped`: the backward repeats in a loop of its own (which steps nothing)."""
    if any(value is not None for value, _ in scope.returns) or scope.generator:
        return True
    if any(ctx.is_optimizer(p) for p in scope.params):
        return True
    kinds = {_decorator_name(d) for d in scope.node.decorators} if scope.cls is not None else set()
    if scope.cls is not None and not kinds & {"staticmethod", "classmethod"} and scope.params:
        return True  # an instance method: its object's owner may step
    if looped:
        return False
    handed = scope.params[1:] if "classmethod" in kinds else scope.params
    return bool(handed)


def _decorator_name(decorator: cst.Decorator) -> str:
    node = decorator.decorator
    if isinstance(node, cst.Call):
        node = node.func
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else ""


def _steps_below(ctx: ModuleContext, scope: Scope) -> bool:
    """`scope`, or a function it calls in this file (`_DEPTH` levels), steps an optimizer."""
    seen: Set[int] = {id(scope)}
    frontier = [scope]
    for _ in range(_DEPTH + 1):
        following: List[Scope] = []
        for s in frontier:
            if _steps(ctx, s):
                return True
            for call in s.calls:
                target = ctx.callee(call)
                if target is not None and id(target) not in seen:
                    seen.add(id(target))
                    following.append(target)
        frontier = following
    return False


def _steps(ctx: ModuleContext, scope: Scope) -> bool:
    for e in scope.events:
        if e.kind in ("optimizer_step", "scaler_step"):
            return True
        if e.kind == "zero_grad" and ctx.is_optimizer(e.optimizer):
            return True
    profilers = None
    for call in scope.calls:
        if call.method == "step":
            if profilers is None:
                profilers = _profiler_names(ctx)
            if call.receiver_dotted not in profilers:
                return True
            continue
        name = call.method or call.dotted or ""
        if _STEP_NAME.search(name) and ctx.callee(call) is None:
            return True
    return False


def _profiler_names(ctx: ModuleContext) -> Set[str]:
    """Names bound to a torch profiler (`prof = torch.profiler.profile(...)`, `with ... as prof`)."""
    cached = ctx.__dict__.get("_profiler_names")
    if cached is not None:
        return cached
    names: Set[str] = set()
    for call in ctx.calls:
        if not any(q.startswith(_PROFILERS) for q in call.qualnames):
            continue
        parent = ctx.parent(call.node)
        if isinstance(parent, cst.WithItem) and parent.asname is not None and isinstance(parent.asname.name, cst.Name):
            names.add(parent.asname.name.value)
    for a in ctx.assignments:
        if isinstance(a.value, cst.Call):
            info = ctx.call_info(a.value)
            if info is not None and any(q.startswith(_PROFILERS) for q in info.qualnames):
                names.add(a.target)
    ctx.__dict__["_profiler_names"] = names
    return names

