"""Reading a file for fixing and writing it back exactly as it was, but fixed.

`read_source` remembers how the file was stored (encoding, BOM, newline
style); `encode` turns fixed text back into bytes the same way, so a fix
never converts a CRLF file to LF or a latin-1 file to UTF-8. `write_atomic`
replaces the file atomically (`core/atomic.py`), keeping the permission bits and
writing through symlinks, so an interrupted run never leaves a half-written file.
"""
from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass
from typing import Optional

from ..core.atomic import replace_atomically


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str  # decoded, BOM removed, newlines as in the file
    encoding: str  # the codec that decodes the file (without "-sig")
    bom: bool
    newline: Optional[str]  # "\n", "\r\n" or "\r" when the file uses one style; None when mixed or none
    size: int = 0  # the bytes read (what decides where the file is fixed: `fixer._within_bounds`)


def newline_style(text: str) -> Optional[str]:
    crlf = text.count("\r\n")
    cr = text.count("\r") - crlf
    lf = text.count("\n") - crlf
    styles = [(n, s) for n, s in ((lf, "\n"), (crlf, "\r\n"), (cr, "\r")) if n]
    if len(styles) != 1:
        return None
    return styles[0][1]


def decode(data: bytes, path: str = "<bytes>", python: bool = True) -> SourceFile:
    """Bytes -> SourceFile; Python files honour their coding cookie, others are UTF-8."""
    bom = data.startswith(codecs.BOM_UTF8)
    if python:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    else:
        encoding = "utf-8"
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    text = body.decode(encoding)
    return SourceFile(path=path, text=text, encoding=encoding, bom=bom, newline=newline_style(text), size=len(data))


def read_source(path: str, python: bool = True) -> SourceFile:
    with open(path, "rb") as fh:
        return decode(fh.read(), path, python)


def encode(text: str, like: SourceFile) -> bytes:
    """`text` as bytes in the encoding, BOM and newline style of `like`."""
    if like.newline in ("\r\n", "\r") and newline_style(text) != like.newline:
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", like.newline)
    data = text.encode(like.encoding)
    return codecs.BOM_UTF8 + data if like.bom else data


def write_atomic(path: str, data: bytes) -> None:
    """Replace the file at `path` with `data` atomically, keeping its permission bits and
    writing through a symbolic link (the link stays)."""
    replace_atomically(path, data, follow_symlinks=True)


def write_text(text: str, like: SourceFile) -> bool:
    """Write `text` over `like.path` in its original form; False (nothing written) if unchanged."""
    data = encode(text, like)
    with open(like.path, "rb") as fh:
        if fh.read() == data:
            return False
    write_atomic(like.path, data)
    return True
