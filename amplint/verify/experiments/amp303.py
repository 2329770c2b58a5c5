"""AMP303 bce-under-autocast: the "unsafe to autocast" RuntimeError.

On CUDA: evaluates the flagged call (`snippet`, probabilities in (0.05, 0.95)
bound to its free names) under `torch.autocast("cuda")`. On CPU, where CPU
autocast allows BCE, every `F.binary_cross_entropy` call the expression makes
(directly or through `nn.BCELoss`) is sent to the AutocastCUDA kernel by
redispatch, the kernel CUDA autocast runs; where
that kernel cannot be reached the verdict is `inconclusive: needs CUDA`.
"""
from __future__ import annotations

import ast
import contextlib
from typing import Any, Dict, Iterator, List, Optional

from ..snippet import EXPR_ATTEMPTS, cuda_region, ExprBinding, Refused, SnippetFailed, Unbindable, eval_expression

CANONICAL = "F.binary_cross_entropy(torch.sigmoid(logits), target)"
#: a loss path over image batches (N, C, H, W): segmentation losses sum over dims 1-3
IMAGES = ExprBinding((2, 1, 4, 4), "float")


def _is_ban(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "unsafe to autocast" in str(exc)


def _cuda_kernel_reachable(torch: Any) -> bool:
    try:
        key = torch._C.DispatchKey.AutocastCUDA
        torch._C.DispatchKeySet(key)
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("aten::binary_cross_entropy", "AutocastCUDA"))
    except Exception:  # noqa: BLE001
        return False


class _CudaRegions(ast.NodeTransformer):
    """On CPU, `torch.autocast("cuda", ...)` in the user's code would disable itself (no CUDA):
    it becomes `__amplint_cuda_region__(enabled)`, which sets CUDA autocast's thread-local flag
    as the real one does on a GPU, so `autocast("cuda", enabled=False)` around BCE is honoured."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name != "autocast":
            return node
        device = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "device_type"), None)
        if not (isinstance(device, ast.Constant) and device.value == "cuda"):
            return node
        enabled = next((k.value for k in node.keywords if k.arg == "enabled"), ast.Constant(True))
        self.changed = True
        return ast.copy_location(ast.Call(func=ast.Name("__amplint_cuda_region__", ast.Load()), args=[enabled], keywords=[]), node)


def _redispatch_mode(torch: Any, reached: List[str], skipped: List[str], redispatch: bool = True):
    """A TorchFunctionMode sending F.binary_cross_entropy to the AutocastCUDA kernel while CUDA
    autocast's flag is set (`reached`); a call inside `autocast("cuda", enabled=False)` runs as it
    would (`skipped`). With `redispatch=False` (on CUDA, where the real region does it) it only counts."""
    import torch.nn.functional as F
    from torch.nn import _reduction
    from torch.overrides import TorchFunctionMode

    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    class ToAutocastCUDA(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not F.binary_cross_entropy:
                return func(*args, **kwargs)
            if not torch.is_autocast_enabled("cuda"):
                skipped.append("aten::binary_cross_entropy")
                return func(*args, **kwargs)
            reached.append("aten::binary_cross_entropy")
            if not redispatch:
                return func(*args, **kwargs)
            names = ["input", "target", "weight", "size_average", "reduce", "reduction"]
            bound = dict(zip(names, args))
            bound.update(kwargs)
            if bound.get("size_average") is not None or bound.get("reduce") is not None:
                reduction = _reduction.legacy_get_enum(bound.get("size_average"), bound.get("reduce"))
            else:
                reduction = _reduction.get_enum(bound.get("reduction", "mean"))
            return torch.ops.aten.binary_cross_entropy.default.redispatch(
                keyset, bound["input"], bound["target"], bound.get("weight"), reduction
            )

    return ToAutocastCUDA


def _loss_path(lab: Any, data: Dict[str, Any], context: Any, ev: Dict[str, Any], reached: List[str], skipped: List[str], dtype: Any) -> Optional[Dict[str, Any]]:
    """The function around the flagged call (`loss_path`: a loss module's `forward`, a loss
    helper), called with its parameters synthesized (probabilities in (0.05, 0.95); `self`'s
    attributes as the call's free names are) inside the caller's CUDA autocast region. Its own
    `autocast("cuda", enabled=False)` is honoured. The verdict when the path called BCE (the
    ban raised: `confirmed`; BCE only where CUDA autocast was off: `not-reproduced`); None when
    it could not run or never reached BCE (then the flagged call alone is run)."""
    import textwrap

    torch = lab.torch
    path = data.get("loss_path")
    if not isinstance(path, dict) or not isinstance(path.get("source"), str):
        return None
    func = str(path.get("function") or "")
    try:
        tree = ast.parse(textwrap.dedent(path["source"]))
    except SyntaxError:
        return None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    if not defs:
        return None
    fn = defs[0]
    fn.decorator_list = []  # a project decorator entering autocast: the harness enters the region
    positional = [*fn.args.posonlyargs, *fn.args.args]
    if positional[:1] and positional[0].arg in ("self", "cls"):  # a method: `self` becomes a free name
        if fn.args.posonlyargs:
            fn.args.posonlyargs = fn.args.posonlyargs[1:]
        else:
            fn.args.args = fn.args.args[1:]
        positional = positional[1:]
    required = [a.arg for a in positional[: len(positional) - len(fn.args.defaults)]]
    module = ast.Module(body=[fn, ast.parse(f"{func}({', '.join(required)})").body[0]], type_ignores=[])
    if not lab.is_cuda:
        module = _CudaRegions().visit(module)
    source = ast.unparse(ast.fix_missing_locations(module))
    pdata = {k: v for k, v in data.items() if k in ("names", "prelude", "prelude_names")}
    if path.get("prelude"):
        pdata["prelude"] = "\n".join(p for p in (path.get("prelude"), pdata.get("prelude")) if p)
        pdata["prelude_names"] = sorted({*(pdata.get("prelude_names") or []), *(path.get("prelude_names") or [])})
    where = f"`{func}`" + (f" ({path['site']})" if path.get("site") else "")
    reached.clear()
    skipped.clear()
    try:
        _, error, _ = eval_expression(lab, source, pdata, torch.float32, fill="prob", is_target_error=_is_ban, context=context,
                                      attempts=(*EXPR_ATTEMPTS, IMAGES))
    except Refused as exc:
        ev["loss_path_skipped"] = f"{where}: not run: {exc}"
        return None
    except Unbindable as exc:
        ev["loss_path_skipped"] = f"{where}: could not bind {', '.join(exc.names)}"
        return None
    except SnippetFailed as exc:
        ev["loss_path_skipped"] = f"{where} raised {exc}"[:200]
        return None
    finally:
        if skipped and not reached:  # kept even when the path failed after its BCE call
            ev["bce_calls_with_cuda_autocast_disabled"] = len(skipped)
    ev.update(loss_path_ran=f"{func}({', '.join(required)})", loss_path_site=path.get("site"),
              bce_calls_under_cuda_autocast=len(reached), bce_calls_with_cuda_autocast_disabled=len(skipped))
    if error is not None:
        ev["error"] = lab.exc(error)
        cpu = "" if lab.is_cuda else " (on CPU: the AutocastCUDA kernel that CUDA autocast runs, reached by redispatch; CPU autocast allows BCE)"
        return lab.confirmed(f"the loss path {where} raised {type(error).__name__}: {str(error).splitlines()[0][:160]}{cpu}",
                             ev, method="snippet", dtype=dtype)
    if skipped and not reached:
        return lab.not_reproduced(
            f"the loss path {where} called binary_cross_entropy only inside autocast(\"cuda\", enabled=False): it ran there",
            ev, method="snippet", dtype=dtype,
        )
    ev["loss_path_skipped"] = f"{where} ran without calling binary_cross_entropy under CUDA autocast (a branch the inputs did not take)"
    return None


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    ev: Dict[str, Any] = {}
    reached: List[str] = []
    skipped: List[str] = []
    if lab.is_cuda:
        counting = _redispatch_mode(torch, reached, skipped, redispatch=False)

        @contextlib.contextmanager
        def context() -> Iterator[None]:
            reached.clear(), skipped.clear()  # each attempt (input layout) counts its own calls
            with torch.autocast("cuda", dtype=dtype), counting():
                yield

        ev["ran_under"] = f"torch.autocast('cuda', dtype={dtype})"
    else:
        if not _cuda_kernel_reachable(torch):
            return lab.needs_cuda("the AutocastCUDA kernel of aten::binary_cross_entropy is not reachable from this build", dtype=dtype)
        mode = _redispatch_mode(torch, reached, skipped)

        @contextlib.contextmanager
        def context() -> Iterator[None]:  # the caller's CUDA autocast region, entered
            reached.clear(), skipped.clear()  # each attempt (input layout) counts its own calls
            with cuda_region(True), mode():
                yield

        ev["ran_under"] = "CPU, binary_cross_entropy redispatched to the AutocastCUDA kernel"
    path = _loss_path(lab, data, context, ev, reached, skipped, dtype)
    if path is not None:
        return path
    if ev.get("bce_calls_with_cuda_autocast_disabled"):
        return lab.not_reproduced(
            "the loss path called binary_cross_entropy only inside autocast(\"cuda\", enabled=False) (it ran there) "
            f"before it stopped: {ev.get('loss_path_skipped', '')}"[:300],
            ev, method="snippet", dtype=dtype,
        )
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
        skipped.clear()
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
