"""The paths a git checkout tracks, read from its index file (`.git/index`), without git.

Git never ignores a tracked file: a `.gitignore` pattern only hides files git does not
already track. Projects do ship ignore files that match tracked code (`**/sat` above a
tracked `sat/` folder, `test*` above tracked tests), so a walk that applied the patterns
alone would skip code every clone holds. Discovery asks this module which paths are
tracked and lints those whatever the patterns say.

The index format (versions 2, 3 and 4, including v4's prefix-compressed names and a
sparse index's folder entries) is read as git's `Documentation/gitformat-index.txt`
describes it; extensions after the entries are not needed and not read. A missing,
unreadable or malformed index gives None: the walk then applies the patterns alone, as
before (an exported tree with no index, a folder that is not a checkout).
"""
from __future__ import annotations

import os
import struct
from typing import Dict, FrozenSet, Optional, Tuple

#: the largest index read (bytes): a bigger one is left unread (patterns alone apply)
MAX_INDEX_BYTES = 64 * 1024 * 1024


class Tracked:
    """The tracked files of one work tree and every folder above one (absolute paths)."""

    __slots__ = ("files", "folders")

    def __init__(self, files: FrozenSet[str], folders: FrozenSet[str]):
        self.files = files
        self.folders = folders


def parse_index(data: bytes) -> Optional[Tuple[str, ...]]:
    """The entry names of an index (`/`-separated, relative to the work tree), or None when
    `data` is not an index this reader knows."""
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return None
    names = []
    pos = 12
    previous = b""
    try:
        for _ in range(count):
            start = pos
            flags = struct.unpack(">H", data[pos + 60 : pos + 62])[0]
            pos += 62
            if version >= 3 and flags & 0x4000:
                pos += 2  # extended flags
            if version == 4:
                strip, pos = _varint(data, pos)
                end = data.index(b"\0", pos)
                name = previous[: len(previous) - strip] + data[pos:end]
                pos = end + 1
            else:
                end = data.index(b"\0", pos)
                name = data[pos:end]
                pos = start + ((end - start) // 8 + 1) * 8  # NUL padded to a multiple of 8
            if pos > len(data):
                return None
            previous = name
            names.append(os.fsdecode(name))
    except (ValueError, struct.error, IndexError):
        return None
    return tuple(names)


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    """Git's offset encoding (v4 name prefixes): 7 bits a byte, +1 on each continuation."""
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, pos


_cache: Dict[Tuple[str, int, int], Optional[Tracked]] = {}


def tracked(root: str, git_dir: Optional[str]) -> Optional[Tracked]:
    """What the index of the work tree at `root` tracks, or None (no readable index)."""
    if git_dir is None:
        return None
    path = os.path.join(git_dir, "index")
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_size > MAX_INDEX_BYTES:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    if key in _cache:
        return _cache[key]
    try:
        with open(path, "rb") as fh:
            names = parse_index(fh.read())
    except OSError:
        names = None
    result = None
    if names is not None:
        base = os.path.abspath(root)
        files = set()
        folders = set()
        for name in names:
            parts = name.rstrip("/").split("/")
            full = os.path.join(base, *parts)
            if name.endswith("/"):  # a sparse index's folder entry: all of it tracked
                folders.add(full)
            else:
                files.add(full)
            for i in range(len(parts) - 1, 0, -1):
                above = os.path.join(base, *parts[:i])
                if above in folders:
                    break
                folders.add(above)
        result = Tracked(frozenset(files), frozenset(folders))
    if len(_cache) > 16:
        _cache.clear()
    _cache[key] = result
    return result
