"""AMP303 bce-under-autocast: the "unsafe to autocast" RuntimeError.

On CUDA: evaluates the flagged call (`snippet`, probabilities in (0.05, 0.95)
bound to its free names) under `torch.autocast("cuda")`. On CPU, where CPU
autocast allows BCE, every `F.binary_cross_entropy` call the expression makes
(directly or through `nn.BCELoss`) is sent to the AutocastCUDA kernel by
redispatch, the kernel CUDA autocast runs; where
that kernel cannot be reached the verdict is `inconclusive: needs CUDA`.
"""
from __future__ import annotations

from typing import Any, Dict, List

from ..snippet import Refused, SnippetFailed, Unbindable, eval_expression

CANONICAL = "F.binary_cross_entropy(torch.sigmoid(logits), target)"


def _is_ban(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "unsafe to autocast" in str(exc)


def _cuda_kernel_reachable(torch: Any) -> bool:
    try:
        key = torch._C.DispatchKey.AutocastCUDA
        torch._C.DispatchKeySet(key)
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("aten::binary_cross_entropy", "AutocastCUDA"))
    except Exception:  # noqa: BLE001
        return False


def _redispatch_mode(torch: Any, reached: List[str]):
    """A TorchFunctionMode sending F.binary_cross_entropy to the AutocastCUDA kernel."""
    import torch.nn.functional as F
    from torch.nn import _reduction
    from torch.overrides import TorchFunctionMode

    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    class ToAutocastCUDA(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.binary_cross_entropy:
                names = ["input", "target", "weight", "size_average", "reduce", "reduction"]
                bound = dict(zip(names, args))
                bound.update(kwargs)
                if bound.get("size_average") is not None or bound.get("reduce") is not None:
                    reduction = _reduction.legacy_get_enum(bound.get("size_average"), bound.get("reduce"))
                else:
                    reduction = _reduction.get_enum(bound.get("reduction", "mean"))
                reached.append("aten::binary_cross_entropy")
                return torch.ops.aten.binary_cross_entropy.default.redispatch(
                    keyset, bound["input"], bound["target"], bound.get("weight"), reduction
                )
            return func(*args, **kwargs)

    return ToAutocastCUDA


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    ev: Dict[str, Any] = {}
    reached: List[str] = []
    if lab.is_cuda:
        context = lambda: torch.autocast("cuda", dtype=dtype)  # noqa: E731
        ev["ran_under"] = f"torch.autocast('cuda', dtype={dtype})"
    else:
        if not _cuda_kernel_reachable(torch):
            return lab.needs_cuda("the AutocastCUDA kernel of aten::binary_cross_entropy is not reachable from this build", dtype=dtype)
        context = _redispatch_mode(torch, reached)
        ev["ran_under"] = "CPU, binary_cross_entropy redispatched to the AutocastCUDA kernel"
    source = data.get("snippet")
    method = "snippet"
    attempt = None
    if isinstance(source, str) and source.strip():
        try:
            attempt = eval_expression(lab, source, data, torch.float32, fill="prob", is_target_error=_is_ban, context=context)
        except Refused as exc:
            ev["snippet_skipped"] = f"not run: {exc}"
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        except SnippetFailed as exc:
            ev["snippet_skipped"] = f"the flagged code raised {exc}"[:200]
    if attempt is None:
        method = "experiment"
        source = CANONICAL
        reached.clear()
        attempt = eval_expression(lab, source, {}, torch.float32, fill="prob", is_target_error=_is_ban, context=context)
    value, error, info = attempt
    ev["evaluated"] = source.strip()
    if not lab.is_cuda:
        ev["bce_calls_redispatched"] = len(reached)
    if error is not None:
        ev["error"] = lab.exc(error)
        where = "" if lab.is_cuda else " (on CPU: the AutocastCUDA kernel that CUDA autocast runs, reached by redispatch; CPU autocast allows BCE)"
        return lab.confirmed(f"{type(error).__name__}: {str(error).splitlines()[0][:200]}{where}", ev, method=method, dtype=dtype)
    if lab.is_cuda:
        return lab.not_reproduced("the call ran under CUDA autocast without the BCE error", ev, method=method, dtype=dtype)
    return lab.not_reproduced(
        "the expression never called binary_cross_entropy, the one op CUDA autocast bans", ev, method=method, dtype=dtype
    )
