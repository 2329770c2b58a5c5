"""AMP803 fp16-gradient-reduction: the user's FSDP2 policy or DDP comm hook, on 2 gloo ranks.

Runs on the 2 sibling rank processes the worker starts inside the sandbox (`ranks` says 2;
`_distributed.joined` puts each into their gloo group on the sandbox's loopback):

* FSDP2 (`MixedPrecisionPolicy(...)`, the flagged constructor as written, its names resolved
  from the file's torch imports): the lab's MLP (`_distributed._model`) is `fully_shard`ed with
  the user's policy and, as the reference, with the same policy but `reduce_dtype=torch.float32`;
  each rank its own batch, the loss multiplied by 1e7, 1, 1e-3 and 1e-4 (gradients from beyond
  fp16's range to near its subnormals). The reduced gradients (all-gathered) are compared: a
  value the fp32 reduction keeps finite and nonzero that the user's policy returns as inf/NaN or
  0 is the fp16 reduction's doing.
* DDP (`x.register_comm_hook(state, hook)`, the flagged call as written, `x` bound to a DDP-wrapped
  MLP): one backward per loss multiplier (1e7, 1, 1e-7) against plain DDP (fp32 all-reduce), the
  same comparison, then one SGD step on the 1e7 gradients: the weights it made non-finite (the
  rule flags the hook where no GradScaler catches the overflow).

`confirmed` when the user's reduction lost values the fp32 one kept (docs/evidence.md#amp803
measures the same on the rule's own example); `not-reproduced` when it lost none (a policy that
reduces in fp32 or bf16, `bf16_compress_hook`, `allreduce_hook`). An FSDP1 `MixedPrecision` and
Lightning's FSDP strategy (FSDP1 too) need an accelerator: FullyShardedDataParallel raises on a
machine without one, so those findings are `inconclusive` and say so.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from ..snippet import Refused, SnippetFailed, Unbindable, check_safe, free_names, parse, resolve_qualname, run_source
from ..verdicts import could_not_run
from ._distributed import BATCH, _model, fsdp1_reason, joined
from ._training import fmt

FSDP2_MULTIPLIERS = (1e7, 1.0, 1e-3, 1e-4)
DDP_MULTIPLIERS = (1e7, 1.0, 1e-7)
_RECEIVER = "__amplint_ddp__"


def ranks(data: Dict[str, Any]) -> int:
    """2 for what runs on CPU ranks (FSDP2, DDP hooks); 1 for FSDP1 and Lightning (no verdict)."""
    if data.get("mechanism") == "ddp-comm-hook":
        return 2
    if data.get("mechanism") == "fsdp" and data.get("policy") == "MixedPrecisionPolicy":
        return 2
    return 1


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    import torch

    mechanism = data.get("mechanism")
    if ranks(data) == 1:
        if mechanism == "lightning-fsdp":
            return lab.inconclusive(fsdp1_reason(torch, "Lightning's FSDP strategy (FSDP1, FullyShardedDataParallel)"), {"mechanism": mechanism})
        return lab.inconclusive(fsdp1_reason(torch), {"mechanism": mechanism})
    source = data.get("snippet")
    ev: Dict[str, Any] = {"mechanism": mechanism, "backend": "gloo", "ran_on": "cpu"}
    if not isinstance(source, str) or not source.strip():
        return lab.inconclusive("could not run this code: no runnable flagged code for this finding", ev)
    if not isinstance(data.get("_group"), dict):  # only the worker's 2-rank path names the group
        return lab.inconclusive("needs 2 ranks: not started on ranks", ev)
    try:
        with joined(data) as (rank, world):
            ev["ranks"] = world
            verdict = (_ddp if mechanism == "ddp-comm-hook" else _fsdp2)(lab, torch, source, data, rank, ev)
        # the ranks compute on the CPU whatever the worker's device (a CUDA worker's lab is lazy)
        return dict(verdict, device="cpu", device_type="cpu")
    except (Refused, Unbindable, SnippetFailed) as exc:
        if isinstance(exc, Unbindable):
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        elif isinstance(exc, SnippetFailed):
            ev["snippet_skipped"] = f"the flagged code raised {type(exc.error).__name__}: {str(exc.error)[:120]}"
        else:
            ev["snippet_skipped"] = f"not run: {exc}"
        return lab.inconclusive(could_not_run(ev), ev)


def _run_user(tree: ast.Module, env: Dict[str, Any]) -> Any:
    """The user's flagged call; what it raises is SnippetFailed (the verdict says so)."""
    try:
        return run_source(tree, env)
    except Exception as exc:  # noqa: BLE001 - the user's code, not the experiment
        raise SnippetFailed(exc) from None


def _names(tree: ast.AST, data: Dict[str, Any], skip: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """The snippet's free names bound to what the file imports them as (`data["names"]`: torch
    only) and `torch`; any other name: Unbindable (the verdict names it)."""
    spelled = data.get("names") if isinstance(data.get("names"), dict) else {}
    env: Dict[str, Any] = {}
    missing: List[str] = []
    for name in free_names(tree).names:
        if name in skip:
            continue
        qualname = "torch" if name == "torch" else spelled.get(name)
        try:
            env[name] = resolve_qualname(str(qualname)) if qualname else None
        except (LookupError, ImportError, AttributeError):
            env[name] = None
        if env[name] is None:
            missing.append(name)
    if missing:
        raise Unbindable(missing)
    return env


def _call(source: str) -> Tuple[ast.Module, ast.Call]:
    tree = parse(source)
    check_safe(tree)
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Expr, ast.Assign)) or not isinstance(tree.body[0].value, ast.Call):
        raise Refused("not a single call")
    return tree, tree.body[0].value


def _lost(torch: Any, got: Any, ref: Any) -> Tuple[int, int, int]:
    """(values the reference kept finite and nonzero, of them: now 0, now inf/NaN)."""
    kept = torch.isfinite(ref) & (ref != 0)
    return int(kept.sum()), int((kept & (got == 0)).sum()), int((kept & ~torch.isfinite(got)).sum())


def _fsdp2(lab: Any, torch: Any, source: str, data: Dict[str, Any], rank: int, ev: Dict[str, Any]) -> Dict[str, Any]:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    tree, _ = _call(source)
    policy = _run_user(tree, _names(tree, data))
    if not isinstance(policy, MixedPrecisionPolicy):
        raise Refused("the flagged code did not build an FSDP2 MixedPrecisionPolicy")
    reference = dataclasses.replace(policy, reduce_dtype=torch.float32)
    ev.update(param_dtype=str(policy.param_dtype), reduce_dtype=str(policy.reduce_dtype), reference_reduce_dtype="torch.float32")
    rows, lost_zero, lost_inf = {}, 0, 0
    for mult in FSDP2_MULTIPLIERS:
        grads = {}
        for kind, mp in (("user", policy), ("fp32", reference)):
            model = _model()
            fully_shard(model, mp_policy=mp)
            x = torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(20 + rank))  # each rank its own batch
            (model(x).float().mean() * mult).backward()
            grads[kind] = torch.cat([p.grad.full_tensor().flatten().float() for p in model.parameters()])
        kept, zero, bad = _lost(torch, grads["user"], grads["fp32"])
        rows[f"x{mult:g}"] = {"kept_by_fp32_reduce": kept, "zero_after_user_reduce": zero, "nonfinite_after_user_reduce": bad}
        lost_zero, lost_inf = lost_zero + zero, lost_inf + bad
    ev["loss_multipliers"] = rows
    what = f"fully_shard with the flagged MixedPrecisionPolicy (param_dtype {_short(policy.param_dtype)}, reduce_dtype {_short(policy.reduce_dtype)})"
    return _verdict(lab, what, lost_zero, lost_inf, rows, ev, policy.reduce_dtype or policy.param_dtype or torch.float32)


def _ddp(lab: Any, torch: Any, source: str, data: Dict[str, Any], rank: int, ev: Dict[str, Any]) -> Dict[str, Any]:
    from torch import nn

    tree, call = _call(source)
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "register_comm_hook"):
        raise Refused("not a register_comm_hook call")
    call.func.value = ast.copy_location(ast.Name(_RECEIVER, ast.Load()), call.func.value)  # the user's DDP model: the lab's
    ast.fix_missing_locations(tree)
    env = _names(tree, data, skip=(_RECEIVER,))
    rows, lost_zero, lost_inf = {}, 0, 0
    step_bad: Dict[str, int] = {}
    for mult in DDP_MULTIPLIERS:
        grads = {}
        for kind in ("user", "fp32"):
            ddp = nn.parallel.DistributedDataParallel(_model())
            if kind == "user":
                _run_user(tree, dict(env, **{_RECEIVER: ddp}))
            x = torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(10 + rank))
            (ddp(x).float().mean() * mult).backward()
            grads[kind] = torch.cat([p.grad.detach().flatten().float() for p in ddp.parameters()])
            if mult == DDP_MULTIPLIERS[0]:
                opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
                opt.step()
                step_bad[kind] = sum(int((~torch.isfinite(p.detach())).sum()) for p in ddp.parameters())
        kept, zero, bad = _lost(torch, grads["user"], grads["fp32"])
        rows[f"x{mult:g}"] = {"kept_by_fp32_reduce": kept, "zero_after_user_reduce": zero, "nonfinite_after_user_reduce": bad}
        lost_zero, lost_inf = lost_zero + zero, lost_inf + bad
    ev["loss_multipliers"] = rows
    ev["nonfinite_weights_after_sgd_step"] = {"user_hook": step_bad.get("user"), "fp32_allreduce": step_bad.get("fp32"),
                                             "loss_multiplier": DDP_MULTIPLIERS[0]}
    what = "DDP with the flagged register_comm_hook"
    return _verdict(lab, what, lost_zero, lost_inf, rows, ev, data.get("reduce_dtype"))


def _short(dtype: Optional[Any]) -> str:
    return "None" if dtype is None else str(dtype).replace("torch.", "")


def _verdict(lab: Any, what: str, zero: int, bad: int, rows: Dict[str, Any], ev: Dict[str, Any], dtype: Any) -> Dict[str, Any]:
    where = "; ".join(f"{k}: {r['nonfinite_after_user_reduce']} inf/NaN, {r['zero_after_user_reduce']} zero of {r['kept_by_fp32_reduce']}"
                      for k, r in rows.items() if r["nonfinite_after_user_reduce"] or r["zero_after_user_reduce"])
    weights = ev.get("nonfinite_weights_after_sgd_step")
    step = ""
    if weights and weights.get("user_hook"):
        step = f"; one SGD step on the x{fmt(weights['loss_multiplier'])} gradients made {weights['user_hook']} weights non-finite (fp32 all-reduce: {weights['fp32_allreduce']})"
    if zero or bad:
        return lab.confirmed(
            f"{what} on 2 gloo ranks: the reduction returned {bad} gradient values as inf/NaN and {zero} as 0 that an fp32 "
            f"reduction kept finite and nonzero (loss {where}){step}",
            ev, method="snippet", dtype=dtype,
        )
    return lab.not_reproduced(
        f"{what} on 2 gloo ranks: every gradient value an fp32 reduction kept finite and nonzero came back finite and nonzero "
        f"(loss x{', x'.join(fmt(m) for m in _multipliers(ev))})",
        ev, method="snippet", dtype=dtype,
    )


def _multipliers(ev: Dict[str, Any]) -> List[float]:
    return [float(k[1:]) for k in ev.get("loss_multipliers", {})]


def warm() -> None:
    """Import what the ranks use, once, in the worker (no user code runs there)."""
    import torch.distributed.algorithms.ddp_comm_hooks.default_hooks  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
