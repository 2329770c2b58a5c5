"""One atomic write (`core/atomic.py`) for fixed sources and cache stores: same folder, fsync,
os.replace, mode bits; links followed only where asked."""
from __future__ import annotations

import os
import stat

import pytest

from amplint.core import atomic
from amplint.core.atomic import replace_atomically


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _umask_default():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def test_replaces_keeping_the_mode_and_leaving_no_temporary_file(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    p = tmp_path / "t.py"
    p.write_bytes(b"old")
    os.chmod(p, 0o751)
    replace_atomically(str(p), b"new")
    assert p.read_bytes() == b"new" and _mode(p) == 0o751
    assert len(synced) == 1  # the bytes reach the disk before the rename
    assert os.listdir(tmp_path) == ["t.py"]


def test_a_new_file_or_keep_mode_false_gets_the_umask_mode(tmp_path):
    fresh = tmp_path / "fresh"
    replace_atomically(str(fresh), b"x")
    assert fresh.read_bytes() == b"x" and _mode(fresh) == _umask_default()
    planted = tmp_path / "planted"
    planted.write_bytes(b"old")
    os.chmod(planted, 0o777)
    replace_atomically(str(planted), b"y", keep_mode=False)
    assert _mode(planted) == _umask_default()


def test_links_are_written_through_only_when_asked(tmp_path):
    target = tmp_path / "real"
    target.write_bytes(b"old")
    link = tmp_path / "link"
    link.symlink_to(target)
    replace_atomically(str(link), b"through", follow_symlinks=True)
    assert link.is_symlink() and target.read_bytes() == b"through"
    replace_atomically(str(link), b"replaced")
    assert not link.is_symlink() and link.read_bytes() == b"replaced" and target.read_bytes() == b"through"


def test_a_failed_replace_leaves_the_target_and_no_temporary_file(tmp_path, monkeypatch):
    p = tmp_path / "store.json"
    p.write_bytes(b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError):
        replace_atomically(str(p), b"new")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["store.json"]


def test_a_link_planted_as_the_cache_store_is_replaced_not_followed(tmp_path):
    from amplint.core.config import Config
    from amplint.engine.parallel import open_cache
    from amplint.engine.run import lint_paths

    (tmp_path / "t.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("not amplint's")
    cache = open_cache(Config(), str(tmp_path / "cache"))
    os.makedirs(cache.directory)
    os.symlink(outside, cache.path)
    lint_paths([str(tmp_path / "t.py")], Config(), cache=cache)
    cache.save()
    assert outside.read_text() == "not amplint's"
    assert not os.path.islink(cache.path) and open_cache(Config(), str(tmp_path / "cache")).entries["lint"]
