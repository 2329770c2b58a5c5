"""AMP001 deprecated-amp-api: the FutureWarning is raised.

Calls the flagged API (the finding's `snippet` when it is a call whose names
all resolve, else the API named by `api`) with warnings recorded. A finding on an
import line (`from torch.cuda.amp import GradScaler` beside other devices' imports)
runs the file's own first call of what it imports (`scaler_type()` after
`scaler_type = GradScaler`, read by the parent: `call_row`, `import_line`). Device-independent: the deprecation fires on
construction whatever the device.
"""
from __future__ import annotations

from typing import Any, Dict

from ..snippet import Unbindable, resolve_qualname
from ._api import api_snippet, dummy_forward, evaluate, record_warnings

CANONICAL_API = "torch.cuda.amp.autocast"


def _call_api(torch: Any, api: str) -> Any:
    obj = resolve_qualname(api)
    short = api.rsplit(".", 1)[-1]
    if short in ("custom_fwd", "custom_bwd"):
        return obj(dummy_forward)
    if short.startswith("set_autocast_") and short.endswith("_dtype"):
        device = "cuda" if "gpu" in short else "cpu"
        return obj(torch.get_autocast_dtype(device))  # sets the current value: no state change
    if short.startswith("set_autocast_") and short.endswith("_enabled"):
        device = "cuda" if "gpu" in short else "cpu"
        return obj(torch.is_autocast_enabled(device))
    return obj()


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    api = str(data.get("api") or data.get("deprecated") or CANONICAL_API)
    tree = api_snippet(data.get("snippet"), data)
    method = "snippet" if tree is not None else "experiment"
    ev: Dict[str, Any] = {"api": api}
    try:
        if tree is not None:
            _, error, caught = record_warnings(lambda: evaluate(tree, data))
            ev["called"] = data.get("snippet").strip()
            if isinstance(error, Unbindable):  # the call needs a name the code defines elsewhere
                ev["snippet_skipped"] = f"could not bind {', '.join(error.names)}"
                tree, method = None, "experiment"
        if tree is None:
            _, error, caught = record_warnings(lambda: _call_api(torch, api))
            ev["called"] = f"{api}(...)"
    except (LookupError, Unbindable, AttributeError, ImportError) as exc:
        ev["lookup_error"] = lab.exc(exc)
        return lab.inconclusive(f"{api} does not exist in torch {torch.__version__}", ev)
    if isinstance(error, (LookupError, ImportError, AttributeError, Unbindable)) and tree is None:
        ev["lookup_error"] = lab.exc(error)
        return lab.inconclusive(f"{api} does not exist in torch {torch.__version__}", ev)
    deprecations = [
        w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning)) and "deprecat" in str(w.message).lower()
    ]
    ev["warnings"] = [f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught]
    if error is not None:
        ev["error"] = lab.exc(error)
    if deprecations:
        w = deprecations[0]
        expected = data.get("warning")
        if isinstance(expected, str) and expected:
            ev["message_as_the_finding_says"] = expected.strip() in str(w.message)
        through = ""
        if method == "snippet" and isinstance(data.get("call_row"), int) and data.get("import_line"):
            # an import line's finding: the file's own call of what it imports ran
            ev.update(call_row=data["call_row"], import_line=data["import_line"])
            through = f"`{data['snippet'].strip()}` (line {data['call_row']}, imported by `{data['import_line']}`): "
        return lab.confirmed(f"{through}{w.category.__name__}: {str(w.message)[:200]}", ev, method=method)
    if error is not None and tree is not None:
        # the user's call failed for another reason: try the bare API
        _, error2, caught2 = record_warnings(lambda: _call_api(torch, api))
        dep2 = [w for w in caught2 if issubclass(w.category, (FutureWarning, DeprecationWarning)) and "deprecat" in str(w.message).lower()]
        if dep2:
            return lab.confirmed(f"{dep2[0].category.__name__}: {str(dep2[0].message)[:200]}", ev, method="experiment")
    return lab.not_reproduced(f"no deprecation warning from {ev['called']} in torch {torch.__version__}", ev, method=method)
