"""Where things happen in the watched program: the caller's line, the line that built a module.

Frames inside torch, the frameworks' glue that only forwards a call
(`torch/`, `amplint/watch/`, importlib) are skipped, so a finding points at the
user's own call.
"""
from __future__ import annotations

import os
import sys
import weakref
from typing import Dict, Optional, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
_SKIP = [_HERE + os.sep]

Site = Tuple[str, int]


def skip_package(path: str) -> None:
    """Treat every frame below `path` (a package folder) as internal."""
    prefix = os.path.abspath(path) + os.sep
    if prefix not in _SKIP:
        _SKIP.append(prefix)
        _INTERNAL.clear()


_INTERNAL: Dict[str, bool] = {}  # filename -> internal? (caller_site runs every step: no prefix scan each time)


def _internal(filename: str) -> bool:
    known = _INTERNAL.get(filename)
    if known is None:
        known = _INTERNAL[filename] = filename.startswith("<frozen") or any(filename.startswith(p) for p in _SKIP)
    return known


def caller_site(depth: int = 2) -> Site:
    """The first frame outside torch and amplint.watch, from `depth` frames up."""
    frame = sys._getframe(depth)
    last = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not _internal(name):
            return name, frame.f_lineno
        last = frame
        frame = frame.f_back
    return (last.f_code.co_filename, last.f_lineno) if last is not None else ("<unknown>", 0)


class BuildSites:
    """module -> (file, line) of the expression that constructed it (weakly held)."""

    def __init__(self) -> None:
        self.sites: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def record(self, module, frame) -> None:
        # Skip the chain of __init__ frames of this very object (subclass -> nn.Module),
        # then frames inside torch: what is left is the line that built it.
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module:
            frame = frame.f_back
        while frame is not None and _internal(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None:
            try:
                self.sites[module] = (frame.f_code.co_filename, frame.f_lineno)
            except TypeError:  # pragma: no cover - a module that refuses weak references
                pass

    def adopt(self, root) -> None:
        """Know the modules of a model built before the guard; the line that built each is
        unknown, so each points at the model's class when that class is the user's own."""
        where = self._class_site(root)
        for module in root.modules():
            if module not in self.sites:
                self.sites[module] = self._class_site(module) or where

    def site(self, module) -> Optional[Site]:
        try:
            found = self.sites.get(module)
        except TypeError:  # pragma: no cover
            found = None
        if found is not None:
            return found
        return self._class_site(module)  # built before the guard was installed

    @staticmethod
    def _class_site(module) -> Optional[Site]:
        """Where the module's class is defined, when it is the user's class (never torch's)."""
        import inspect

        try:
            path = inspect.getsourcefile(type(module))
            if not path or _internal(os.path.abspath(path)):
                return None
            return path, inspect.getsourcelines(type(module))[1]
        except (OSError, TypeError):
            return None
