"""AMP204 autocast-disabled-without-cast: a low-precision tensor reaches fp32 code uncast.

Produces the tensor with the finding's `source_op` under autocast (the
finding's dtype, else the device default), then runs the finding's `op` on it
inside `autocast(enabled=False)` against fp32 operands, without and with
`.float()`: a dtype-mismatch exception, or a result still in low precision,
confirms. On CPU a
`source_op` that only the CUDA autocast list lowers is `inconclusive: needs CUDA`.
"""
from __future__ import annotations

from typing import Any, Dict

from .amp203 import _op


def _users_expression(lab: Any, data: Dict[str, Any], dtype: Any) -> Dict[str, Any]:
    """The flagged call (`snippet`) inside `autocast(enabled=False)`, the tensor the finding
    names (`name`) in the low-precision dtype autocast gave it, every other input fp32 (the
    region is meant to be fp32): a dtype-mismatch exception or a low-precision result is the
    finding; an fp32 result is not. Raises Refused/Unbindable/SnippetFailed when it cannot run."""
    from ..snippet import (
        EXPR_ATTEMPTS, SnippetFailed, Unbindable, Unbound, bind_expression_names, check_safe, free_names, parse, run_source,
        string_keyed, with_prelude,
    )

    torch = lab.torch
    tree = parse(data["snippet"])
    check_safe(tree)
    tree, lifted = with_prelude(tree, data)
    free = free_names(tree)
    name = str(data.get("name") or "")
    root = name.split(".")[0]
    if root not in free.names:
        raise SnippetFailed(LookupError(f"the flagged call does not use `{name}`"))
    last = None
    attempts = [(b, False) for b in EXPR_ATTEMPTS[:2]] + [(EXPR_ATTEMPTS[0], True)]
    for binding, ints_as_tensors in attempts:
        env = bind_expression_names(lab, free, data, torch.float32, binding, None, string_keyed(tree))
        if ints_as_tensors:  # `k` read as a size, but passed where a tensor goes (`matmul(scores, k)`)
            for key, v in list(env.items()):
                if type(v) is int:
                    env[key] = torch.randn(4, 4, generator=torch.Generator().manual_seed(lab.seed)).to(lab.device)
        value = env.get(root)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise SnippetFailed(LookupError(f"`{name}` is not bound to a tensor here"))
        env[root] = value.to(dtype)
        lab.seed_all()
        try:
            with torch.autocast(lab.device_type, enabled=False):
                out = run_source(tree, env)
        except Unbound as exc:
            raise Unbindable(exc.names) from None
        except RuntimeError as exc:
            if "dtype" in str(exc) or "type" in str(exc).lower():
                return {"raised": lab.exc(exc), "lifted": lifted}
            last = exc
            continue
        except Exception as exc:  # noqa: BLE001
            last = exc
            continue
        if not isinstance(out, torch.Tensor):
            raise SnippetFailed(TypeError("the flagged call did not return a tensor"))
        return {"result_dtype": str(out.dtype).replace("torch.", ""), "lifted": lifted}
    raise SnippetFailed(last or RuntimeError("no layout ran"))


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    skipped = None
    if isinstance(data.get("snippet"), str) and data["snippet"].strip() and data.get("name"):
        from ..snippet import Refused, SnippetFailed, Unbindable

        low = lab.dtype(data.get("dtype"), default=torch.float16)
        if low not in (torch.float16, torch.bfloat16):
            low = torch.float16
        try:
            got = _users_expression(lab, data, low)
        except Refused as exc:
            skipped = f"not run: {exc}"
        except Unbindable as exc:
            skipped = f"could not bind {', '.join(exc.names)}"
        except SnippetFailed as exc:
            skipped = f"the flagged code raised {exc}"[:200]
        else:
            low_name = lab.dtype_name(low)
            ev2: Dict[str, Any] = {"evaluated": data["snippet"].strip()[:200], "inputs": f"`{data['name']}` {low_name}, the rest float32",
                                   "region": f"torch.autocast({lab.device_type!r}, enabled=False)"}
            if got.get("lifted"):
                ev2["ran_the_files_own"] = got["lifted"]
            if "raised" in got:
                ev2["error"] = got["raised"]
                return lab.confirmed(
                    f"this code inside autocast(enabled=False), `{data['name']}` {low_name}: {got['raised']['type']}: {got['raised']['message'][:140]}",
                    ev2, method="snippet", dtype=low,
                )
            ev2["result_dtype"] = got["result_dtype"]
            if got["result_dtype"] != "float32":
                return lab.confirmed(f"this code inside autocast(enabled=False) still ran in {got['result_dtype']} on `{data['name']}` ({low_name})",
                                     ev2, method="snippet", dtype=low)
            return lab.not_reproduced(f"this code inside autocast(enabled=False) returned float32 with `{data['name']}` {low_name}",
                                      ev2, method="snippet", dtype=low)
    source = str(data.get("source_op") or "linear").rsplit(".", 1)[-1]
    op = str(data.get("op") or "linear").rsplit(".", 1)[-1]
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = default
    make, use = _op(torch, source), _op(torch, op)
    name = lab.dtype_name(dtype)
    ev: Dict[str, Any] = {"source_op": source, "op": op, "autocast": f"{lab.device_type}, {name}"}
    if skipped:
        ev["snippet_skipped"] = skipped
    if make is None or use is None:
        return lab.inconclusive(f"no reproduction for {source if make is None else op!r}", ev, dtype=dtype)
    lab.seed_all()
    x = torch.randn(4, 8, device=lab.device)
    try:
        with lab.autocast(dtype):
            h = make(x, None)
    except RuntimeError as exc:
        return lab.inconclusive(f"the {source} reproduction failed: {str(exc)[:120]}", ev, dtype=dtype)
    if h.dim() != 2 or h.shape[-1] != 8:
        h = h.reshape(-1)[:32].reshape(4, 8) if h.numel() >= 32 else None
    if h is None:
        return lab.inconclusive(f"{source} output does not fit the {op} reproduction", ev, dtype=dtype)
    ev["tensor_dtype"] = str(h.dtype).replace("torch.", "")
    if h.dtype == torch.float32:
        if not lab.is_cuda and data.get("device") != "cpu":
            return lab.needs_cuda(f"CPU autocast does not lower {source}; the CUDA list decides", ev, dtype=dtype)
        return lab.not_reproduced(f"{source} under {name} autocast already returned float32", ev, dtype=dtype)
    results = {}
    for label, inp in (("uncast", h), ("with .float()", h.float())):
        lab.seed_all()
        with torch.autocast(lab.device_type, enabled=False):
            try:
                out = use(inp, None)
                results[label] = str(out.dtype).replace("torch.", "")
            except Exception as exc:  # noqa: BLE001
                results[label] = lab.exc(exc)
    ev["inside_autocast_enabled_false"] = results
    uncast = results["uncast"]
    if isinstance(uncast, dict):
        return lab.confirmed(
            f"{op} on the {ev['tensor_dtype']} output of {source} inside autocast(enabled=False) raised "
            f"{uncast['type']}: {uncast['message'][:140]} (with .float(): {results['with .float()']})",
            ev,
            dtype=dtype,
        )
    if uncast != "float32":
        return lab.confirmed(f"{op} inside autocast(enabled=False) still ran in {uncast} (with .float(): {results['with .float()']})", ev, dtype=dtype)
    return lab.not_reproduced(f"{op} inside autocast(enabled=False) ran in float32 without the cast", ev, dtype=dtype)
