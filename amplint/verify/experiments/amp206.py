"""AMP206 bf16-model-training: an update below half the bf16 spacing at a weight rounds away.

Reference experiment: the finding's torch optimizer (`optimizer_class`, `lr`; AdamW at lr 1e-4
without them) on a parameter of ones (a LayerNorm weight's initial value) stored in bf16 and the
same in fp32, 100 steps with a constant gradient of 1e-3: how far each moved. bf16 holds 8
significant bits, so the values next to 1.0 are 1 - 2^-8 and 1 + 2^-7; an Adam step is about
`lr` whatever the gradient's size, so at lr 1e-4 every step rounds back to 1.0. Also measured:
every implementation the class offers (for-loop, foreach, fused), and one SGD step on the bf16
ones whose update is just under and just over 2^-9 (half the spacing below 1.0).

With the user's cast (`data["cast"]`), AMP201's experiment on the user's code first: the
statement that made the model bf16 on the lab's tiny model, then the user's optimizer over it,
one step against fp32 copies (updates lost to bf16 rounding). The tiny model's weights are small
(|w| <= 0.35), so an update of about 1e-3 survives there; where it does, the user's optimizer
constructor also runs on a bf16 `LayerNorm(64)` (its weight 1.0, the gain every transformer block
starts from) for 100 steps against an fp32 twin: a weight that never moves confirms.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, List

from ._cast import CastSkipped, fp32_twin, users_optimizer
from ._training import fmt
from .amp201 import users_step

STEPS = 100
GRAD = 1e-3
SIZE = 64


def _num(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ones(lab: Any, cls: type, kwargs: Dict[str, Any], dtype: Any, steps: int = STEPS) -> Dict[str, Any]:
    """`steps` steps of `cls(**kwargs)` on a parameter of ones in `dtype`, constant gradient."""
    torch = lab.torch
    p = torch.nn.Parameter(torch.ones(SIZE, device=lab.device, dtype=dtype))
    opt = lab.optimizer([p], cls.__name__, **kwargs)
    moved_at = None
    for i in range(steps):
        p.grad = torch.full_like(p, GRAD)
        opt.step()
        if moved_at is None and bool((p.detach() != 1).any()):
            moved_at = i + 1
    value = p.detach().double()
    return {"min": lab.num(value.min()), "max": lab.num(value.max()), "max_change": lab.num((value - 1).abs().max()), "first_moved_at_step": moved_at}


def _signature(cls: type) -> List[str]:
    try:
        return list(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return []


def reference(lab: Any, cls: type, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The ones experiment for one optimizer: bf16 against fp32, and each implementation."""
    torch = lab.torch
    bf16 = _ones(lab, cls, kwargs, torch.bfloat16)
    fp32 = _ones(lab, cls, kwargs, torch.float32)
    group = lab.optimizer([torch.nn.Parameter(torch.ones(1, device=lab.device))], cls.__name__, **kwargs).param_groups[0]
    out: Dict[str, Any] = {
        "optimizer": cls.__name__, "lr": lab.num(group.get("lr")), "steps": STEPS, "grad": GRAD, "start": 1.0,
        "bf16": bf16, "fp32": fp32,
    }
    names = _signature(cls)
    impls: Dict[str, Any] = {}
    for label, option in (("for-loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        if not all(k in names for k in option):
            continue
        try:
            impls[label] = _ones(lab, cls, {**kwargs, **option}, torch.bfloat16)["max_change"]
        except (RuntimeError, TypeError, ValueError) as exc:  # fused needs a device or dtype this torch lacks
            impls[label] = f"not run: {type(exc).__name__}"
    if impls:
        out["bf16_max_change_by_implementation"] = impls
    return out


def boundary(lab: Any) -> Dict[str, Any]:
    """One SGD step (gradient 1.0, so the update is `lr`) on bf16 ones with an update just under
    and just over 2^-9, half the spacing below 1.0: the first rounds back to 1.0, the second
    lands on 1 - 2^-8."""
    torch = lab.torch
    out = {}
    for label, lr in (("update 0.9 * 2^-9", 0.9 * 2.0 ** -9), ("update 1.1 * 2^-9", 1.1 * 2.0 ** -9)):
        p = torch.nn.Parameter(torch.ones(SIZE, device=lab.device, dtype=torch.bfloat16))
        opt = torch.optim.SGD([p], lr=lr)
        p.grad = torch.ones_like(p)
        opt.step()
        out[label] = lab.num(p.detach().double().min())
    return out


def _users_layernorm(lab: Any, data: Dict[str, Any], verdict: Dict[str, Any]) -> Dict[str, Any]:
    """After a user-code step that lost nothing: the user's optimizer on a bf16 LayerNorm's
    weight of 1.0, 100 steps of gradient 1e-3, against the same optimizer on an fp32 twin."""
    torch = lab.torch
    norm = torch.nn.LayerNorm(SIZE).to(lab.device, torch.bfloat16)
    try:
        opt, how = users_optimizer(lab, data, norm)
    except CastSkipped:
        return verdict
    twin, twin_opt = fp32_twin(lab, norm, opt)
    for _ in range(STEPS):
        for p, q in zip(norm.parameters(), twin.parameters()):
            p.grad = torch.full_like(p, GRAD)
            q.grad = torch.full_like(q, GRAD)
        opt.step()
        twin_opt.step()
    low = lab.num((norm.weight.detach().double() - 1).abs().max())
    full = lab.num((twin.weight.detach().double() - 1).abs().max())
    ev = dict(verdict.get("evidence") or {})
    group = opt.param_groups[0]
    ev["layernorm_weight_of_1"] = {"steps": STEPS, "grad": GRAD, "bf16_max_change": low, "fp32_max_change": full, "optimizer": type(opt).__name__, "lr": lab.num(group.get("lr")), **how}
    lr_note = f"; {ev['lr_note']}" if ev.get("lr_note") else ""
    if low == 0 and full:
        return lab.confirmed(
            f"{verdict.get('summary')}; on a bf16 LayerNorm (weight 1.0), though, {STEPS} steps of the same {type(opt).__name__} "
            f"(lr {fmt(group.get('lr'))}{lr_note}) left the weight at 1.0 while fp32 moved it by {fmt(full)} (fp32 copies: none)",
            ev, method="snippet", dtype=torch.bfloat16,
        )
    return lab.not_reproduced(
        f"{verdict.get('summary')}, and on a bf16 LayerNorm (weight 1.0) {STEPS} steps of it moved the weight by {fmt(low)} (fp32: {fmt(full)})",
        ev, method="snippet", dtype=torch.bfloat16,
    )


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    skipped = None
    if data.get("cast"):
        try:
            verdict = users_step(lab, {**data, "dtype": "bf16"})
        except CastSkipped as exc:
            skipped = str(exc)
        else:
            if verdict.get("verdict") == "not-reproduced" and verdict.get("method") == "snippet":
                return _users_layernorm(lab, data, verdict)
            return verdict
    try:
        cls = lab.optimizer_class(data.get("optimizer_class") or "AdamW")
    except LookupError as exc:
        return lab.inconclusive(str(exc), {"optimizer_class": data.get("optimizer_class")})
    kwargs: Dict[str, Any] = {}
    lr = _num(data.get("lr"))
    kwargs["lr"] = lr if lr is not None else (1e-4 if not data.get("optimizer_class") else None)
    if _num(data.get("eps")) is not None and "eps" in _signature(cls):
        kwargs["eps"] = _num(data["eps"])
    r = reference(lab, cls, kwargs)
    ev: Dict[str, Any] = {"params_dtype": "bf16", **r, "one_sgd_step_on_bf16_ones": boundary(lab)}
    if skipped:
        ev["snippet_skipped"] = skipped
    head = f"{STEPS} steps of {r['optimizer']} (lr {fmt(r['lr'])}, gradient {fmt(GRAD)}) on weights of 1.0"
    if r["bf16"]["first_moved_at_step"] is None and r["fp32"]["first_moved_at_step"] is not None:
        return lab.confirmed(
            f"{head}: the bf16 weights stayed exactly 1.0, the fp32 ones moved by {fmt(r['fp32']['max_change'])} (fp32 master weights: none)",
            ev, dtype=torch.bfloat16,
        )
    return lab.not_reproduced(
        f"{head}: the bf16 weights moved by {fmt(r['bf16']['max_change'])} (fp32: {fmt(r['fp32']['max_change'])}); the updates are not below bf16's spacing",
        ev, dtype=torch.bfloat16,
    )
