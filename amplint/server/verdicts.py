"""Cached `--verify` verdicts on the findings the server publishes.

`amplint --verify` keeps each verdict in the project's cache folder
(`verify/store.py`), valid only for the file content it ran on. After each
lint the server looks the buffer's findings up there: a finding with a verdict
gets it as `Diagnostic.verification` (the message ends with `[verify: VERDICT]`,
the diagnostic's `data.verification` holds the record, and hover shows the
evidence line). Any edit of the buffer changes its digest, so the verdicts
disappear until the code is verified again (or the edit is undone).
Reading the store imports no torch.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, Optional

from ..core.diagnostics import Diagnostic
from ..report.verification import one_line, verdict_line
from .documents import Linted


class Verdicts:
    """One verdict store per cache folder, re-read when a `--verify` run rewrote it."""

    def __init__(self) -> None:
        self._stores: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def attach(self, linted: Linted, path: str) -> Linted:
        """`linted` with each finding that has a cached verdict carrying it."""
        if linted.error or not linted.diagnostics:
            return linted
        from ..verify.store import content_digest

        store = self._store(linted.config)
        store.reload()
        if not store.entries:
            return linted
        digest = content_digest(path, linted.source)
        out = []
        for d in linted.diagnostics:
            found = store.lookup(d, digest)
            out.append(dataclasses.replace(d, verification=found) if found is not None else d)
        return dataclasses.replace(linted, diagnostics=out)

    def _store(self, config: Any) -> Any:
        from ..engine.cache import cache_dir
        from ..verify.store import VerdictStore

        folder = cache_dir(None, config.root)
        with self._lock:
            store = self._stores.get(folder)
            if store is None:
                store = self._stores[folder] = VerdictStore(folder)
            return store


def message_suffix(d: Diagnostic) -> str:
    """` [verify: confirmed]` after a verified finding's message; "" otherwise."""
    v = d.verification
    if not isinstance(v, dict) or not v.get("verdict"):
        return ""
    return f" [verify: {one_line(v['verdict'], 20)}]"


def data_of(d: Diagnostic) -> Optional[Dict[str, Any]]:
    """The verdict as the diagnostic's `data.verification` (strings on one line)."""
    v = d.verification
    if not isinstance(v, dict) or not v.get("verdict"):
        return None
    return {k: one_line(v[k], 300) for k in ("verdict", "reason", "method", "summary", "device", "torch") if v.get(k)}


def hover_line(d: Diagnostic) -> Optional[str]:
    """The verdict's one line (verdict, reason, method, evidence, environment), plain text."""
    v = d.verification
    if not isinstance(v, dict) or not v.get("verdict"):
        return None
    return verdict_line(v).strip()
