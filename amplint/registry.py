"""Every shipped rule, discovered from the `amplint.rules` package.

A rule is a `Rule` subclass in a module of `rules/` (shipped as
`amplint.rules`); dropping a file there is all it takes to add one.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Dict, Iterable, List, Tuple, Type

from .rule import Rule


@lru_cache(maxsize=None)
def all_rules() -> Tuple[Type[Rule], ...]:
    import amplint.rules as package

    found: Dict[str, Type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == module.__name__:
                if value.code in found:
                    raise RuntimeError(f"two rules claim {value.code}: {found[value.code]} and {value}")
                found[value.code] = value
    return tuple(found[c] for c in sorted(found))


def rules_by_code() -> Dict[str, Type[Rule]]:
    return {r.code: r for r in all_rules()}


def all_codes() -> List[str]:
    return [r.code for r in all_rules()]


def select_rules(codes: Iterable[str]) -> List[Type[Rule]]:
    wanted = set(codes)
    return [r for r in all_rules() if r.code in wanted]
