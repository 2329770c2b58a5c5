"""Verdict construction shared by the lab and the lazy lab (no torch here).

A verdict is a plain dict:
    verdict   "confirmed" | "not-reproduced" | "inconclusive" | "error"
    reason    why inconclusive/error (None otherwise)
    method    "snippet" (the user's own code ran) | "experiment" (the rule's canonical reproduction)
    summary   one line with the numbers
    evidence  {name: number | string | list | dict}
    dtype     "fp16" | "bf16" | "fp32" | None
    reference only when the rule's reference experiment ran instead of the user's code:
              {"verdict", "summary", "evidence"} of that experiment
The worker adds device, device_name, capability, torch, experiment, seed, duration_s.

`confirmed` and `not-reproduced` are claims about the user's code, so they need
`method == "snippet"`. `honest()` turns any other confirmed/not-reproduced into
`inconclusive` ("could not run this code: ...") and keeps what the reference
experiment showed under `reference`. Every builder applies it, and the parent
applies it again to whatever comes back from the worker.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

_DTYPE_LABELS = {
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float32": "fp32",
    "torch.float64": "fp64",
}


def dtype_label(dtype: Any) -> Any:
    """A torch.dtype (or its name) -> "fp16"/"bf16"/...; other values unchanged."""
    if dtype is None or isinstance(dtype, str) and dtype not in _DTYPE_LABELS:
        return dtype
    return _DTYPE_LABELS.get(str(dtype), str(dtype))


DECIDED = ("confirmed", "not-reproduced")
USER_CODE = "snippet"
#: evidence keys that explain why the user's code did not run (kept on the verdict itself)
_WHY_KEYS = ("snippet_skipped", "ran_on")


def could_not_run(evidence: Dict[str, Any]) -> str:
    """The reason a verdict about the user's code could not be given, from `snippet_skipped`."""
    skipped = evidence.get("snippet_skipped")
    if not isinstance(skipped, str) or not skipped.strip():
        return "could not run this code: no runnable flagged code for this finding"
    text = skipped.strip().splitlines()[0]
    for prefix, replacement in (("could not bind ", ""), ("not run: ", "refused ")):
        if text.startswith(prefix):
            text = replacement + text[len(prefix):]
            break
    return f"could not run this code: {text}"[:300]


def honest(verdict: Dict[str, Any]) -> Dict[str, Any]:
    """`verdict` unchanged when it may stand; a reference-only `confirmed`/`not-reproduced`
    (any method but "snippet") becomes `inconclusive` with the result under `reference`."""
    if not isinstance(verdict, dict) or verdict.get("verdict") not in DECIDED or verdict.get("method") == USER_CODE:
        return verdict
    evidence = verdict.get("evidence") if isinstance(verdict.get("evidence"), dict) else {}
    out = dict(verdict)
    out["verdict"] = "inconclusive"
    out["reason"] = could_not_run(evidence)
    out["method"] = "experiment"
    out["summary"] = None
    out["evidence"] = {k: evidence[k] for k in _WHY_KEYS if k in evidence}
    out["reference"] = {
        "verdict": verdict.get("verdict"),
        "summary": verdict.get("summary"),
        "evidence": {k: v for k, v in evidence.items() if k not in _WHY_KEYS},
    }
    return out


class Verdicts:
    """Builders for verdict dicts and stable evidence numbers."""

    @staticmethod
    def num(value: Any, sig: int = 6) -> Any:
        """A number rounded to `sig` significant digits (stable evidence); inf/nan kept."""
        if value is None or isinstance(value, (bool, int)):
            return value
        if hasattr(value, "detach"):  # a tensor
            value = value.detach().float().item()
        value = float(value)
        if math.isnan(value) or math.isinf(value) or value == 0.0:
            return value
        return float(f"{value:.{sig}g}")

    @staticmethod
    def exc(error: BaseException) -> Dict[str, str]:
        """An exception as evidence: type and the first line of its message."""
        text = str(error).strip().splitlines()
        return {"type": type(error).__name__, "message": (text[0] if text else "")[:300]}

    def _verdict(
        self,
        verdict: str,
        summary: Optional[str],
        evidence: Optional[Dict[str, Any]],
        method: str,
        reason: Optional[str],
        dtype: Any,
    ) -> Dict[str, Any]:
        return honest(
            {
                "verdict": verdict,
                "reason": reason,
                "method": method,
                "summary": summary,
                "evidence": dict(evidence or {}),
                "dtype": dtype_label(dtype),
            }
        )

    def confirmed(self, summary: str, evidence: Optional[Dict[str, Any]] = None, *, method: str = "experiment", dtype: Any = None) -> Dict[str, Any]:
        return self._verdict("confirmed", summary, evidence, method, None, dtype)

    def not_reproduced(self, summary: str, evidence: Optional[Dict[str, Any]] = None, *, method: str = "experiment", dtype: Any = None) -> Dict[str, Any]:
        return self._verdict("not-reproduced", summary, evidence, method, None, dtype)

    def inconclusive(
        self, reason: str, evidence: Optional[Dict[str, Any]] = None, *, summary: Optional[str] = None, method: str = "experiment", dtype: Any = None
    ) -> Dict[str, Any]:
        return self._verdict("inconclusive", summary, evidence, method, reason, dtype)

    def needs_cuda(self, what: str, evidence: Optional[Dict[str, Any]] = None, *, method: str = "experiment", dtype: Any = None) -> Dict[str, Any]:
        """For CUDA-only behaviour seen from a CPU run: never claim it."""
        ev = dict(evidence or {})
        ev.setdefault("needs", what)
        return self._verdict("inconclusive", None, ev, method, "needs CUDA", dtype)

    def error(self, reason: str, **evidence: Any) -> Dict[str, Any]:
        return self._verdict("error", None, evidence, "experiment", reason, None)
