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
from typing import List, Optional


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


# ------------------------------------------------------------------ amplint's own folders


class PlantedLink(OSError):
    """A symbolic link where amplint keeps files of its own (a cache folder, a store, its
    `.gitignore`): never written through, never read through."""

    def __init__(self, path: str) -> None:
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        super().__init__(40, f"is a symbolic link (to {target}); not followed", path)  # ELOOP
        self.target = target

    def note(self) -> str:
        return f"{self.filename} {self.strerror}"


def open_folder(directory: str, create: bool = True) -> int:
    """A descriptor of `directory`, opened without following a link in its place (PlantedLink);
    made (with its parents) when missing and `create`."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        if not create:
            raise
        parent = os.path.dirname(os.path.abspath(directory))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(directory)
        except FileExistsError:  # made by a concurrent run, or a dangling link planted meanwhile
            pass
        st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode):
        raise PlantedLink(directory)
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in (40, 20) and os.path.islink(directory):  # swapped for a link since the lstat
            raise PlantedLink(directory) from None
        raise


def write_in_folder(directory: str, name: str, data: bytes, gitignore: Optional[bytes] = None) -> List[str]:
    """Replace `directory/name` with `data` atomically, never through a symbolic link: the
    folder itself must not be one (PlantedLink), a link at `name` is replaced (rename does not
    follow it), and the temporary file is made with O_EXCL | O_NOFOLLOW. `gitignore`: the
    content of a `.gitignore` made in the folder when it has none (a link there is left as it
    is, never followed). Returns notes on links found (for a one-line warning each)."""
    notes: List[str] = []
    fd = open_folder(directory)
    try:
        if gitignore is not None:
            try:
                st = os.lstat(".gitignore", dir_fd=fd)
            except FileNotFoundError:
                try:
                    _create(fd, ".gitignore", gitignore)
                except FileExistsError:
                    pass
            else:
                if stat.S_ISLNK(st.st_mode):
                    notes.append(PlantedLink(os.path.join(directory, ".gitignore")).note())
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                notes.append(PlantedLink(os.path.join(directory, name)).note() + ": replaced")
        except FileNotFoundError:
            pass
        tmp = f".{name}.{os.urandom(6).hex()}.amplint-tmp"
        _create(fd, tmp, data)
        try:
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    return notes


def _create(dir_fd: int, name: str, data: bytes) -> None:
    """A new file `name` in the folder `dir_fd` holding `data` (O_EXCL: never an existing one, nor a link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, 0o666, dir_fd=dir_fd)  # the umask applies
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    os.close(fd)
