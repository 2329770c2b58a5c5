"""AMP302 fp16-underflowing-epsilon: eps flushes to 0 in fp16; the user's optimizer on fp16 params.

Optimizer findings (`optimizer_class` present): builds the flagged optimizer
(`snippet`, with `model`/`params` bound to fp16 parameters; else
`optimizer_class(params, lr=lr, eps=eps)`), gives it gradients from 1e-6 to
1e-1 and takes one step; fp32 parameters are the reference. Expression findings: evaluates the flagged expression on zero
tensors in fp16 and in fp32 and compares finiteness. Clamp bounds fp16 rounds onto 1.0 (`rounds_to`): the
flagged clamp on tensors of that value, counting what it leaves at the bound in fp16 and in fp32. EMA
decays fp16 rounds to 1.0 (`decay`): 1000 EMA steps toward a source 1% away, in fp16 and in fp32.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, Optional, Tuple

from ..snippet import Refused, SnippetFailed, Unbindable, check_safe, eval_expression, free_names, parse, resolve_qualname, role_of, run_source
from ._training import fmt


def _eps(data: Dict[str, Any]) -> float:
    eps = data.get("eps")
    if isinstance(eps, str):
        try:
            eps = float(eps)
        except ValueError:
            eps = None
    return float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) else 1e-8


def _grads_like(torch: Any, p: Any) -> Any:
    n = p.numel()
    exps = torch.linspace(-6, -1, n, dtype=torch.float64)
    return (10.0**exps).reshape(p.shape).to(p.device, p.dtype)


def _optimizer_from_snippet(lab: Any, source: str, data: Dict[str, Any], params: list, model: Any) -> Any:
    tree = parse(source)
    check_safe(tree)
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Expr, ast.Assign)):
        raise Refused("not an optimizer construction")
    env: Dict[str, Any] = {}
    missing = []
    for name in free_names(tree).names:
        role = role_of(name, data)
        if role and role.startswith(("module:", "api:")):
            env[name] = resolve_qualname(role.split(":", 1)[1])
        elif isinstance(data.get("optimizer_class"), str) and name == data["optimizer_class"].rsplit(".", 1)[-1]:
            env[name] = lab.optimizer_class(name)
        elif role == "model":
            env[name] = model
        elif role == "params":
            env[name] = params
        else:
            missing.append(name)
    if missing:
        raise Unbindable(missing)
    opt = run_source(tree, env)
    if not isinstance(opt, lab.torch.optim.Optimizer):
        raise Refused("the flagged code did not build a torch optimizer")
    return opt


def _step(lab: Any, dtype: Any, build) -> Tuple[int, int, Any]:
    """One step from fixed params/grads; (non-finite params, params, optimizer)."""
    torch = lab.torch
    model = lab.model(dtype=dtype)
    params = list(model.parameters())
    opt = build(params, model)
    for p in params:
        p.grad = _grads_like(torch, p)
    opt.step()
    bad = sum(int((~torch.isfinite(p)).sum()) for p in params)
    return bad, sum(p.numel() for p in params), opt


def _optimizer_experiment(lab: Any, data: Dict[str, Any], eps: float, ev: Dict[str, Any]) -> Dict[str, Any]:
    torch = lab.torch
    source = data.get("snippet")
    method = "experiment"
    build = None
    if isinstance(source, str) and source.strip():
        try:
            probe = lab.model(dtype=torch.float16)
            _optimizer_from_snippet(lab, source, data, list(probe.parameters()), probe)
            build = lambda params, model: _optimizer_from_snippet(lab, source, data, params, model)  # noqa: E731
            method = "snippet"
        except (Refused, Unbindable) as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}" if isinstance(exc, Unbindable) else f"not run: {exc}"
        except Exception as exc:  # noqa: BLE001
            ev["snippet_skipped"] = f"the flagged code raised {type(exc).__name__}: {str(exc)[:120]}"
    if build is None:
        try:
            cls = lab.optimizer_class(data.get("optimizer_class") or "Adam")
        except LookupError as exc:
            return lab.inconclusive(str(exc), ev)
        kwargs = {"lr": data.get("lr") if isinstance(data.get("lr"), (int, float)) else 1e-3, "eps": eps}
        build = lambda params, model: cls(params, **kwargs)  # noqa: E731
    bad16, total, opt = _step(lab, torch.float16, build)
    bad32, _, _ = _step(lab, torch.float32, build)
    group = opt.param_groups[0]
    ev.update(
        optimizer=type(opt).__name__,
        lr=lab.num(group.get("lr")),
        optimizer_eps=group.get("eps"),
        grads="1e-6 .. 1e-1",
        nonfinite_params_fp16=bad16,
        nonfinite_params_fp32=bad32,
        params=total,
    )
    if bad16 and not bad32:
        return lab.confirmed(
            f"one {type(opt).__name__} step on fp16 params made {bad16}/{total} of them non-finite (fp32 params: {bad32}); "
            f"eps {group.get('eps')!r} is {fmt(ev['eps_fp16'])} in fp16",
            ev,
            method=method,
            dtype="fp16",
        )
    return lab.not_reproduced(
        f"one {type(opt).__name__} step on fp16 params left them finite ({bad16}/{total} non-finite; eps {group.get('eps')!r} -> {fmt(ev['eps_fp16'])} in fp16)",
        ev,
        method=method,
        dtype="fp16",
    )


def _nonfinite(torch: Any, value: Any) -> Optional[int]:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return int((~torch.isfinite(value)).sum())
    return None


def _bound_experiment(lab: Any, data: Dict[str, Any], ev: Dict[str, Any]) -> Dict[str, Any]:
    """A clamp bound such as `1 - 1e-4` that fp16 rounds onto 1.0: the flagged clamp on tensors
    of exactly that value, in fp16 and fp32; how many values it leaves at the bound."""
    torch = lab.torch
    value, rounded = data.get("value"), data.get("rounds_to")
    ev.update(bound_value=value, bound_fp16=lab.num(torch.tensor(float(value), dtype=torch.float64).half().item()))
    fill = {1.0: "ones", 0.0: "zeros"}.get(rounded)
    source = data.get("snippet")
    if fill is None or not isinstance(source, str) or not source.strip():
        return lab.inconclusive(f"no experiment for a bound rounding to {rounded!r}", ev, dtype="fp16")
    try:
        out16 = eval_expression(lab, source, data, torch.float16, fill=fill)[0]
        out32 = eval_expression(lab, source, data, torch.float32, fill=fill)[0]
    except Refused as exc:
        return lab.inconclusive(f"not run: {exc}", ev, dtype="fp16")
    except Unbindable as exc:
        return lab.inconclusive(f"could not bind {', '.join(exc.names)}", ev, dtype="fp16")
    except SnippetFailed as exc:
        return lab.inconclusive(f"the flagged code raised {exc}"[:200], ev, dtype="fp16")
    if not all(isinstance(o, torch.Tensor) and o.is_floating_point() for o in (out16, out32)):
        return lab.inconclusive("the clamp did not produce a floating tensor", ev, method="snippet", dtype="fp16")
    at16, at32 = int((out16 == rounded).sum()), int((out32 == rounded).sum())
    ev.update(evaluated=source.strip(), inputs=fill, at_bound_fp16=at16, at_bound_fp32=at32)
    if at16 and not at32:
        return lab.confirmed(
            f"the bound {value!r} is {fmt(ev['bound_fp16'])} in fp16: on inputs of {rounded:g} the clamp left {at16} "
            f"value(s) at exactly {rounded:g} in fp16, {at32} in fp32 (log(1 - p) or log(p) is -inf there)",
            ev, method="snippet", dtype="fp16",
        )
    return lab.not_reproduced(
        f"on inputs of {rounded:g} the clamp left {at16} value(s) at {rounded:g} in fp16 and {at32} in fp32",
        ev, method="snippet", dtype="fp16",
    )


def _decay_experiment(lab: Any, data: Dict[str, Any], ev: Dict[str, Any]) -> Dict[str, Any]:
    """An EMA decay fp16 rounds to 1.0: `targ.mul_(decay).add_(src, alpha=1 - decay)` for 1000
    steps on targets of 1..2 whose source sits 1% away, in fp16 and in fp32; how far each moved."""
    torch = lab.torch
    decay = float(data["decay"])
    ev.update(decay=decay, decay_fp16=lab.num(torch.tensor(decay, dtype=torch.float64).half().item()), steps=1000)
    moved = {}
    for dtype in (torch.float16, torch.float32):
        start = torch.linspace(1.0, 2.0, 1024, dtype=torch.float64)
        targ, src = start.to(dtype), (start * 1.01).to(dtype)
        for _ in range(1000):
            targ.mul_(decay).add_(src, alpha=1 - decay)
        moved[dtype] = float(((targ.double() - start.to(dtype).double()) / (src.double() - start.to(dtype).double())).mean())
    ev.update(moved_share_fp16=lab.num(moved[torch.float16]), moved_share_fp32=lab.num(moved[torch.float32]))
    expected = 1 - decay ** 1000
    if moved[torch.float16] < 0.5 * expected <= moved[torch.float32]:
        return lab.confirmed(
            f"decay {decay!r} is {fmt(ev['decay_fp16'])} in fp16: after 1000 EMA steps toward a source 1% away the fp16 "
            f"weights covered {moved[torch.float16]:.3f} of the gap, fp32 {moved[torch.float32]:.3f} (expected {expected:.3f})",
            ev, dtype="fp16",
        )
    return lab.not_reproduced(
        f"after 1000 EMA steps the fp16 weights covered {moved[torch.float16]:.3f} of the gap, fp32 {moved[torch.float32]:.3f}",
        ev, dtype="fp16",
    )


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    eps = _eps(data)
    ev: Dict[str, Any] = {"eps": eps, "eps_fp16": lab.num(torch.tensor(eps, dtype=torch.float64).half().item())}
    if data.get("optimizer_class"):
        return _optimizer_experiment(lab, data, eps, ev)
    if isinstance(data.get("decay"), (int, float)):
        return _decay_experiment(lab, data, ev)
    if isinstance(data.get("rounds_to"), (int, float)) and isinstance(data.get("value"), (int, float)):
        return _bound_experiment(lab, data, ev)
    source = data.get("snippet")
    method = "snippet"
    attempt16 = attempt32 = None
    if isinstance(source, str) and source.strip():
        try:
            attempt16 = eval_expression(lab, source, data, torch.float16, fill="zeros")
            attempt32 = eval_expression(lab, source, data, torch.float32, fill="zeros")
        except Refused as exc:
            ev["snippet_skipped"] = f"not run: {exc}"
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        except SnippetFailed as exc:
            ev["snippet_skipped"] = f"the flagged code raised {exc}"[:200]
        if attempt16 is None or attempt32 is None:
            attempt16 = attempt32 = None
    if attempt16 is None:
        method = "experiment"
        source = f"x / (x.abs().sum(-1, keepdim=True) + {eps!r})"
        attempt16 = eval_expression(lab, source, {}, torch.float16, fill="zeros")
        attempt32 = eval_expression(lab, source, {}, torch.float32, fill="zeros")
    ev["evaluated"] = source.strip()
    ev["inputs"] = "zeros"
    bad16, bad32 = _nonfinite(torch, attempt16[0]), _nonfinite(torch, attempt32[0])
    ev.update(nonfinite_fp16=bad16, nonfinite_fp32=bad32)
    if bad16 is None or bad32 is None:
        return lab.inconclusive("the expression did not produce a floating tensor", ev, method=method, dtype="fp16")
    if bad16 and not bad32:
        return lab.confirmed(
            f"eps {eps!r} is {fmt(ev['eps_fp16'])} in fp16: on zero inputs the expression gave {bad16} non-finite value(s) in fp16, {bad32} in fp32",
            ev,
            method=method,
            dtype="fp16",
        )
    return lab.not_reproduced(
        f"on zero inputs the expression gave {bad16} non-finite value(s) in fp16 and {bad32} in fp32 (eps {eps!r} -> {fmt(ev['eps_fp16'])} in fp16)",
        ev,
        method=method,
        dtype="fp16",
    )
