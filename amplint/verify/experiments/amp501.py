"""AMP501 custom-function-without-custom-fwd: the dtype mismatch raised in backward.

Defines the flagged `torch.autograd.Function` (its class source in `snippet`,
with `torch`/`nn`/`F` bound; else the canonical matmul Function), applies it to fp32 inputs that require grad under autocast (the finding's
dtype, else the device's default: bf16 on CPU, fp16 on CUDA) and runs backward
outside autocast, as training does. The same call without autocast is the
reference. When fp32 inputs run clean (an fp32 bias added to the matmul makes the
output, and so the backward, fp32), the first input is given in the autocast
dtype, as an earlier autocast op inside a model hands it over; only a dtype
error in backward then counts (the forward is autocast's to cast).

Inputs are made by how the forward names them: a config or handle dict
(`config["hash_code_len"]`: 4, `handle_dic`), an index (`h_id`: 0) and a process
group (None) are no tensors; tensors are tried as 4x4 matrices, a batch of them,
and by name (`(2, 4, 4)` activations, `(2, 4)` masks, `(4, 4)` weights, `(4,)`
biases), the first layout the Function runs without autocast. Its collectives
(`torch.distributed`, `deepspeed.comm`) run as on a world of one rank
(`snippet.SingleRank`: an all-reduce over one rank is the tensor itself).
"""
from __future__ import annotations

import ast
import inspect
import re
from typing import Any, Dict, List, Optional, Tuple

from ..snippet import (
    _INT_NAME, _MASK_NAME, ExprBinding, Keyed, Missing, Refused, Unbindable, Unbound, _tensor_for, check_safe, free_names, parse,
    COLLECTIVES, resolve_qualname, role_of, run_source, single_rank, with_prelude,
)

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
            qualname = role.split(":", 1)[1]
            try:
                env[name] = single_rank(qualname) or resolve_qualname(qualname)
            except (LookupError, ImportError, AttributeError):
                env[name] = Missing(name)  # not torch (`deepspeed.utils`): an error only if used
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


_CONFIG = re.compile(r"^(config|cfg|conf|\w+_config|\w+_cfg|\w*dict\w*|\w+_dic)$", re.I)
_INDEX = re.compile(r"^(idx|index|\w+_id|\w+_idx|\w+_index)$", re.I)
_GROUP = re.compile(r"^(group|pg|process_group|\w+_group)$", re.I)
_FLAG = re.compile(r"^(use|is|enable|with)_\w+$", re.I)


def _setting(lab: Any, key: str) -> Any:
    """A value of a config dict the Function reads by key: a size for size-like keys
    (`hash_code_len`: 4), False for a switch (`use_fast_hash`), else a tensor."""
    if _INT_NAME.match(key):
        return 4
    if _FLAG.match(key):
        return False
    return _tensor_for(lab, key, ExprBinding(), lab.torch.float32, "randn")


def _argument(lab: Any, name: str, shape: Tuple[int, ...], g: Any) -> Any:
    """One forward input, by how the code names it: a config or handle dict (`config`,
    `handle_dic`: a dict whose keys read by the Function are made on first read), an index
    (`h_id`: 0), a process group (None), else an fp32 tensor of `shape`."""
    if _CONFIG.match(name):
        return Keyed(lambda key: _setting(lab, key))
    if _INDEX.match(name):
        return 0
    if _GROUP.match(name):
        return None
    return lab.torch.randn(*shape, generator=g).to(lab.device)


def _shape(name: str, layout: Any) -> Tuple[int, ...]:
    """A bias is a vector; a matrix for everything else, a batch of them in a batched layout;
    in the `named` layout weights stay matrices and masks lose the last dimension (a
    batch of sequences: `(b, s)` masks, `(b, s, d)` activations, `(out, in)` weights)."""
    low = name.lower()
    if "bias" in low:
        return (4,)
    if layout is None:
        return (4, 4)
    if layout == NAMED:
        if "weight" in low:
            return (4, 4)
        if _MASK_NAME.search(low):
            return (2, 4)
        return (2, 4, 4)
    return (layout, 4, 4)


def _inputs(lab: Any, cls: Any, layout: Any = None, first_dtype: Optional[Any] = None) -> Tuple[Any, ...]:
    """The forward's inputs (`_argument`); tensors are fp32 leaves that require grad;
    `first_dtype`: the first tensor input in that dtype instead."""
    torch = lab.torch
    g = torch.Generator().manual_seed(lab.seed)
    values = [_argument(lab, p.name, _shape(p.name, layout), g) for p in _parameters(cls)]
    tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if first_dtype is not None and tensors:
        values[tensors[0]] = values[tensors[0]].to(first_dtype)
    return tuple(v.requires_grad_() if isinstance(v, torch.Tensor) else v for v in values)


def _first_tensor(lab: Any, cls: Any) -> str:
    """The name of the forward's first tensor input."""
    params = _parameters(cls)
    return next((p.name for p in params if not (_CONFIG.match(p.name) or _INDEX.match(p.name) or _GROUP.match(p.name))), params[0].name)


def _described(lab: Any, cls: Any, layout: Any) -> Dict[str, str]:
    """What each forward input was: a tensor's shape, or the stand-in for a dict, index or group."""
    out = {}
    for p, v in zip(_parameters(cls), _inputs(lab, cls, layout)):
        out[p.name] = "x".join(map(str, v.shape)) if isinstance(v, lab.torch.Tensor) else "dict" if isinstance(v, dict) else repr(v)
    return out


#: the `named` input layout (see `_shape`)
NAMED = "named"
#: input layouts tried in turn: matrices, a batch of them (`x[:, i]`-style code), then by name
LAYOUTS = (None, 2, NAMED)


def _apply(
    lab: Any, cls: Any, dtype: Optional[Any], layout: Any = None, first_dtype: Optional[Any] = None
) -> Tuple[Optional[str], Optional[BaseException], str]:
    """(forward output dtype, error, phase)."""
    inputs = _inputs(lab, cls, layout, first_dtype)
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
    layout: Any = None
    method = "snippet"
    source = data.get("snippet")
    if isinstance(source, str) and source.strip():
        try:
            cls = _define(lab, source, data)
            for layout in LAYOUTS:  # the first layout the Function accepts without autocast
                _, ref_error, _ = _apply(lab, cls, None, layout)
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
            out_dtype, error, phase = _apply(lab, cls, dtype, layout)
            if error is None:
                # inside a model the Function's input is often an earlier autocast op's output,
                # already low precision: a backward that mixes it with an fp32 grad fails there
                low = _apply(lab, cls, dtype, layout, first_dtype=dtype)
                if low[1] is not None and low[2] == "backward" and _is_dtype_error(low[1]):
                    out_dtype, error, phase = low
                    ev["low_precision_input"] = _first_tensor(lab, cls)
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
            cls = None
    if cls is None:
        method = "experiment"
        cls = _define(lab, CANONICAL, {})
        out_dtype, error, phase = _apply(lab, cls, dtype)
    ev.update(function=cls.__name__, forward_output_dtype=out_dtype)
    if method == "snippet":
        ev["inputs"] = _described(lab, cls, layout)
        one = sorted(n for n, q in (data.get("names") or {}).items() if isinstance(q, str) and q in COLLECTIVES)
        if one:
            ev["world_of_one_rank"] = one  # its collectives ran as on one rank (`SingleRank`)
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
