"""`path:line:col: CODE message [*]`, a source excerpt, and a summary line."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..diagnostics import Diagnostic


def location(d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.filename}:{cell}{d.location.row}:{d.location.column}"


def headline(d: Diagnostic) -> str:
    mark = " [*]" if d.fixable else ""
    return f"{location(d)}: {d.code}{mark} {d.message}"


def verification_line(d: Diagnostic) -> Optional[str]:
    v = d.verification
    if not v:
        return None
    verdict = v.get("verdict", "?")
    reason = f" ({v['reason']})" if v.get("reason") else ""
    evidence = v.get("summary") or ", ".join(f"{k}={val}" for k, val in (v.get("evidence") or {}).items())
    where = ", ".join(x for x in (v.get("device"), f"torch {v['torch']}" if v.get("torch") else None) if x)
    method = v.get("method")
    parts = [f"verify: {verdict}{reason}"]
    if method:
        parts.append(f"[{method}]")
    if evidence:
        parts.append(evidence)
    if where:
        parts.append(f"({where})")
    return "    " + " ".join(parts)


def summary(diagnostics: Sequence[Diagnostic], fixed: int = 0) -> str:
    n = len(diagnostics)
    lines = []
    if fixed:
        lines.append(f"Fixed {fixed} error{'s' if fixed != 1 else ''}.")
    if n:
        lines.append(f"Found {n} error{'s' if n != 1 else ''}.")
        fixable = sum(1 for d in diagnostics if d.fixable)
        if fixable:
            lines.append(f"[*] {fixable} fixable with the `--fix` option.")
    elif not fixed:
        lines.append("All checks passed!")
    return "\n".join(lines)


def render(diagnostics: Sequence[Diagnostic], fixed: int = 0, **_: object) -> str:
    out: List[str] = []
    for d in diagnostics:
        out.append(headline(d))
        v = verification_line(d)
        if v:
            out.append(v)
    out.append(summary(diagnostics, fixed))
    return "\n".join(out) + "\n"
