"""The walk up from a folder to the nearest one that is marked: a project root, a checkout.

`ROOT_MARKERS` are the files whose presence makes a folder a project root, as the cross-file
pass (`engine/crossfile.py`) and the text-level conditions (`model/texts.py`) both find one."""
from __future__ import annotations

import itertools
import os
from typing import Callable, Optional, Sequence

#: files whose presence makes a folder a project root
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def nearest_marked(folder: str, marked: Callable[[str], bool], levels: Optional[int] = None) -> Optional[str]:
    """`folder`, or the nearest folder above it, that is `marked`, asking at most `levels`
    folders (`folder` included; None: up to the file system's root); None when none is."""
    here = folder
    for _ in range(levels) if levels is not None else itertools.count():
        if marked(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
    return None


def holds_any(folder: str, names: Sequence[str]) -> bool:
    """Whether `folder` holds a file (or folder) of one of `names`."""
    return any(os.path.exists(os.path.join(folder, name)) for name in names)
