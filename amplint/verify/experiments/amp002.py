"""AMP002 cuda-autocast-device-type: `torch.cuda.amp.autocast(device_type=...)` raises TypeError.

Evaluates the flagged call (when its names resolve) or
`<api>(device_type="cuda"[, dtype=...])`. The
signature check does not depend on the device.
"""
from __future__ import annotations

from typing import Any, Dict

from ..snippet import Unbindable, resolve_qualname
from ._api import api_snippet, evaluate, record_warnings

CANONICAL_API = "torch.cuda.amp.autocast"


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    api = str(data.get("api") or data.get("deprecated") or CANONICAL_API)
    tree = api_snippet(data.get("snippet"), data)
    ev: Dict[str, Any] = {"api": api}
    method = "experiment"
    if tree is not None:
        method = "snippet"
        ev["called"] = data["snippet"].strip()
        _, error, _ = record_warnings(lambda: evaluate(tree, data))
        if isinstance(error, Unbindable):  # the call needs a name the code defines elsewhere
            ev["snippet_skipped"] = f"could not bind {', '.join(error.names)}"
            tree, method = None, "experiment"
    if tree is None:
        method = "experiment"
        kwargs: Dict[str, Any] = {"device_type": "cuda"}
        dtype = lab.dtype(data.get("dtype"), default=None)
        if dtype is not None:
            kwargs["dtype"] = dtype
        ev["called"] = f"{api}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
        try:
            obj = resolve_qualname(api)
        except (LookupError, ImportError, AttributeError) as exc:
            ev["lookup_error"] = lab.exc(exc)
            return lab.inconclusive(f"{api} does not exist in torch {torch.__version__}", ev)
        _, error, _ = record_warnings(lambda: obj(**kwargs))
    if error is not None:
        ev["error"] = lab.exc(error)
    if isinstance(error, TypeError) and "device_type" in str(error):
        return lab.confirmed(f"{type(error).__name__}: {str(error)[:200]}", ev, method=method)
    if error is None:
        return lab.not_reproduced(f"{ev['called']} was accepted (torch {torch.__version__})", ev, method=method)
    return lab.inconclusive(f"the call raised {type(error).__name__}, not the device_type TypeError", ev, method=method)
