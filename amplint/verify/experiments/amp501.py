"""AMP501 custom-function-without-custom-fwd: the dtype mismatch raised in backward.

Defines the flagged `torch.autograd.Function` (its class source in `snippet`,
with `torch`/`nn`/`F` bound; else the canonical matmul Function), applies it to fp32 inputs that require grad under autocast (the finding's
dtype, else the device's default: bf16 on CPU, fp16 on CUDA) and runs backward
outside autocast, as training does. The same call without autocast is the
reference. When fp32 inputs run clean (an fp32 bias added to the matmul makes the
output, and so the backward, fp32), the first input is given in the autocast
dtype, as an earlier autocast op inside a model hands it over; only a dtype
error in backward then counts (the forward is autocast's to cast).
"""
from __future__ import annotations

import ast
import inspect
from typing import Any, Dict, List, Optional, Tuple

from ..snippet import Missing, Refused, Unbindable, Unbound, check_safe, free_names, parse, resolve_qualname, role_of, run_source, with_prelude

CANONICAL = '''
class Plain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g.mm(b.t()), a.t().mm(g)
'''


def _define(lab: Any, source: str, data: Dict[str, Any]) -> Any:
    tree = parse(source)
    check_safe(tree)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if not classes:
        raise Refused("no class definition")
    tree, _ = with_prelude(tree, data)  # the file's own helpers the class uses
    env: Dict[str, Any] = {}
    for name in free_names(tree).names:
        role = role_of(name, data)
        if role and role.startswith(("module:", "api:")):
            try:
                env[name] = resolve_qualname(role.split(":", 1)[1])
            except (LookupError, ImportError, AttributeError):
                env[name] = Missing(name)  # not torch (`deepspeed.comm`): an error only if used
        elif name in ("Function",):
            env[name] = lab.torch.autograd.Function
        elif name in ("custom_fwd", "custom_bwd"):
            env[name] = getattr(lab.torch.amp, name)
        else:
            env[name] = Missing(name)  # bound lazily: an error only if the class uses it
    wanted = data.get("function") or data.get("class_name")
    target = next((c for c in classes if c.name == wanted), classes[-1])
    tree = ast.Module(body=[*tree.body, ast.Expr(ast.Name(target.name, ast.Load()))], type_ignores=[])
    cls = run_source(ast.fix_missing_locations(tree), env)
    if not (isinstance(cls, type) and issubclass(cls, lab.torch.autograd.Function)):
        raise Refused("not a torch.autograd.Function")
    return cls


def _parameters(cls: Any) -> List[Any]:
    """The forward's inputs the experiment fills: the required ones (at least the first), after ctx."""
    sig = inspect.signature(cls.forward)
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
    return [p for p in params if p.default is p.empty] or params[:1]


def _inputs(lab: Any, cls: Any, batch: Optional[int] = None, first_dtype: Optional[Any] = None) -> Tuple[Any, ...]:
    """fp32 leaves that require grad; `first_dtype`: the first input in that dtype instead."""
    torch = lab.torch
    g = torch.Generator().manual_seed(lab.seed)
    # shaped by how the code names them: a bias is a vector, everything else a 4x4 matrix
    lead = (batch,) if batch else ()
    shapes = [(4,) if "bias" in p.name.lower() else (*lead, 4, 4) for p in _parameters(cls)]
    tensors = [torch.randn(*shape, generator=g).to(lab.device) for shape in shapes]
    if first_dtype is not None:
        tensors[0] = tensors[0].to(first_dtype)
    return tuple(t.requires_grad_() for t in tensors)


#: input layouts tried in turn: matrices, then a batch of them (`x[:, i]`-style code)
LAYOUTS = (None, 2)


def _apply(
    lab: Any, cls: Any, dtype: Optional[Any], batch: Optional[int] = None, first_dtype: Optional[Any] = None
) -> Tuple[Optional[str], Optional[BaseException], str]:
    """(forward output dtype, error, phase)."""
    inputs = _inputs(lab, cls, batch, first_dtype)
    try:
        with lab.autocast(dtype):
            out = cls.apply(*inputs)
    except Unbound as exc:
        raise Unbindable(exc.names) from None
    except Exception as exc:  # noqa: BLE001
        return None, exc, "forward"
    first = out[0] if isinstance(out, (tuple, list)) else out
    try:
        first.float().sum().backward()
    except Unbound as exc:
        raise Unbindable(exc.names) from None
    except Exception as exc:  # noqa: BLE001
        return str(first.dtype).replace("torch.", ""), exc, "backward"
    return str(first.dtype).replace("torch.", ""), None, ""


def _is_dtype_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("dtype" in text or "scalar type" in text or "same type" in text)


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = default
    ev: Dict[str, Any] = {"autocast": f"{lab.device_type}, {lab.dtype_name(dtype)}"}
    cls = None
    batch: Optional[int] = None
    method = "snippet"
    source = data.get("snippet")
    if isinstance(source, str) and source.strip():
        try:
            cls = _define(lab, source, data)
            for batch in LAYOUTS:  # the first layout the Function accepts without autocast
                _, ref_error, _ = _apply(lab, cls, None, batch)
                if ref_error is None:
                    break
            if ref_error is not None:
                ev["snippet_skipped"] = f"the Function fails without autocast too: {type(ref_error).__name__}: {str(ref_error)[:120]}"
                cls = None
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        except Refused as exc:
            ev["snippet_skipped"] = f"not run: {exc}"
        except Exception as exc:  # noqa: BLE001
            ev["snippet_skipped"] = f"defining it raised {type(exc).__name__}: {str(exc)[:120]}"
    if cls is not None:
        try:
            out_dtype, error, phase = _apply(lab, cls, dtype, batch)
            if error is None:
                # inside a model the Function's input is often an earlier autocast op's output,
                # already low precision: a backward that mixes it with an fp32 grad fails there
                low = _apply(lab, cls, dtype, batch, first_dtype=dtype)
                if low[1] is not None and low[2] == "backward" and _is_dtype_error(low[1]):
                    out_dtype, error, phase = low
                    ev["low_precision_input"] = _parameters(cls)[0].name
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
            cls = None
    if cls is None:
        method = "experiment"
        cls = _define(lab, CANONICAL, {})
        out_dtype, error, phase = _apply(lab, cls, dtype)
    ev.update(function=cls.__name__, forward_output_dtype=out_dtype)
    if error is not None:
        ev["error"] = {**lab.exc(error), "phase": phase}
    if error is not None and _is_dtype_error(error):
        given = ev.get("low_precision_input")
        given = f" (its input `{given}` in {lab.dtype_name(dtype)}, as an earlier autocast op hands it)" if given else ""
        return lab.confirmed(
            f"{cls.__name__} under {lab.dtype_name(dtype)} autocast{given}: {phase} raised {type(error).__name__}: {str(error).splitlines()[0][:160]}",
            ev,
            method=method,
            dtype=dtype,
        )
    if error is None:
        return lab.not_reproduced(
            f"{cls.__name__} ran forward ({out_dtype}) and backward under {lab.dtype_name(dtype)} autocast without error",
            ev,
            method=method,
            dtype=dtype,
        )
    return lab.inconclusive(f"{phase} raised {type(error).__name__}, not a dtype mismatch", ev, method=method, dtype=dtype)
