"""Fixed files are written atomically and exactly as they were stored, only fixed."""
from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.engine.pipeline import decode_source
from amplint.fix.writer import decode, encode, newline_style, read_source, write_atomic, write_text

BAD = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
FIXED = BAD.replace("torch.nn.utils", "scaler.unscale_(optimizer)\ntorch.nn.utils")


def fix(path):
    return CliRunner().invoke(main, [str(path), "--isolated", "--fix", "--unsafe-fixes"])


def test_crlf_stays_crlf(tmp_path):
    p = tmp_path / "t.py"
    p.write_bytes(BAD.replace("\n", "\r\n").encode())
    assert fix(p).exit_code == 0
    assert p.read_bytes() == FIXED.replace("\n", "\r\n").encode()


def test_bom_and_coding_cookie_are_kept(tmp_path):
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + BAD.encode())
    assert fix(bom).exit_code == 0
    assert bom.read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()
    latin = tmp_path / "latin.py"
    header = "# -*- coding: latin-1 -*-\n# caf\xe9\n"
    latin.write_bytes((header + BAD).encode("latin-1"))
    assert fix(latin).exit_code == 0
    assert latin.read_bytes() == (header + FIXED).encode("latin-1")


def test_permissions_are_kept_and_no_temp_files_left(tmp_path):
    p = tmp_path / "t.py"
    p.write_text(BAD)
    os.chmod(p, 0o751)
    assert fix(p).exit_code == 0
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o751
    assert sorted(os.listdir(tmp_path)) == ["t.py"]


def test_symlinks_are_written_through(tmp_path):
    target = tmp_path / "real.py"
    target.write_text(BAD)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    assert fix(link).exit_code == 0
    assert link.is_symlink() and target.read_text() == FIXED


def test_a_failed_write_leaves_the_original(tmp_path, monkeypatch):
    p = tmp_path / "t.py"
    p.write_text(BAD)

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(str(p), b"new")
    assert p.read_text() == BAD and os.listdir(tmp_path) == ["t.py"]


def test_unwritable_file_is_an_error_not_a_crash(tmp_path, monkeypatch):
    p = tmp_path / "t.py"
    p.write_text(BAD)
    import amplint.fix.writer

    def boom(path, data):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(amplint.fix.writer, "write_atomic", boom)
    r = fix(p)
    assert r.exit_code == 2 and "not written" in r.output
    assert p.read_text() == BAD


def test_decode_matches_the_engine():
    for data in (b"x = 1\r\n", b"\xef\xbb\xbfx = 1\n", "# coding: latin-1\nx = '\xe9'\n".encode("latin-1")):
        assert decode(data).text == decode_source(data)


def test_newline_style():
    assert newline_style("a\nb\n") == "\n"
    assert newline_style("a\r\nb\r\n") == "\r\n"
    assert newline_style("a\r\nb\n") is None
    assert newline_style("a") is None


def test_encode_normalises_inserted_lines_to_the_file_style(tmp_path):
    p = tmp_path / "t.py"
    p.write_bytes(b"a = 1\r\nb = 2\r\n")
    original = read_source(str(p))
    assert encode("a = 1\r\nnew\nb = 2\r\n", original) == b"a = 1\r\nnew\r\nb = 2\r\n"
    assert write_text("a = 1\r\nb = 2\r\n", original) is False, "unchanged text is not written"
