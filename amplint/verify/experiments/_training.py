"""Shared driver of the GradScaler-protocol experiments (AMP101-AMP104).

Runs the finding's `step_source` (the user's own statements) when every free
name binds, else the rule's canonical reproduction, each twice: GradScaler
enabled and disabled. Correct AMP code is transparent to the scale; the bug
shows as a difference proportional to the scale or an error only the enabled
run raises.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Optional

import ast

from ..snippet import Prepared, Refused, RunRecord, TrainingSpec, Unbindable, compare_scaling, prepare_training, role_of


@dataclass
class ScalingResult:
    method: str  # "snippet" | "experiment"
    enabled: RunRecord
    disabled: RunRecord
    spec: TrainingSpec
    prepared: Prepared
    notes: Dict[str, Any] = field(default_factory=dict)

    @property
    def dtype(self) -> Any:
        """The autocast dtype the loss really ran in: the lab computes `loss` (canonical runs, or a
        slice reading a free `loss`) under `spec.dtype`; a slice computing its own loss decides itself."""
        if self.method == "experiment" or "loss" in self.prepared.assumed:
            return self.spec.dtype or "fp32"
        return None

    @property
    def scale(self) -> float:
        return self.enabled.init_scale

    def update_ratio(self) -> Optional[float]:
        """|dW| with the scaler enabled / |dW| with it disabled (1.0 when the scaler is transparent)."""
        if self.disabled.param_delta == 0.0:
            return None if self.enabled.param_delta == 0.0 else float("inf")
        return self.enabled.param_delta / self.disabled.param_delta

    def update_difference(self) -> Optional[float]:
        """||dW(enabled) - dW(disabled)|| / ||dW(disabled)||: ~0 when the scaler is transparent."""
        e, d = self.enabled.delta, self.disabled.delta
        if e is None or d is None:
            return None
        ref = float(d.norm())
        if ref == 0.0:
            return None
        diff = float((e - d).norm())
        return diff / ref if diff == diff else float("inf")

    def enabled_only_error(self) -> Optional[Dict[str, Any]]:
        """An exception (in the slice or the next update()) that only the scaled run raised."""
        for err, other in (
            (self.enabled.exception, self.disabled.exception),
            (self.enabled.harness_update_error, self.disabled.harness_update_error),
        ):
            if err and not (other and other.get("type") == err.get("type")):
                return err
        return None

    def base_evidence(self, lab: Any) -> Dict[str, Any]:
        ev: Dict[str, Any] = {"loss_scale": lab.num(self.scale)}
        ev.update(self.notes)
        assumed = {k: v for k, v in self.prepared.assumed.items() if k != "loss"}
        if assumed and self.method == "snippet":
            ev["assumed"] = assumed
        return ev


def _same_failure(e: RunRecord, d: RunRecord) -> Optional[Dict[str, Any]]:
    if e.exception and d.exception and e.exception.get("type") == d.exception.get("type") and e.exception.get("iteration") == d.exception.get("iteration"):
        return e.exception
    return None


def run_scaling(
    lab: Any,
    data: Dict[str, Any],
    canonical: str,
    *,
    iterations: int = 1,
    complete_update: Optional[str] = None,
    overflow_at: Optional[int] = None,
    relevant: Callable[[RunRecord, RunRecord], Optional[str]] = lambda e, d: None,
    threshold: Optional[float] = None,
) -> ScalingResult:
    """The user's slice if it binds and runs, else `canonical`.

    `relevant(enabled, disabled)` returns a reason string when the slice ran but
    did not exercise what the experiment measures (then the canonical runs).
    When the slice uses a loop index or an accumulation count it runs for
    `Lab.ACCUM` micro-batches (at least `iterations`).
    """
    dtype = lab.dtype(data.get("dtype"), default=None)
    optimizer = data.get("optimizer_class") or "SGD"
    try:
        lab.optimizer_class(optimizer)
    except LookupError:
        optimizer = "SGD"
    base = TrainingSpec(
        source=canonical,
        iterations=iterations,
        dtype=dtype,
        optimizer=optimizer,
        lr=None,
        complete_update=complete_update,
        overflow_at=overflow_at,
        threshold=threshold,
        data=dict(data),
    )
    notes: Dict[str, Any] = {}
    source = data.get("step_source")
    if isinstance(source, str) and source.strip():
        try:
            spec = replace(base, source=source)
            prepared = prepare_training(spec)
            if calls_scaler_update(prepared, data):
                spec = replace(spec, complete_update=None)  # the slice updates itself (maybe under an `if`)
            if prepared.uses_index:
                spec = replace(spec, iterations=max(iterations, lab.ACCUM))
            enabled, disabled = compare_scaling(lab, spec, prepared)
            failure = _same_failure(enabled, disabled)
            skip = None
            if failure:
                skip = f"the flagged code raised {failure['type']} with and without scaling: {failure['message'][:120]}"
            else:
                skip = relevant(enabled, disabled)
            if skip is None:
                return ScalingResult("snippet", enabled, disabled, spec, prepared, notes)
            notes["snippet_skipped"] = skip
        except Refused as exc:
            notes["snippet_skipped"] = f"not run: {exc}"
        except Unbindable as exc:
            notes["snippet_skipped"] = f"could not bind {', '.join(exc.names)}"
    prepared = prepare_training(base)
    enabled, disabled = compare_scaling(lab, base, prepared)
    return ScalingResult("experiment", enabled, disabled, base, prepared, notes)


def calls_scaler_update(prepared: Prepared, data: Dict[str, Any]) -> bool:
    """The slice itself calls `<scaler>.update()` somewhere (then the harness adds none)."""
    for node in ast.walk(prepared.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            receiver = node.func.value
            name = receiver.attr if isinstance(receiver, ast.Attribute) else receiver.id if isinstance(receiver, ast.Name) else None
            if name is not None and role_of(name, data) == "scaler":
                return True
    return False


def fmt(x: Any) -> str:
    """A number for a summary line."""
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == 0:
        return "0"
    if 1e3 <= abs(x) < 1e7:
        return f"{x:.0f}"
    if 1e-3 <= abs(x) < 1e3:
        return f"{x:.4g}"
    return f"{x:.3g}"


def describe_error(err: Optional[Dict[str, Any]]) -> str:
    if not err:
        return ""
    return f"{err.get('type')}: {err.get('message')}"
