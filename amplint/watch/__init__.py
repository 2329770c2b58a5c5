"""amplint's runtime guard: watch a training run, tie what goes wrong to a line, replay it.

    amplint run --report DIR -- python train.py ...     (run.py, any unmodified program)
    with amplint.watch(DIR): ...                         (session.py)
    amplint.watch.LightningCallback(DIR), amplint.watch.HFCallback(DIR)   (integrations.py)
    amplint replay DIR/incidents/stepN.pt                (replay.py)

Importing this package imports neither torch nor any framework: the names
load on first use, and torch only when a guard is installed. `amplint.watch`
is itself callable (the module's class is swapped for a callable one) so that
`amplint.watch(DIR)` reads as the context manager it returns.
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS = {
    "watch": ".session",
    "LightningCallback": ".integrations",
    "HFCallback": ".integrations",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amplint.watch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
