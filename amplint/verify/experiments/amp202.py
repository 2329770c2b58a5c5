"""AMP202 backward-inside-autocast: what the region changes when backward is inside it.

Three measurements on a tiny model under autocast (the finding's dtype, else
the device default: bf16 on CPU, fp16 on CUDA), each run with the backward
inside the `with` block and after it:

1. plain step: the largest gradient difference and the dtype of the gradient
   reaching the first layer's low-precision output (backward ops run in the
   forward's dtypes either way, so E23 found them identical);
2. a layer whose forward is written under a nested `autocast(enabled=False)`
   (fp32 on purpose): the largest gradient difference and each run's relative
   gradient error against an fp64 run (its backward matmuls autocast when
   the backward is inside the region);
3. an op written after the backward in the same block (an `mm` of the
   gradients, as a gradient penalty or logging would do): its output dtype.

Confirmed when the region changed something measurable (an op after the
backward, or the backward of the fp32 layer, ran in low precision);
not reproduced when nothing changed (e.g. an fp32 region, where autocast is
off). The plain gradients are reported either way and never overclaimed.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

def _plain(lab: Any, dtype: Any, inside: bool) -> Tuple[Any, Dict[str, Any]]:
    torch = lab.torch
    model = lab.model()
    x, y = lab.batch(0)
    seen: Dict[str, Any] = {}

    def grad_hook(g: Any) -> None:
        seen.setdefault("activation_grad_dtype", lab.dtype_name(g.dtype))

    def hook(module: Any, inputs: Any, out: Any) -> None:
        out.register_hook(grad_hook)

    handle = model[0].register_forward_hook(hook)
    with lab.autocast(dtype):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if inside:
            loss.backward()
            g = model[0].weight.grad
            seen["after_backward_mm_dtype"] = lab.dtype_name(torch.mm(g, g.t()).dtype)
    if not inside:
        loss.backward()
        g = model[0].weight.grad
        seen["after_backward_mm_dtype"] = lab.dtype_name(torch.mm(g, g.t()).dtype)
    handle.remove()
    seen["param_grad_dtype"] = lab.dtype_name(model[0].weight.grad.dtype)
    return [p.grad.detach().clone() for p in model.parameters()], seen


def _fp32_layer(lab: Any, dtype: Any, inside: bool) -> Any:
    torch = lab.torch
    model = lab.model()
    x, y = lab.batch(1)
    with lab.autocast(dtype):
        with torch.autocast(lab.device_type, enabled=False):
            out = model(x)  # written to stay fp32
        loss = torch.nn.functional.mse_loss(out, y)
        if inside:
            loss.backward()
    if not inside:
        loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _fp64_reference(lab: Any) -> Any:
    torch = lab.torch
    model = lab.model(dtype=torch.float64)
    x, y = lab.batch(1, dtype=torch.float64)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _rel_error(grads: Any, ref: Any) -> float:
    err = max((g.double() - r).abs().max().item() for g, r in zip(grads, ref))
    return err / (max(r.abs().max().item() for r in ref) or 1.0)


def _max_diff(a: Any, b: Any) -> Tuple[float, float]:
    diff = max((p - q).abs().max().item() for p, q in zip(a, b))
    scale = max(q.abs().max().item() for q in b) or 1.0
    return diff, diff / scale


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    name = lab.dtype_name(dtype) or str(dtype)
    g_in, seen_in = _plain(lab, dtype, inside=True)
    g_out, seen_out = _plain(lab, dtype, inside=False)
    plain_diff, plain_rel = _max_diff(g_in, g_out)
    f_in = _fp32_layer(lab, dtype, inside=True)
    f_out = _fp32_layer(lab, dtype, inside=False)
    fp32_diff, fp32_rel = _max_diff(f_in, f_out)
    ref = _fp64_reference(lab)
    err_in, err_out = _rel_error(f_in, ref), _rel_error(f_out, ref)
    ev: Dict[str, Any] = {
        "autocast": f"{lab.device_type}, {name}",
        "plain_max_grad_diff": lab.num(plain_diff),
        "plain_param_grad_dtype": seen_in.get("param_grad_dtype"),
        "activation_grad_dtype_inside": seen_in.get("activation_grad_dtype"),
        "activation_grad_dtype_outside": seen_out.get("activation_grad_dtype"),
        "after_backward_mm_dtype_inside": seen_in.get("after_backward_mm_dtype"),
        "after_backward_mm_dtype_outside": seen_out.get("after_backward_mm_dtype"),
        "fp32_layer_grad_rel_error_vs_fp64_inside": lab.num(err_in, 3),
        "fp32_layer_grad_rel_error_vs_fp64_outside": lab.num(err_out, 3),
        "fp32_layer_max_grad_diff": lab.num(fp32_diff),
        "fp32_layer_max_grad_rel_diff": lab.num(fp32_rel, 3),
    }
    if data.get("device") and data["device"] != lab.device_type:
        ev["ran_on"] = f"{lab.device_type} (the flagged code targets {data['device']})"
    users = _users_block(lab, data, dtype)
    if users is not None:
        return users(ev, name)
    after_low = ev["after_backward_mm_dtype_inside"] != ev["after_backward_mm_dtype_outside"]
    fp32_low = fp32_diff > 0.0 and err_in > err_out
    plain = (
        f"plain gradients {'identical' if plain_diff == 0.0 else 'differ'} inside vs outside (max diff {ev['plain_max_grad_diff']}; "
        f"backward gradient at the {name} activation {ev['activation_grad_dtype_inside']} both ways)"
    )
    if after_low or fp32_low:
        parts = []
        if after_low:
            parts.append(f"an mm after backward in the block ran {ev['after_backward_mm_dtype_inside']} (outside: {ev['after_backward_mm_dtype_outside']})")
        if fp32_low:
            parts.append(
                f"the backward of a layer kept fp32 with autocast(enabled=False) autocast too: its gradients' error vs fp64 "
                f"was {ev['fp32_layer_grad_rel_error_vs_fp64_inside']} inside vs {ev['fp32_layer_grad_rel_error_vs_fp64_outside']} outside"
            )
        return lab.confirmed(f"{name} autocast around backward: {'; '.join(parts)}; {plain}", ev, dtype=dtype)
    return lab.not_reproduced(f"{name} autocast around backward changed nothing measured: {plain}", ev, dtype=dtype)


#: ops autocast runs in low precision whatever their inputs (both devices' lists)
LOWERED = frozenset(
    {"matmul", "mm", "bmm", "linear", "addmm", "addbmm", "baddbmm", "einsum", "conv1d", "conv2d", "conv3d",
     "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mv", "addmv", "chain_matmul", "__matmul__", "prelu"}
)


def _users_block(lab: Any, data: Dict[str, Any], dtype: Any) -> Any:
    """Run the user's `with autocast(...)` block (`step_source`) on the tiny model and record
    which ops after its backward autocast lowered. Returns a verdict builder, or None (no
    block, or it could not run: `snippet_skipped` is set by the caller's reference path)."""
    from ..snippet import Refused, TrainingSpec, Unbindable, prepare_training, run_training

    source = data.get("step_source")
    if not isinstance(source, str) or not source.strip():
        return None
    torch = lab.torch
    spec = TrainingSpec(source=source, data=dict(data), dtype=None)
    lowered: List[str] = []
    ran_after: List[str] = []
    state = {"after": False}

    class Recorder(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", str(func))
            if state["after"] and (not name.startswith("_") or name == "__matmul__"):
                ran_after.append(name)
                if name in LOWERED and getattr(out, "dtype", None) in (torch.float16, torch.bfloat16):
                    inputs = [a for a in args if isinstance(a, torch.Tensor)]
                    if inputs and all(a.dtype == torch.float32 for a in inputs):
                        lowered.append(f"{name} -> {str(out.dtype).replace('torch.', '')}")
            return out

    original_backward = torch.Tensor.backward

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original_backward(self, *args, **kwargs)
        state["after"] = True
        return out

    try:
        prepared = prepare_training(spec)
        torch.Tensor.backward = backward  # type: ignore[method-assign]
        try:
            with Recorder():
                enabled = run_training(lab, spec, prepared, True)
        finally:
            torch.Tensor.backward = original_backward  # type: ignore[method-assign]
    except (Refused, Unbindable) as exc:
        why = f"could not bind {', '.join(exc.names)}" if isinstance(exc, Unbindable) else f"not run: {exc}"

        def skipped(ev: Dict[str, Any], name: str) -> Any:
            ev["snippet_skipped"] = why
            return _reference_verdict(lab, ev, name, dtype)

        return skipped
    error = enabled.exception

    def verdict(ev: Dict[str, Any], name: str) -> Any:
        ev["user_block"] = {"ops_after_backward": sorted(set(ran_after))[:20], "lowered_after_backward": lowered[:10], "error": error}
        if error and not state["after"]:
            ev["snippet_skipped"] = f"the flagged code raised {error['type']}: {error['message'][:120]}"
            return _reference_verdict(lab, ev, name, dtype)
        if not state["after"]:
            return lab.inconclusive("the flagged backward never ran", ev, method="snippet", dtype=dtype)
        if lowered:
            return lab.confirmed(
                f"after the backward, the block ran {', '.join(lowered[:3])} under autocast (outside the block: float32)",
                ev,
                method="snippet",
                dtype=dtype,
            )
        return lab.inconclusive(
            "nothing the block runs after its backward is lowered by autocast here; whether the model keeps a layer fp32 "
            "with autocast(enabled=False) (whose backward would then run in low precision) the stand-in model cannot show",
            ev,
            method="snippet",
            dtype=dtype,
        )

    return verdict


def _reference_verdict(lab: Any, ev: Dict[str, Any], name: str, dtype: Any) -> Any:
    """The reference experiment's verdict (reported as `reference`: the user's block did not run)."""
    after_low = ev["after_backward_mm_dtype_inside"] != ev["after_backward_mm_dtype_outside"]
    fp32_low = ev["fp32_layer_max_grad_diff"] not in (0, 0.0)
    if after_low or fp32_low:
        return lab.confirmed(f"{name} autocast around backward: an mm after backward in the block ran {ev['after_backward_mm_dtype_inside']}", ev, dtype=dtype)
    return lab.not_reproduced(f"{name} autocast around backward changed nothing measured", ev, dtype=dtype)
