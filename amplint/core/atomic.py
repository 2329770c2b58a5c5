"""Replacing a file atomically: a reader sees the old bytes or the new ones, never half a file.

The bytes go to a temporary file in the target's own folder (a rename is atomic only within
one file system), are flushed and fsynced (so a crash just after the rename cannot leave an
empty file under the old name), get the permission bits, and the temporary file is renamed
over the target (`os.replace`). On any failure the temporary file is removed and the target
is untouched. Fixed sources (`fix/writer.py`) and cache stores (`engine/cache.py`) are
written this way; a cache store skips the fsync (`durable=False`): a store torn by a crash
fails its MAC and is only rebuilt, and the fsync of a 2 MB store is a visible part of a
one-file run.
"""
from __future__ import annotations

import os
import stat


def replace_atomically(path: str, data: bytes, follow_symlinks: bool = False, keep_mode: bool = True, durable: bool = True) -> None:
    """Replace the file at `path` with `data`.

    keep_mode: the new file gets the old one's permission bits (a fixed source keeps its
    executable bit); otherwise, or when there is no old file, the bits `open` would give a
    new file under the umask (`mkstemp` alone would make it 0600).
    follow_symlinks: write the file a symbolic link points to, keeping the link (a fixed
    source); otherwise a link at `path` is itself replaced, never written through (a cache
    store in a linted tree must not write where a planted link points).
    durable: fsync the bytes before the rename (see above for who may skip it).
    """
    import tempfile  # here: a run that writes nothing does not import it (and shutil, random)

    target = os.path.realpath(path) if follow_symlinks else path
    folder = os.path.dirname(target) or "."
    mode = None
    if keep_mode:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            pass
        else:
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
    if mode is None:
        mode = _new_file_mode()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".amplint-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _new_file_mode() -> int:
    umask = os.umask(0)  # the only way to read it
    os.umask(umask)
    return 0o666 & ~umask
