"""AMP202 backward-inside-autocast: what the region changes when backward is inside it.

Three measurements on a tiny model under autocast (the finding's dtype, else
the device default: bf16 on CPU, fp16 on CUDA), each run with the backward
inside the `with` block and after it (amp-facts §1.1, E23):

1. plain step: the largest gradient difference and the dtype of the gradient
   reaching the first layer's low-precision output (backward ops run in the
   forward's dtypes either way, so E23 found them identical);
2. a layer whose forward is written under a nested `autocast(enabled=False)`
   (fp32 on purpose): the dtypes of the matmuls its backward dispatches and
   the largest gradient difference;
3. an op written after the backward in the same block (an `mm` of the
   gradients, as a gradient penalty or logging would do): its output dtype.

Confirmed when the region changed something measurable (an op after the
backward, or the backward of the fp32 layer, ran in low precision);
not reproduced when nothing changed (e.g. an fp32 region, where autocast is
off). The plain gradients are reported either way and never overclaimed.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Tuple

_MATMULS = ("mm", "addmm", "bmm", "matmul", "linear")


def _mm_dtypes() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Probe(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in _MATMULS and hasattr(out, "dtype"):
                self.dtypes[str(out.dtype).replace("torch.", "")] += 1
            return out

    return Probe()


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


def _fp32_layer(lab: Any, dtype: Any, inside: bool) -> Tuple[Any, Dict[str, int]]:
    torch = lab.torch
    model = lab.model()
    x, y = lab.batch(1)
    with lab.autocast(dtype):
        with torch.autocast(lab.device_type, enabled=False):
            out = model(x)  # written to stay fp32
        loss = torch.nn.functional.mse_loss(out, y)
        probe = _mm_dtypes()
        if inside:
            with probe:
                loss.backward()
    if not inside:
        with probe:
            loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()], dict(probe.dtypes)


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
    f_in, mm_in = _fp32_layer(lab, dtype, inside=True)
    f_out, mm_out = _fp32_layer(lab, dtype, inside=False)
    fp32_diff, fp32_rel = _max_diff(f_in, f_out)
    ev: Dict[str, Any] = {
        "autocast": f"{lab.device_type}, {name}",
        "plain_max_grad_diff": lab.num(plain_diff),
        "plain_param_grad_dtype": seen_in.get("param_grad_dtype"),
        "activation_grad_dtype_inside": seen_in.get("activation_grad_dtype"),
        "activation_grad_dtype_outside": seen_out.get("activation_grad_dtype"),
        "after_backward_mm_dtype_inside": seen_in.get("after_backward_mm_dtype"),
        "after_backward_mm_dtype_outside": seen_out.get("after_backward_mm_dtype"),
        "fp32_layer_backward_matmul_dtypes_inside": mm_in,
        "fp32_layer_backward_matmul_dtypes_outside": mm_out,
        "fp32_layer_max_grad_diff": lab.num(fp32_diff),
        "fp32_layer_max_grad_rel_diff": lab.num(fp32_rel, 3),
    }
    if data.get("device") and data["device"] != lab.device_type:
        ev["ran_on"] = f"{lab.device_type} (the flagged code targets {data['device']})"
    after_low = ev["after_backward_mm_dtype_inside"] != ev["after_backward_mm_dtype_outside"]
    fp32_low = fp32_diff > 0.0 or set(mm_in) != set(mm_out)
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
                f"the backward of a layer kept fp32 with autocast(enabled=False) ran matmuls {mm_in} inside vs {mm_out} outside "
                f"(grad max rel diff {ev['fp32_layer_max_grad_rel_diff']})"
            )
        return lab.confirmed(f"{name} autocast around backward: {'; '.join(parts)}; {plain}", ev, dtype=dtype)
    return lab.not_reproduced(f"{name} autocast around backward changed nothing measured: {plain}", ev, dtype=dtype)
