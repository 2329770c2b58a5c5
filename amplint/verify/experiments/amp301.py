"""AMP301 fp16-overflowing-literal: the user's expression raises, or -inf turns softmax rows to NaN.

Evaluates the flagged expression (`snippet`) with fp16 tensors bound to its free
names (boolean masks with a fully set and a fully clear row), then softmaxes the
result over its last dimension; the same expression in fp32 is the reference.
Canonical: `scores.masked_fill(mask, literal)` / `scores + literal` / ... by `op`.

When the flagged expression builds an fp32 tensor (`torch.where(mask > 0, 0.0, -1e10)`:
Python numbers make a default-dtype tensor), the constant is still finite there; it
overflows only where that tensor meets a low-precision one. The parent then sends the
value's path (`data["path"]`, `prelude.value_path`): the flagged statement and every later
statement of its function, and of its caller when it is returned, that the value reaches.
They run one at a time, the names they read but do not compute synthesized in the
finding's dtype (the tensors the value meets, as under fp16 autocast), and once again in
fp32: `confirmed` at the first statement whose fp16 result holds an inf that the fp32 run
does not; `not-reproduced` when the whole path ran inside its function and the value
stayed finite (it met fp16 tensors only out of place, where it promotes them to fp32, or
none at all), or it left the code read (returned to a caller not in the file) with no value
beyond fp16's range (a softmax of it, a product); inconclusive when the path raised first,
or leaves the code read still holding such values (returned, stored in an attribute).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..snippet import (
    EXPR_ATTEMPTS, Refused, SnippetFailed, Unbindable, Unbound, bind_expression_names, check_safe, eval_expression,
    free_names, parse, run_steps, string_keyed, with_prelude,
)
from ..prelude import RETURNED
from ._training import fmt

FP16_MAX = 65504.0

CANONICAL = {
    "masked_fill": "scores.masked_fill(mask, {lit})",
    "masked_fill_": "scores.masked_fill_(mask, {lit})",
    "fill_": "scores.fill_({lit})",
    "full": "torch.full((4, 4), {lit}, dtype=dtype)",
    "where": "torch.where(mask, {lit}, scores)",
}


def _is_overflow_error(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "overflow" in str(exc)


def _literal(data: Dict[str, Any]) -> float:
    lit = data.get("literal")
    if isinstance(lit, str):
        try:
            lit = float(lit.replace("_", ""))
        except ValueError:
            lit = None
    if not isinstance(lit, (int, float)) or isinstance(lit, bool):
        lit = -1e9
    return float(lit)


def _nan_rows(torch: Any, value: Any) -> Optional[int]:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() == 0:
        return None
    probs = torch.softmax(value, dim=-1)
    return int(probs.isnan().reshape(-1, value.shape[-1]).any(dim=-1).sum())


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    lit = _literal(data)
    lit_cast = torch.tensor(lit, dtype=torch.float64).to(dtype).item()
    ev: Dict[str, Any] = {"literal": lit, "literal_as_" + (lab.dtype_name(dtype) or "dtype"): lab.num(lit_cast)}
    source = data.get("snippet")
    method = "snippet"
    attempt = None
    if isinstance(source, str) and source.strip():
        try:
            attempt = eval_expression(lab, source, data, dtype, is_target_error=_is_overflow_error)
        except Refused as exc:
            ev["snippet_skipped"] = f"not run: {exc}"
        except Unbindable as exc:
            ev["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
        except SnippetFailed as exc:
            ev["snippet_skipped"] = f"the flagged code raised {exc}"[:200]
    if attempt is None:
        method = "experiment"
        op = str(data.get("op") or "").rsplit(".", 1)[-1]
        template = CANONICAL.get(op, "scores + {lit}")
        source = template.format(lit=repr(lit))
        attempt = eval_expression(lab, source, {}, dtype, is_target_error=_is_overflow_error)
    value, error, info = attempt
    ev["evaluated"] = source.strip()
    ev.update(info)
    name = lab.dtype_name(dtype)
    if error is not None:
        ev["error"] = lab.exc(error)
        return lab.confirmed(f"on {name} tensors it raised {type(error).__name__}: {str(error)[:160]}", ev, method=method, dtype=dtype)
    if not isinstance(value, torch.Tensor):
        return lab.inconclusive("the expression did not produce a tensor", ev, method=method, dtype=dtype)
    inf = int(value.isinf().sum()) if value.is_floating_point() else 0
    nan_rows = _nan_rows(torch, value)
    ev.update(inf_values=inf, nan_rows_after_softmax=nan_rows)
    # the same expression in fp32, for reference
    try:
        ref, _, _ = eval_expression(lab, source, data if method == "snippet" else {}, torch.float32)
        ev["fp32_inf_values"] = int(ref.isinf().sum()) if isinstance(ref, torch.Tensor) and ref.is_floating_point() else None
        ev["fp32_nan_rows_after_softmax"] = _nan_rows(torch, ref)
    except Exception:  # noqa: BLE001 - the reference is only evidence
        pass
    if inf:
        tail = f"; softmax over the result gave {nan_rows} NaN row(s)" if nan_rows else ""
        fp32 = f" (fp32: {ev.get('fp32_inf_values')} inf, {ev.get('fp32_nan_rows_after_softmax')} NaN rows)" if "fp32_inf_values" in ev else ""
        return lab.confirmed(
            f"{fmt(lit)} became {fmt(lit_cast)} in {name}: {inf} -inf/inf value(s) in the result{tail}{fp32}", ev, method=method, dtype=dtype
        )
    if value.is_floating_point() and value.dtype != dtype and lit_cast in (float("inf"), float("-inf")):
        # e.g. `torch.where(mask > 0, 0.0, -1e10)`: the literals make an fp32 tensor, which overflows
        # only where it later meets low-precision tensors (`scores += mask`): along the value's path
        ev["result_dtype"] = str(value.dtype).replace("torch.", "")
        path = data.get("path")
        if method == "snippet" and isinstance(path, dict) and isinstance(path.get("source"), str):
            return _along_path(lab, path, data, dtype, ev)
        return lab.inconclusive(
            f"the flagged expression gives a {ev['result_dtype']} tensor here, so {fmt(lit)} stays finite in it; it becomes "
            f"{fmt(lit_cast)} only where the result meets {name} tensors, which the flagged code does not show",
            ev,
            method=method,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"the result stayed finite in {name} ({fmt(lit)} -> {fmt(lit_cast)}; softmax NaN rows: {nan_rows})", ev, method=method, dtype=dtype
    )


def _tensor_state(torch: Any, value: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    return {"dtype": value.dtype, "inf": int(value.isinf().sum()), "nan": int(value.isnan().sum())}


def _walk(lab: Any, tree: Any, first: int, env: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], Optional[BaseException], Optional[int]]:
    """Each path statement's assigned tensors ({name: state}), the exception that stopped the
    path, and how many elements beyond fp16's range what the path returns holds (None: it
    returns nothing, or something that is not tensors)."""
    torch = lab.torch
    states: List[Dict[str, Any]] = []
    globs: Dict[str, Any] = {}
    lab.seed_all()
    try:
        for i, globs in run_steps(tree, env, first):
            names = _assigned(tree.body[i])
            states.append({n: st for n in names if (st := _tensor_state(torch, globs.get(n))) is not None})
    except Unbound as exc:
        raise Unbindable(exc.names) from None
    except Exception as exc:  # noqa: BLE001 - the path stopped here
        return states, exc, None
    return states, None, _beyond_fp16(torch, globs.get(RETURNED))


def _beyond_fp16(torch: Any, value: Any) -> Optional[int]:
    """Elements of a tensor (or a tuple/list/dict of them) beyond fp16's largest finite value."""
    leaves = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, (tuple, list)) else [value]
    if value is None or not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        return None
    return sum(int((t.isfinite() & (t.abs() > FP16_MAX)).sum()) if t.is_floating_point() else 0 for t in leaves)


def _assigned(stmt: Any) -> List[str]:
    import ast

    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    else:
        call = getattr(stmt, "value", None)
        receiver = getattr(getattr(call, "func", None), "value", None)
        in_place = isinstance(call, ast.Call) and getattr(call.func, "attr", "").endswith("_")
        return [receiver.id] if in_place and isinstance(receiver, ast.Name) else []
    out = []
    for t in targets:
        elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
        out.extend(e.id for e in elts if isinstance(e, ast.Name))
    return out


def _along_path(lab: Any, path: Dict[str, Any], data: Dict[str, Any], dtype: Any, ev: Dict[str, Any]) -> Dict[str, Any]:
    """Run the flagged value's path in `dtype` and in fp32 (see the module docstring)."""
    torch = lab.torch
    name = lab.dtype_name(dtype)
    rows = [r for r in path.get("rows") or [] if isinstance(r, int)]
    try:
        tree = parse(path["source"])
        check_safe(tree)
    except Refused as exc:
        ev["path_skipped"] = f"not run: {exc}"
        return lab.inconclusive(f"the flagged expression gives an fp32 tensor; its path could not run ({exc})", ev, method="snippet", dtype=dtype)
    steps = len(tree.body)
    full, lifted = with_prelude(tree, path)
    first = len(full.body) - steps
    free = free_names(full)
    keyed = string_keyed(full)
    where = lambda i: f"line {rows[i]}" if i < len(rows) else f"step {i + 1}"  # noqa: E731
    best: Optional[Tuple[int, BaseException]] = None
    for binding in EXPR_ATTEMPTS:
        try:
            low, low_error, out_of_range = _walk(lab, full, first, bind_expression_names(lab, free, data, dtype, binding, None, keyed))
            ref = _walk(lab, full, first, bind_expression_names(lab, free, data, torch.float32, binding, None, keyed))[0]
        except Unbindable as exc:
            ev["path_skipped"] = f"could not bind {', '.join(exc.names)}"
            break
        hit = None
        for i, states in enumerate(low):
            for var, st in states.items():
                if hit is None and i < len(ref) and st["dtype"] == dtype and st["inf"] > (ref[i].get(var) or {}).get("inf", 0):
                    hit = (i, var, st["inf"])
        if hit is not None:
            i, var, inf = hit
            nan = next(
                ((j, v, st["nan"]) for j in range(i, len(low)) for v, st in low[j].items()
                 if st["nan"] > ((ref[j].get(v) or {}).get("nan", 0) if j < len(ref) else 0)),
                None,
            )
            ev.update(path_rows=rows[: len(low)], met_at=where(i), overflowed=var, path_inf_values=inf, layout=f"tensors {tuple(binding.shape)}, masks {binding.mask_kind}")
            if lifted:
                ev["ran_the_files_own"] = lifted
            returns = f"what {(path.get('functions') or ['the function'])[-1]} returns"
            said = lambda v: returns if v == RETURNED else f"`{v}`"  # noqa: E731
            tail = f"; then {said(nan[1])} ({where(nan[0])}) held {nan[2]} NaN value(s)" if nan else ""
            if nan:
                ev.update(nan_at=where(nan[0]), path_nan_values=nan[2])
            return lab.confirmed(
                f"the flagged {fmt(ev['literal'])} stays finite in its fp32 tensor, but along its path (in {', '.join(path.get('functions') or [])}) "
                f"{said(var)} at {where(i)} is {name} and holds {inf} inf value(s) (fp32: none){tail}",
                ev, method="snippet", dtype=dtype,
            )
        if low_error is None:
            ev.update(path_rows=rows, layout=f"tensors {tuple(binding.shape)}, masks {binding.mask_kind}", path_ends=path.get("ends"))
            span = f"{where(0)} to {where(steps - 1)}"
            if path.get("ends") == "returned" and out_of_range is not None:
                ev["returned_beyond_fp16"] = out_of_range
            if path.get("ends") == "function" or (path.get("ends") == "returned" and out_of_range == 0):
                # the value was used up in the code read, or what leaves it holds nothing fp16 cannot represent
                gone = "" if path.get("ends") == "function" else f", and what {path.get('functions', ['it'])[-1]} returns holds no value beyond 65504"
                return lab.not_reproduced(
                    f"along the path of the flagged {fmt(ev['literal'])} ({span}) no {name} tensor became inf{gone}", ev, method="snippet", dtype=dtype,
                )
            return lab.inconclusive(
                f"the flagged {fmt(ev['literal'])} stays finite along the path read ({span}), which ends where the value leaves "
                f"the code read ({path.get('ends')}{', still beyond 65504' if out_of_range else ''})",
                ev, method="snippet", dtype=dtype,
            )
        if best is None or len(low) > best[0]:
            best = (len(low), low_error)
    if best is not None:
        done, error = best
        ev["path_error"] = {**lab.exc(error), "at": where(done)}
        return lab.inconclusive(
            f"the flagged expression gives an fp32 tensor, and its path raised {type(error).__name__} at {where(done)} "
            f"before the value met a {name} tensor: {str(error)[:120]}",
            ev, method="snippet", dtype=dtype,
        )
    return lab.inconclusive(f"the flagged expression gives an fp32 tensor; its path could not run ({ev.get('path_skipped')})", ev, method="snippet", dtype=dtype)
