"""Helpers for experiments about API misuse (AMP001, AMP002, AMP503)."""
from __future__ import annotations

import ast
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..snippet import Refused, Unbindable, check_safe, free_names, parse, resolve_qualname, role_of, run_source


def api_snippet(source: Any, data: Dict[str, Any], need_call: bool = True) -> Optional[ast.Module]:
    """The flagged expression if it is (a call of) a torch API whose names all resolve.

    Returns None (use the canonical reproduction) when it is not one, when a
    name cannot be bound, or when it would do something we do not run.
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
    if need_call and not isinstance(tree.body[0].value, ast.Call):
        return None
    for name in free_names(tree).names:
        role = role_of(name, data)
        if not role or not role.startswith(("module:", "api:")):
            return None
    return tree


def api_env(tree: ast.Module, data: Dict[str, Any]) -> Dict[str, Any]:
    env: Dict[str, Any] = {}
    for name in free_names(tree).names:
        role = role_of(name, data) or ""
        try:
            env[name] = resolve_qualname(role.split(":", 1)[1])
        except (LookupError, ImportError, AttributeError) as exc:
            raise Unbindable([name]) from exc
    return env


def evaluate(tree: ast.Module, data: Dict[str, Any]) -> Any:
    return run_source(tree, api_env(tree, data))


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
