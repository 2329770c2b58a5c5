"""Cross-file findings for an open Python buffer, as `amplint FILE` reports them.

The CLI builds the project model of a linted file's whole project (its root:
the nearest folder with a `pyproject.toml`, `setup.py`, `setup.cfg` or
`.git`) and reports the findings located in that file; their causes in other
files are `Diagnostic.related`, which the editor shows as related
information. Here the same model runs with the buffer's text in place of the
saved file (`engine.crossfile.buffer_diagnostics`); the other files' text
indexes and summaries come from the cache shared with CLI runs, and while the
buffer equals the saved file the project's recorded findings are reused.

A project's file list is found once and again after a save in it (a new file
counts from its first save); the cache is kept per configuration (one load)
and saved when the model computed something new for it.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic
from .documents import Linted


class CrossFile:
    """Project file lists by root and caches by configuration, for the lint thread."""

    def __init__(self, use_cache: bool = True) -> None:
        self.use_cache = use_cache
        self._files: Dict[Tuple[Optional[str], Config], List[str]] = {}
        self._caches: Dict[Config, Any] = {}
        self._lock = threading.Lock()

    def add(self, linted: Linted, path: str) -> Linted:
        """`linted` (a Python buffer's lint) with the cross-file findings of its file added."""
        if linted.error or linted.cells:
            return linted
        cross = self.findings(path, linted.source, linted.config, linted.facts)
        if not cross:
            return linted
        from ..engine.crossfile import merge

        return dataclasses.replace(linted, diagnostics=sorted(merge(linted.diagnostics, cross), key=Diagnostic.sort_key))

    def findings(self, path: str, text: str, config: Config, facts: Any) -> List[Diagnostic]:
        """The cross-file findings located in the buffer `text` of `path`, conditions resolved
        with the project's `facts` (None: the configuration has none to resolve them with)."""
        if not path.endswith(".py") or facts is None:
            return []
        from ..engine.crossfile import buffer_diagnostics, project_root
        from ..engine.pipeline import resolve_conditions, selected_rules

        me = os.path.abspath(path)
        root = project_root(me)
        codes, rules = selected_rules(config)
        cache = self._cache(config)
        found = buffer_diagnostics(path, text, self._project_files(root, config), rules, codes, config, cache)
        if cache is not None:
            cache.save()  # writes only what the model computed anew (a read-only tree: nothing)
        return resolve_conditions(found, facts, config)

    def saved(self, path: str) -> None:
        """`path` was saved: its project's file list is found again on the next lint."""
        from ..engine.crossfile import project_root

        root = project_root(os.path.abspath(path))
        with self._lock:
            for key in [k for k in self._files if k[0] == root]:
                del self._files[key]

    def _project_files(self, root: Optional[str], config: Config) -> List[str]:
        if root is None:
            return []  # a file outside any project is its own project (the buffer itself)
        key = (root, config)
        with self._lock:
            found = self._files.get(key)
        if found is None:
            from ..engine.discovery import discover

            found = sorted({os.path.abspath(p) for p in discover([root], config) if p.endswith(".py")})
            with self._lock:
                self._files[key] = found
        return found

    def _cache(self, config: Config) -> Any:
        if not self.use_cache:
            return None
        with self._lock:
            cache = self._caches.get(config)
            if cache is None:
                from ..engine.parallel import open_cache

                cache = self._caches[config] = open_cache(config)
            return cache
