"""BLAKE2b and a constant-time comparison, without loading OpenSSL.

`hashlib` and `hmac` load OpenSSL's libcrypto when imported (`_hashlib`, ~4 ms of a
0.3 s warm run), though `hashlib.blake2b` is CPython's own `_blake2.blake2b` (hashlib
prefers it to OpenSSL's). The cache (its store's MAC, file digests, the code
fingerprint) needs only that, so it is taken from `_blake2` directly where the
interpreter has it, else from hashlib; the comparison is `hmac.compare_digest`'s
own implementation (`_operator._compare_digest`).
"""
from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover  (an interpreter without CPython's _blake2)
    from hashlib import blake2b

try:
    from _operator import _compare_digest as compare_digest
except ImportError:  # pragma: no cover
    from hmac import compare_digest

__all__ = ["blake2b", "compare_digest", "text_digest"]


def text_digest(text: str) -> str:
    """A digest of a decoded text (what was linted: the fix check tells the same text by it)."""
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
