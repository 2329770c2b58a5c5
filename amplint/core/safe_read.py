"""Read a file from the linted tree only when it is a regular file.

A linted repository may hold anything under a `.py` name (or under
`.gitignore`, `.git`, a cache store's name): a named pipe, whose `open()`
blocks until a writer comes (forever), a socket, or a device such as
`/dev/zero` (endless) or one whose opening alone has an effect. So the path is
`stat`ed first and anything but a regular file is refused without being
opened (`NotRegularFile`, whose text names what it is); a regular file is then
opened non-blocking and checked again on the open descriptor, so one swapped
for a pipe in between is refused too and never waited on.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class NotRegularFile(OSError):
    """The path names a pipe, a socket or a device: never read."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({what})", path)
        self.what = what


def what_is(mode: int) -> Optional[str]:
    """None for a regular file, else what the file is, in words."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _refuse(path: str, mode: int) -> None:
    what = what_is(mode)
    if what == "a directory":
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if what is not None:
        raise NotRegularFile(path, what)


def read_bytes(path: str, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file `path`; OSError otherwise. `follow_symlinks=False`: a
    symbolic link at `path` is refused too (NotRegularFile, "a symbolic link"), for the
    files amplint keeps itself (cache stores), which a repository may plant as links."""
    if follow_symlinks:
        _refuse(path, os.stat(path).st_mode)
        fd = os.open(path, _FLAGS)
    else:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise NotRegularFile(path, "a symbolic link")
        _refuse(path, mode)
        fd = os.open(path, _FLAGS | getattr(os, "O_NOFOLLOW", 0))
    try:
        _refuse(path, os.fstat(fd).st_mode)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def read_text(path: str) -> str:
    """`read_bytes` decoded as UTF-8, undecodable bytes replaced (for small metadata files)."""
    return read_bytes(path).decode("utf-8", "replace")
