"""libcst's parse, without re-validating the tree its own parser just built.

Every libcst node runs `_validate()` from `__post_init__` when it is constructed:
checks meant for trees built by hand (a `Name` holding a space, a missing
parenthesis), which a tree straight out of libcst's parser passes by
construction. libcst notes it itself (`CSTNode.__post_init__`: "It might make more
sense to move validation work into the visitor, which would allow us to avoid
validating the tree when parsing a file"). The checks were about a third of
every parse (transformers' 113 gate-passing files: 4.8-5.8 s -> 3.3-3.4 s CPU,
trees `deep_equals` to the validated ones, `tests/test_speed_parse.py`).

The switch is process-wide (a class attribute), so it is held under a lock and
counted: parses in several threads (the server) overlap safely, and the checks
come back as soon as the last one ends. Nodes that amplint builds itself (fixes)
outside a parse are validated as before.
"""
from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_parsing = 0
_saved: Any = None


def parse_module(source: str) -> Any:
    """`libcst.parse_module(source)` with node validation off while it runs."""
    import libcst as cst

    _skip_validation(cst.CSTNode)
    try:
        return cst.parse_module(source)
    finally:
        _restore_validation(cst.CSTNode)


def _no_validation(self: Any) -> None:
    return None


def _skip_validation(node_class: Any) -> None:
    global _parsing, _saved
    with _lock:
        if _parsing == 0:
            _saved = node_class.__dict__.get("__post_init__")
            node_class.__post_init__ = _no_validation
        _parsing += 1


def _restore_validation(node_class: Any) -> None:
    global _parsing, _saved
    with _lock:
        _parsing -= 1
        if _parsing == 0:
            if _saved is not None:
                node_class.__post_init__ = _saved
            else:
                del node_class.__post_init__
            _saved = None
