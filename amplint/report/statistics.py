"""`--statistics`: how many findings of each code, most frequent first (ruff's layout)."""
from __future__ import annotations

import json
from typing import Dict, List, Sequence

from ..core.diagnostics import Diagnostic
from .text import fix_available


def rows(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False) -> List[dict]:
    groups: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(d.code, []).append(d)
    out = [
        {
            "code": code,
            "name": found[0].name,
            "count": len(found),
            "fixable": any(fix_available(d, unsafe_fixes) for d in found),
        }
        for code, found in groups.items()
    ]
    out.sort(key=lambda r: (-r["count"], r["code"]))
    return out


def render(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False, output_format: str = "text", **_: object) -> str:
    table = rows(diagnostics, unsafe_fixes)
    if output_format in ("json", "json-lines"):
        return json.dumps(table, indent=2) + "\n"
    if not table:
        return ""
    count_w = max(len(str(r["count"])) for r in table)
    code_w = max(len(r["code"]) for r in table)
    return "".join(
        f"{r['count']:>{count_w}}\t{r['code']:<{code_w}}\t{'[*]' if r['fixable'] else '[ ]'} {r['name']}\n" for r in table
    )
