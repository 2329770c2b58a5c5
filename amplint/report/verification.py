"""`--verify` in the text report: the verdict under each finding, the reference
experiment once per rule, and a closing verdict count.

A verdict about the user's code (`method: snippet`) is one line. When only the
rule's reference experiment could run, the verdict is `inconclusive` and what
the reference showed goes on its own `reference:` line, printed under the first
finding of that rule with that result and not repeated: it is the rule's
evidence, the same for every finding, not a result about each of them.
Strings are printed on one line each: newlines and control characters in a
verdict (which may quote the user's code or its errors) are escaped here.
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Set, Tuple

from ..core.diagnostics import Diagnostic

VERDICTS = ("confirmed", "not-reproduced", "inconclusive", "error")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(value: object, limit: int = 400) -> str:
    """`value` as printable text on one line (control characters as \\xNN escapes)."""
    text = _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 0x100 else "\\u%04x" % ord(m.group()), str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(v: dict) -> str:
    parts = [v.get("device"), f"torch {v['torch']}" if v.get("torch") else None]
    return ", ".join(one_line(p, 80) for p in parts if p)


def _evidence_text(summary: object, evidence: object) -> str:
    if summary:
        return one_line(summary)
    if isinstance(evidence, dict):
        return one_line(", ".join(f"{k}={val}" for k, val in evidence.items()))
    return ""


def verdict_line(v: dict) -> str:
    """`verify: <verdict> (<reason>) [<method>] <summary> (<device>, torch <version>)`."""
    reason = f" ({one_line(v['reason'], 300)})" if v.get("reason") else ""
    parts = [f"verify: {one_line(v.get('verdict', '?'), 20)}{reason}"]
    if v.get("method"):
        parts.append(f"[{one_line(v['method'], 20)}]")
    # a reference-only verdict's evidence is the reference's: shown on the reference line
    text = _evidence_text(v.get("summary"), None if v.get("reference") else v.get("evidence"))
    if text:
        parts.append(text)
    where = _where(v)
    if where:
        parts.append(f"({where})")
    return "    " + " ".join(parts)


def reference_line(code: str, ref: dict) -> str:
    text = _evidence_text(ref.get("summary"), ref.get("evidence"))
    return f"    reference {one_line(code, 12)}: {one_line(ref.get('verdict', '?'), 20)} on the rule's own example, not this code" + (
        f": {text}" if text else ""
    )


class VerificationLines:
    """Lines under each finding: one verdict line each, and a reference result only the
    first time the rule shows it (later findings of the rule share it)."""

    def __init__(self) -> None:
        self._shown: Set[Tuple[str, str, str]] = set()

    def lines(self, d: Diagnostic) -> List[str]:
        v = d.verification
        if not isinstance(v, dict) or not v:
            return []
        out = [verdict_line(v)]
        ref = v.get("reference")
        if isinstance(ref, dict):
            key = (d.code, str(ref.get("verdict")), str(ref.get("summary")))
            if key not in self._shown:
                self._shown.add(key)
                out.append(reference_line(d.code, ref))
        return out


def verdict_summary(diagnostics: Sequence[Diagnostic]) -> Optional[str]:
    """`Verified N findings: a confirmed, b not-reproduced, c inconclusive, d error; k ran the user's code.`"""
    verdicts = [d.verification for d in diagnostics if isinstance(d.verification, dict)]
    if not verdicts:
        return None
    counts = {name: 0 for name in VERDICTS}
    for v in verdicts:
        counts[v.get("verdict")] = counts.get(v.get("verdict"), 0) + 1
    ran = sum(1 for v in verdicts if v.get("method") == "snippet")
    n = len(verdicts)
    other = sum(c for k, c in counts.items() if k not in VERDICTS)
    parts = [f"{counts[k]} {k}" for k in VERDICTS] + ([f"{other} unknown"] if other else [])
    return f"Verified {n} finding{'s' if n != 1 else ''}: {', '.join(parts)}; {ran} ran the user's code."
