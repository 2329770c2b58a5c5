"""Helpers for experiments about API misuse (AMP001, AMP002, AMP503)."""
from __future__ import annotations

import ast
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..snippet import Missing, Refused, Unbindable, Unbound, _namespace_roles, bind_by_role, check_safe, free_names, parse, resolve_qualname, role_of, run_source, with_prelude


def api_snippet(source: Any, data: Dict[str, Any], need_call: bool = True) -> Optional[ast.Module]:
    """The flagged expression if it is (a call of) a torch API that can be run.

    Returns None (use the canonical reproduction) when it is not one or when it
    would do something we do not run. Its arguments may use the code's own
    names (`enabled=args.amp`): they bind by role, or lazily (`api_env`).
    """
    if not isinstance(source, str) or not source.strip():
        return None
    try:
        tree = parse(source.strip().lstrip("@"))
        check_safe(tree)
    except Refused:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    node = tree.body[0].value
    if need_call and not isinstance(node, ast.Call):
        return None
    callee = node.func if isinstance(node, ast.Call) else node
    while isinstance(callee, ast.Attribute):
        callee = callee.value
    role = role_of(callee.id, data) if isinstance(callee, ast.Name) else None
    if not role or not role.startswith(("module:", "api:")):
        return None  # the called object itself must be the torch API
    return tree


#: plain values for argument names the lab binds by role
_VALUES = {"flag": True, "index": 0, "accum": 2, "threshold": 1.0}


def api_env(tree: ast.Module, data: Dict[str, Any]) -> Dict[str, Any]:
    """The API's names resolved; the code's own names by role (`use_amp`: True, `dtype`:
    fp16, `args.fp16`: True), anything else lazily (`Missing`: an error only if used)."""
    env: Dict[str, Any] = {}
    for name, chains in free_names(tree).chains.items():
        role = role_of(name, data) or ""
        if role.startswith(("module:", "api:")):
            try:
                env[name] = resolve_qualname(role.split(":", 1)[1])
            except (LookupError, ImportError, AttributeError) as exc:
                raise Unbindable([name]) from exc
        elif role == "namespace":
            roles = {name: _namespace_roles(chains, data, 1, [], name)}
            env[name] = bind_by_role(roles, _value_for)[name]
        else:
            env[name] = _value_for(role, name)
    return env


def _value_for(role: str, path: str) -> Any:
    if role in _VALUES:
        return _VALUES[role]
    if role == "dtype":
        return resolve_qualname("torch.float16")
    return Missing(path)


def evaluate(tree: ast.Module, data: Dict[str, Any]) -> Any:
    tree, _ = with_prelude(tree, data)  # the file's own helpers the call's arguments use
    try:
        return run_source(tree, api_env(tree, data))
    except Unbound as exc:
        raise Unbindable(exc.names) from None


def record_warnings(fn: Callable[[], Any]) -> Tuple[Any, Optional[BaseException], List[warnings.WarningMessage]]:
    """Run fn, recording every warning; returns (value, exception, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value, error = fn(), None
        except Exception as exc:  # noqa: BLE001
            value, error = None, exc
    return value, error, list(caught)


def dummy_forward(ctx: Any, *args: Any) -> Any:
    return args[0] if args else None
