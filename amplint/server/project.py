"""Which configuration an open document gets, and the project facts of the
files around it, so the editor shows what `amplint PATH` would.

A document's configuration is the nearest `amplint.toml`, or `pyproject.toml`
with a `[tool.amplint]` table, walking up from its folder (the CLI's lookup,
plus the bare file `--config` accepts). Project facts (fp16 anywhere, an
autocast region, ...) decide conditional findings; they are read once per
project root through the CLI's cache (`.amplint_cache`, shared with CLI runs)
and kept per file, so the open buffer's own facts replace its saved file's.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..core.config import Config, ConfigError, load_config
from ..model.facts import FileFacts, ProjectFacts

CONFIG_NAMES = ("amplint.toml", "pyproject.toml")


def find_config_file(path: str) -> Optional[Path]:
    """The nearest amplint.toml, or pyproject.toml with [tool.amplint], above `path`."""
    folder = Path(path).resolve().parent
    for candidate in (folder, *folder.parents):
        bare = candidate / "amplint.toml"
        if bare.is_file():
            return bare
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and _names_amplint(pyproject):
            return pyproject
    return None


_NAMES_AMPLINT: Dict[Tuple[str, int, int], bool] = {}


def _names_amplint(pyproject: Path) -> bool:
    """Whether a pyproject.toml has [tool.amplint] (or is broken: reported rather than skipped);
    read again only when the file changes (the server asks on every keystroke)."""
    from ..core.config import _read_toml

    st = pyproject.stat()
    key = (str(pyproject), st.st_mtime_ns, st.st_size)
    known = _NAMES_AMPLINT.get(key)
    if known is None:
        try:
            known = "amplint" in _read_toml(pyproject).get("tool", {})
        except ConfigError:
            known = True
        if len(_NAMES_AMPLINT) > 256:
            _NAMES_AMPLINT.clear()
        _NAMES_AMPLINT[key] = known
    return known


class Projects:
    """Configurations by file (re-read when the file changes) and facts by project root."""

    def __init__(self, workspace_root: Optional[str] = None, use_cache: bool = True) -> None:
        self.workspace_root = workspace_root
        self.use_cache = use_cache
        self._configs: Dict[str, Tuple[float, Config]] = {}
        self._facts: Dict[str, Dict[str, FileFacts]] = {}
        self._others: Dict[Tuple[Optional[str], str], ProjectFacts] = {}  # (root, file) -> the rest's facts
        self._lock = threading.Lock()

    def config_for(self, path: str) -> Config:
        """Raises ConfigError for a broken configuration file (the server shows it)."""
        from ..engine.pipeline import known_codes

        found = find_config_file(path)
        if found is None:
            root = self._root_of(path)
            cached = self._configs.get(f"<default {root}>")
            if cached is None:  # one object per root: the server's incremental re-lint keys on it
                cached = self._configs[f"<default {root}>"] = (0.0, Config(root=root))
            return cached[1]
        key = str(found)
        mtime = found.stat().st_mtime
        cached = self._configs.get(key)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        config = load_config(found, known_codes())
        self._configs[key] = (mtime, config)
        return config

    def _root_of(self, path: str) -> Optional[str]:
        """Without a configuration file the workspace folder holding `path` is the project."""
        root = self.workspace_root
        if root and os.path.abspath(path).startswith(os.path.abspath(root) + os.sep):
            return os.path.abspath(root)
        return None

    def facts_for(self, path: str, own: FileFacts, config: Config) -> ProjectFacts:
        """The project's facts with `own` (the buffer's) in place of the saved file's."""
        me = os.path.abspath(path)
        key = (config.root, me)
        rest = self._others.get(key)
        if rest is None:  # once per file and root, not per keystroke (a project has thousands)
            others = self.file_facts(config)
            rest = ProjectFacts.from_files([f for p, f in others.items() if p != me])
            with self._lock:
                self._others[key] = rest
        merged = FileFacts(**dataclasses.asdict(rest))  # the same fields
        return ProjectFacts.from_files([merged, own])

    def file_facts(self, config: Config) -> Dict[str, FileFacts]:
        """Every project file's facts, read once per root (through the CLI's cache)."""
        root = config.root
        if root is None:
            return {}
        with self._lock:
            known = self._facts.get(root)
            if known is None:
                known = self._facts[root] = _read_facts(root, config, self.use_cache)
            return known

    def refresh(self, path: str, config: Config) -> None:
        """`path` was saved: its facts on disk are read again."""
        root = config.root
        me = os.path.abspath(path)
        with self._lock:
            known = self._facts.get(root) if root else None
            if known is not None:
                from ..engine.parallel import facts_of_path

                known[me] = facts_of_path(me, config).facts
            self._others = {k: v for k, v in self._others.items() if k[0] != root}


def _read_facts(root: str, config: Config, use_cache: bool) -> Dict[str, FileFacts]:
    from ..engine.discovery import discover
    from ..engine.parallel import lint_files, open_cache

    files: List[str] = [os.path.abspath(f) for f in discover([root], config)]
    cache = open_cache(config) if use_cache else None
    results = lint_files(files, config, (), frozenset(), jobs=1, cache=cache, kind="facts")
    if cache is not None:
        try:
            cache.save()
        except OSError:  # a read-only checkout: the facts are still right
            pass
    return {f: r.facts for f, r in zip(files, results) if r is not None}
