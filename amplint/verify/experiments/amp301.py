"""AMP301 fp16-overflowing-literal: the user's expression raises, or -inf turns softmax rows to NaN.

Evaluates the flagged expression (`snippet`) with fp16 tensors bound to its free
names (boolean masks with a fully set and a fully clear row), then softmaxes the
result over its last dimension; the same expression in fp32 is the reference.
Canonical: `scores.masked_fill(mask, literal)` / `scores + literal` / ... by `op`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..snippet import Refused, SnippetFailed, Unbindable, eval_expression
from ._training import fmt

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
        # only where it later meets low-precision tensors (`scores += mask`), outside the flagged code
        ev["result_dtype"] = str(value.dtype).replace("torch.", "")
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
