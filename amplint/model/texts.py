"""The project's files as text, for the few conditions decided when diagnostics are resolved
(after the cache: `model/facts.py` reads whether a script can meet fp16, `model/kernels.py` the
C++/CUDA source of a kernel). Text only, never imported; a project's listing is reused for
`_FRESH` seconds (a long-running server sees new files), a file's text while its stat is the same."""
from __future__ import annotations

import os
import re
import time
from typing import Dict, Iterable, List, Optional, Tuple

from ..core.roots import ROOT_MARKERS, holds_any, nearest_marked

#: folders never searched (build outputs, vendored trees, environments)
_SKIPPED_DIRS = frozenset(("build", "dist", "node_modules", "__pycache__", "third_party", "3rdparty", "site-packages", "venv"))
#: limits that keep a big tree cheap: files listed, bytes read per file
_MAX_FILES = 4000
_MAX_BYTES = 1 << 20
_FRESH = 5.0
#: how many folders `project_root` asks, the file's own included
_ROOT_LEVELS = 8
#: a script's `if __name__ == "__main__":` block
MAIN_GUARD = re.compile(r"^if\s+__name__\s*==\s*['\"]__main__['\"]\s*:", re.M)

_listings: Dict[Tuple[str, Tuple[str, ...]], Tuple[float, List[str]]] = {}
_texts: Dict[Tuple[str, int, int], str] = {}


def project_root(filename: Optional[str], root: Optional[str] = None) -> Optional[str]:
    """`root`, else the nearest folder above `filename` holding a project marker, else its
    folder; None for a text that is no file on disk (`lint_source`, stdin)."""
    if root:
        return os.path.abspath(root)
    if not filename or not os.path.isfile(filename):
        return None
    folder = os.path.dirname(os.path.abspath(filename))
    return nearest_marked(folder, lambda here: holds_any(here, ROOT_MARKERS), _ROOT_LEVELS) or folder


def project_files(base: str, suffixes: Tuple[str, ...]) -> List[str]:
    """The files under `base` whose names end with one of `suffixes` (hidden and build folders
    left out; at most `_MAX_FILES`)."""
    now = time.monotonic()
    key = (base, suffixes)
    cached = _listings.get(key)
    if cached is not None and now - cached[0] < _FRESH:
        return cached[1]
    found: List[str] = []
    stack = [base]
    while stack and len(found) < _MAX_FILES:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIPPED_DIRS:
                        stack.append(entry.path)
                elif entry.name.endswith(suffixes) and entry.is_file(follow_symlinks=False):
                    found.append(entry.path)
            except OSError:
                continue
    _listings[key] = (now, found)
    return found


def whole_listing(base: str, suffixes: Tuple[str, ...]) -> Optional[List[str]]:
    """`project_files`, or None when the listing was cut at its limit (`_MAX_FILES`): a question
    that needs every file of the project (an importer, a resume, a precision named anywhere)
    cannot be answered from part of it."""
    listing = project_files(base, suffixes)
    return None if len(listing) >= _MAX_FILES else listing


def files_stamp(files: Iterable[str]) -> int:
    """The files' names, times and sizes (those that can be stat'ed), hashed: what is computed
    from their texts is reused while none changed (a server, a test rewriting a file within the
    listing's freshness)."""
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return hash(tuple(out))


def read_text(path: Optional[str]) -> Optional[str]:
    """The file's text (its first `_MAX_BYTES`), None when it cannot be read."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    text = _texts.get(key)
    if text is None:
        try:
            with open(path, "rb") as f:
                text = f.read(_MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            return None
        if len(_texts) > 20000:
            _texts.clear()
        _texts[key] = text
    return text
