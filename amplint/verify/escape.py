"""Verdicts come from code amplint does not trust: make them inert before any report sees them.

A verdict's strings can carry what the user's code put in an exception message or
printed: newlines (a forged report line, a `::error file=...` workflow command at
the start of a line), ANSI escapes (rewriting the terminal), other control and
bidi characters. `clean_verdict` rebuilds the verdict from JSON values only, with
every string escaped (`\\n`, `\\x1b`, `\\u202e` written out as text) and capped, and
the whole evidence bounded, so every output format gets one-line, printable text.
"""
from __future__ import annotations

import re
from typing import Any, Dict

#: C0 and C1 controls, DEL, line/paragraph separators, bidi embeddings/overrides/isolates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
STRING_LIMIT = 600
EVIDENCE_ITEMS = 64
EVIDENCE_DEPTH = 6


def _escape_char(match: "re.Match[str]") -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(text: str, limit: int = STRING_LIMIT) -> str:
    """One printable line: unsafe characters written as escapes, then cut to `limit`."""
    out = _UNSAFE.sub(_escape_char, text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def clean_value(value: Any, depth: int = 0) -> Any:
    """A JSON value with every string cleaned and containers bounded in size and depth."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if depth >= EVIDENCE_DEPTH:
        return "..."
    if isinstance(value, dict):
        items = list(value.items())[:EVIDENCE_ITEMS]
        return {clean_text(str(k), 80): clean_value(v, depth + 1) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [clean_value(v, depth + 1) for v in list(value)[:EVIDENCE_ITEMS]]
    return clean_text(str(value))


def clean_verdict(verdict: Dict[str, Any]) -> Dict[str, Any]:
    """The verdict dict with all keys and values made inert (the verdict word is checked upstream)."""
    return clean_value(verdict)  # type: ignore[no-any-return]
