"""`amplint --explain [CODE]`: a rule's documentation, or a table of every rule."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from .engine.registry import all_rules, rules_by_code


def rule_table() -> str:
    rows = [f"{'code':<8}{'name':<42}{'severity':<9}default"]
    for r in all_rules():
        rows.append(f"{r.code:<8}{r.name:<42}{r.severity.value:<9}{'on' if r.is_default() else 'off'}")
    return "\n".join(rows)


def _pseudo() -> dict:
    """The engine's codes without a rule class (AMP000 syntax-error, AMP900 unused-noqa)."""
    from .report.common import PSEUDO_RULES

    return PSEUDO_RULES


def _by_name(name: str) -> Optional[str]:
    """The code of the rule (or pseudo-rule) called `name` (`clip-grad-before-unscale`)."""
    name = name.strip().lower()
    for r in all_rules():
        if r.name == name:
            return r.code
    return next((code for code, meta in _pseudo().items() if meta["name"] == name), None)


def explain_text(code: Optional[str]) -> str:
    if not code:
        return rule_table()
    code = _by_name(code) or code
    rule = rules_by_code().get(code.strip().upper())
    if rule is None:
        from .watch.codes import RUNTIME_RULES

        meta = RUNTIME_RULES.get(code.strip().upper())
        if meta is not None:
            return f"{code.strip().upper()} {meta['name']} ({meta['severity']}, reported by `amplint run`)\n\n{meta['docs']}"
    if rule is None and code.strip().upper() in _pseudo():
        meta = _pseudo()[code.strip().upper()]
        default = ", off by default" if code.strip().upper() == "AMP900" else ""
        return f"{code.strip().upper()} {meta['name']} ({meta['severity']}{default})\n\n{meta['summary']}\n"
    if rule is None:
        import difflib

        names = [r.name for r in all_rules()]
        hint = difflib.get_close_matches(code.upper(), list(rules_by_code()), n=1) or difflib.get_close_matches(code.lower(), names, n=1)
        raise KeyError(f"unknown rule code or name {code!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
    header = f"{rule.code} {rule.name} ({rule.severity.value}{'' if rule.is_default() else ', off by default'})"
    evidence = evidence_section(rule.code)
    tail = f"\n## Evidence (measured)\n{evidence}\n" if evidence else ""
    return f"{header}\n\n{rule.docs()}\n{tail}"


def evidence_text() -> Optional[str]:
    """docs/evidence.md: shipped in the package as `amplint/_evidence/evidence.md`,
    read from the checkout's docs/ when running from source."""
    here = Path(__file__).resolve().parent
    for path in (here / "_evidence" / "evidence.md", here.parent / "docs" / "evidence.md"):
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def evidence_section(code: str) -> Optional[str]:
    """The `## CODE` section of the evidence page, without its heading."""
    text = evidence_text()
    if text is None:
        return None
    m = re.search(rf"^## {re.escape(code)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else None
