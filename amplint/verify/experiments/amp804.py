"""AMP804 low-precision-master-weights: the user's cast and FSDP2 policy, on 2 gloo ranks.

Runs on the 2 sibling rank processes the worker starts inside the sandbox (`ranks` says 2 for
an FSDP2 finding; `_distributed.joined` puts each into their gloo group on the sandbox's
loopback). Two pieces of the user's code, both read by the parent (`prelude.py`):

* the flagged cast (`snippet`, at the finding), applied to the lab's MLP (`_distributed._model`):
  the dtype methods of its call chain as written (`Net().cuda().bfloat16()` runs as
  `MLP.bfloat16()`: the constructor is the lab's, a device move is left out), the `torch_dtype=`
  (`dtype=`) of a `from_pretrained(...)` as `MLP.to(<that value>)`, or a
  `torch.set_default_dtype(...)` run as written with the MLP built while it holds;
* the flagged wrapper's `MixedPrecisionPolicy(...)` (`policy_snippet`, at its "its policy" site
  or the wrapper's `mp_policy=` call), run as written, names from the file's torch imports.

The MLP after the cast is `fully_shard`ed with the user's policy and, as the control, a copy of
it in fp32 (the same values: fp32 master weights) with the same policy; each rank its own batch,
10 plain SGD steps (the update is exactly lr x grad) at lr 1e-3, where a step is about 5e-5 of a
weight, below half of bf16's and fp16's spacing, then the user's configuration again at lr 0.1
(steps of about 4e-3 of a weight) to show it trains at all. `confirmed` when most values the
fp32-master control moved stayed exactly where they started under the user's configuration while
the large steps moved most of them (docs/evidence.md#amp804); `not-reproduced` when the update
survived (a cast to fp32, `set_default_dtype(torch.float32)`); `inconclusive` when even the large
steps moved nothing. FSDP1 and Lightning Fabric's FSDP strategy (FSDP1) need an accelerator:
`inconclusive`, as for AMP801.
"""
from __future__ import annotations

import ast
import copy
from typing import Any, Callable, Dict, List, Tuple

from ..snippet import Refused, SnippetFailed, Unbindable, check_safe, parse
from ..verdicts import could_not_run
from ._distributed import BATCH, _model, fsdp1_reason, joined
from ._training import fmt
from .amp803 import _names, _run_user, _short

STEPS = 10
#: a step of about 5e-5 of a weight (median on the MLP): below half of bf16's spacing (2^-9 of
#: a weight at least) and of fp16's (2^-12): the update the low-precision shards round away
SMALL_LR = 1e-3
#: steps of about 4e-3 of a weight: the user's configuration must move under them (it trains)
LARGE_LR = 0.1
#: methods of the flagged call chain that set the dtype (the rest, `.cuda()`, `.eval()`, are left out)
DTYPE_METHODS = ("bfloat16", "half", "float", "double", "to", "type")
LOADERS = ("from_pretrained", "from_config")
DEFAULTS = ("set_default_dtype", "set_default_tensor_type")
_MODEL = "__amplint_model__"


def ranks(data: Dict[str, Any]) -> int:
    """2 for an FSDP2 (`fully_shard`) finding; 1 for FSDP1 and Fabric's FSDP (no verdict)."""
    return 2 if data.get("wrapper") == "fsdp2" else 1


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    import torch

    wrapper = data.get("wrapper")
    if ranks(data) == 1:
        subject = ("Lightning Fabric's FSDP strategy (FSDP1, FullyShardedDataParallel)" if wrapper == "fabric"
                   else "FSDP1 (FullyShardedDataParallel)")
        return lab.inconclusive(fsdp1_reason(torch, subject), {"wrapper": wrapper})
    ev: Dict[str, Any] = {"wrapper": "fsdp2", "backend": "gloo", "ran_on": "cpu"}
    cast, policy = data.get("snippet"), data.get("policy_snippet")
    if not isinstance(cast, str) or not cast.strip() or not isinstance(policy, str) or not policy.strip():
        ev["snippet_skipped"] = "not run: the flagged cast or the wrapper's MixedPrecisionPolicy(...) was not read"
        return lab.inconclusive(could_not_run(ev), ev)
    if not isinstance(data.get("_group"), dict):  # only the worker's 2-rank path names the group
        return lab.inconclusive("needs 2 ranks: not started on ranks", ev)
    try:
        build, built = _users_cast(torch, cast, data, ev)  # the user's code, prepared before the group is joined
        mp = _users_policy(torch, policy, data, ev)
        with joined(data) as (rank, world):
            ev["ranks"] = world
            verdict = _experiment(lab, torch, build, built, mp, rank, ev)
        return dict(verdict, device="cpu", device_type="cpu")
    except (Refused, Unbindable, SnippetFailed) as exc:
        if isinstance(exc, Unbindable):
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        elif isinstance(exc, SnippetFailed):
            ev["snippet_skipped"] = f"the flagged code raised {type(exc.error).__name__}: {str(exc.error)[:120]}"
        else:
            ev["snippet_skipped"] = f"not run: {exc}"
        return lab.inconclusive(could_not_run(ev), ev)


def _one_call(source: str) -> ast.Call:
    tree = parse(source)
    check_safe(tree)
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Expr, ast.Assign, ast.Return)):
        raise Refused("not a single call")
    value = tree.body[0].value
    if not isinstance(value, ast.Call):
        raise Refused("not a single call")
    return value


def _users_policy(torch: Any, source: str, data: Dict[str, Any], ev: Dict[str, Any]) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    call = _one_call(source)
    tree = ast.fix_missing_locations(ast.Module(body=[ast.Expr(call)], type_ignores=[]))
    names = data.get("policy_names") if isinstance(data.get("policy_names"), dict) else {}
    policy = _run_user(tree, _names(tree, {"names": names}))
    if not isinstance(policy, MixedPrecisionPolicy):
        raise Refused("the flagged wrapper's policy is not an FSDP2 MixedPrecisionPolicy")
    ev.update(policy_ran=source.strip()[:200], param_dtype=str(policy.param_dtype), reduce_dtype=str(policy.reduce_dtype))
    return policy


def _users_cast(torch: Any, source: str, data: Dict[str, Any], ev: Dict[str, Any]) -> Tuple[Callable[[], Any], str]:
    """(a function that builds the lab's MLP and applies the user's cast to it, what it runs, in words)."""
    call = _one_call(source)
    tree = ast.fix_missing_locations(ast.Module(body=[ast.Expr(call)], type_ignores=[]))
    ev["cast_flagged"] = source.strip()[:200]
    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if callee in DEFAULTS:  # `torch.set_default_dtype(torch.bfloat16)`: the MLP built while it holds
        env = _names(tree, data)

        def under_default() -> Any:
            before = torch.get_default_dtype()
            try:
                _run_user(tree, dict(env))
                return _model()
            finally:
                torch.set_default_dtype(before)
        ev["cast_ran"] = f"{ast.unparse(call)}; the MLP built while it holds"
        return under_default, f"the MLP built under the flagged `{ast.unparse(call)[:60]}`"
    steps: List[ast.Call] = []
    node: ast.expr = call
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        steps.append(node)
        node = node.func.value
    spelled: ast.expr = ast.Name(_MODEL, ast.Load())
    dropped: List[str] = []
    for step in reversed(steps):
        attr = step.func.attr  # type: ignore[union-attr]
        if attr in LOADERS:
            dtype = next((k.value for k in step.keywords if k.arg in ("torch_dtype", "dtype")), None)
            if dtype is None:
                continue
            args, keywords, attr = [dtype], [], "to"
        elif attr in DTYPE_METHODS:
            args, keywords = _dtype_arguments(torch, step, data, dropped) if attr in ("to", "type") else (list(step.args), [])
        else:
            dropped.append(f".{attr}()")
            continue
        spelled = ast.Call(ast.Attribute(spelled, attr, ast.Load()), args, keywords)
    if isinstance(spelled, ast.Name):
        raise Refused("no dtype cast in the flagged call")
    cast = ast.fix_missing_locations(ast.Module(body=[ast.Expr(spelled)], type_ignores=[]))
    env = _names(cast, data, skip=(_MODEL,))
    ev["cast_ran"] = ast.unparse(cast).replace(_MODEL, "MLP")
    if dropped:
        ev["cast_left_out"] = dropped  # device moves and other methods: the ranks compute on the CPU

    def applied() -> Any:
        model = _run_user(cast, dict(env, **{_MODEL: _model()}))
        if not isinstance(model, torch.nn.Module):
            raise Refused("the flagged cast did not return the model")
        return model
    return applied, f"the MLP after the flagged cast (`{ev['cast_ran'][:60]}`)"


def _dtype_arguments(torch: Any, call: ast.Call, data: Dict[str, Any], dropped: List[str]) -> Tuple[List[ast.expr], List[ast.keyword]]:
    """The arguments of `.to(...)` (`.type(...)`) that are a dtype, as written; a device (`device`,
    `"cuda"`, `args.device`) is left out (the ranks compute on the CPU): an argument that is no
    dtype or whose names do not bind. A `dtype=` keyword must bind (Unbindable otherwise)."""
    args: List[ast.expr] = []
    for arg in call.args:
        tree = ast.fix_missing_locations(ast.Module(body=[ast.Expr(arg)], type_ignores=[]))
        try:
            value = _run_user(tree, _names(tree, data))
        except (Unbindable, SnippetFailed):
            value = None
        if isinstance(value, torch.dtype) or call.func.attr == "type" and isinstance(value, str):  # type: ignore[union-attr]
            args.append(arg)
        else:
            dropped.append(ast.unparse(arg))
    keywords = [k for k in call.keywords if k.arg == "dtype"]
    dropped.extend(f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords if k.arg != "dtype")
    return args, keywords


def _flat(torch: Any, model: Any, full: bool) -> Any:
    return torch.cat([(p.detach().full_tensor() if full else p.detach()).flatten().double() for p in model.parameters()])


def _train(torch: Any, model: Any, policy: Any, lr: float, rank: int) -> Tuple[Any, Any, str]:
    """(values before, after STEPS SGD steps, the sharded parameters' dtype) of `model` under
    `fully_shard(model, mp_policy=policy)`, each rank its own batches."""
    from torch.distributed.fsdp import fully_shard

    start = _flat(torch, model, False)
    dtype = next(model.parameters()).dtype
    fully_shard(model, mp_policy=policy)
    sharded = sorted({_short(p.to_local().dtype) for p in model.parameters()})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(20 + rank)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 8, generator=gen).to(dtype)
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return start, _flat(torch, model, True), "/".join(sharded)


def _experiment(lab: Any, torch: Any, build: Callable[[], Any], built: str, policy: Any, rank: int, ev: Dict[str, Any]) -> Dict[str, Any]:
    users = build()
    control = copy.deepcopy(users).float()  # the same values, fp32 master weights
    ev["parameter_dtypes_after_cast"] = sorted({_short(p.dtype) for p in users.parameters()})
    u0, u1, user_shards = _train(torch, users, policy, SMALL_LR, rank)
    c0, c1, control_shards = _train(torch, control, policy, SMALL_LR, rank)
    moved = c1 != c0
    lost = moved & (u1 == u0)
    step = ((c1 - c0).abs() / c0.abs().clamp_min(1e-30))[moved].median() / STEPS if bool(moved.any()) else None
    kept = float((u1 - u0).abs().sum() / (c1 - c0).abs().sum()) if bool(moved.any()) else None
    l0, l1, _ = _train(torch, build(), policy, LARGE_LR, rank)
    large_moved = int((l1 != l0).sum())
    n = int(c0.numel())
    ev.update(
        optimizer="SGD", steps=STEPS, lr=SMALL_LR, values=n,
        sharded_dtype={"user": user_shards, "fp32_control": control_shards},
        median_step_relative_to_weight=lab.num(step) if step is not None else None,
        moved_by_fp32_control=int(moved.sum()), unchanged_by_user=int(lost.sum()),
        update_kept=lab.num(kept) if kept is not None else None,
        large_steps={"lr": LARGE_LR, "moved_by_user": large_moved},
    )
    what = (f"fully_shard on 2 gloo ranks with the flagged policy (param_dtype {_short(policy.param_dtype)}) on {built}: "
            f"{user_shards} shards")
    dtype = next(iter(users.parameters())).dtype
    if not bool(moved.any()):
        return lab.inconclusive(f"{what}; {STEPS} SGD steps at lr {fmt(SMALL_LR)} moved no value even with fp32 masters", ev)
    numbers = (f"{STEPS} SGD steps at lr {fmt(SMALL_LR)} (median step {lab.num(step):.2g} of a weight) left unchanged "
               f"{int(lost.sum())} of the {int(moved.sum())} values fp32 master weights moved, keeping {kept:.0%} of the update")
    if 2 * int(lost.sum()) > int(moved.sum()):
        if 2 * large_moved <= n:
            return lab.inconclusive(f"{what}; {numbers}, but at lr {fmt(LARGE_LR)} it moved only {large_moved} of {n}: "
                                    "not the rounding alone", ev)
        return lab.confirmed(f"{what}; {numbers}; at lr {fmt(LARGE_LR)} it moved {large_moved} of {n}", ev,
                             method="snippet", dtype=dtype)
    return lab.not_reproduced(f"{what}; {numbers}", ev, method="snippet", dtype=dtype)


def warm() -> None:
    """Import what the ranks use, once, in the worker (no user code runs there)."""
    import torch.distributed.fsdp  # noqa: F401
