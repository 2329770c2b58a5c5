"""AMP503 custom-fwd-without-device-type: `@torch.amp.custom_fwd` without `device_type=` raises TypeError.

Applies the flagged decorator (the finding's `snippet`, e.g.
`torch.amp.custom_fwd(cast_inputs=torch.float32)` or bare `torch.amp.custom_fwd`)
to a dummy forward, else `<api>` bare.
"""
from __future__ import annotations

from typing import Any, Dict

from ..snippet import resolve_qualname
from ._api import api_snippet, dummy_forward, evaluate, record_warnings

CANONICAL_API = "torch.amp.custom_fwd"


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    api = str(data.get("api") or data.get("decorator") or CANONICAL_API)
    tree = api_snippet(data.get("snippet"), data, need_call=False)
    ev: Dict[str, Any] = {"api": api}

    def apply() -> Any:
        decorator = evaluate(tree, data) if tree is not None else resolve_qualname(api)
        return decorator(dummy_forward)

    method = "snippet" if tree is not None else "experiment"
    ev["applied"] = f"@{data['snippet'].strip().lstrip('@')}" if tree is not None else f"@{api}"
    try:
        _, error, _ = record_warnings(apply)
    except (LookupError, ImportError, AttributeError) as exc:
        ev["lookup_error"] = lab.exc(exc)
        return lab.inconclusive(f"{api} does not exist in torch {torch.__version__}", ev)
    if isinstance(error, (LookupError, ImportError, AttributeError)):
        ev["lookup_error"] = lab.exc(error)
        return lab.inconclusive(f"{api} does not exist in torch {torch.__version__}", ev)
    if error is not None:
        ev["error"] = lab.exc(error)
    if isinstance(error, TypeError) and "device_type" in str(error):
        return lab.confirmed(f"applying {ev['applied']} raised {type(error).__name__}: {str(error)[:200]}", ev, method=method)
    if error is None:
        return lab.not_reproduced(f"{ev['applied']} decorated a forward without error (torch {torch.__version__})", ev, method=method)
    return lab.inconclusive(f"applying the decorator raised {type(error).__name__}, not the device_type TypeError", ev, method=method)
