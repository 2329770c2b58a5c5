"""`amplint --explain [CODE]`: a rule's documentation, or a table of every rule."""
from __future__ import annotations

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


def explain_text(code: Optional[str]) -> str:
    if not code:
        return rule_table()
    rule = rules_by_code().get(code.strip().upper())
    if rule is None:
        from .watch.codes import RUNTIME_RULES

        meta = RUNTIME_RULES.get(code.strip().upper())
        if meta is not None:
            return f"{code.strip().upper()} {meta['name']} ({meta['severity']}, reported by `amplint run`)\n\n{meta['docs']}"
    if rule is None and code.strip().upper() in _pseudo():
        meta = _pseudo()[code.strip().upper()]
        default = ", off by default" if code.strip().upper() == "AMP900" else ""
        return f"{code.strip().upper()} {meta['name']} ({meta['severity']}{default})\n\n{meta['summary']}\nSee docs/configuration.md.\n"
    if rule is None:
        import difflib

        hint = difflib.get_close_matches(code.upper(), list(rules_by_code()), n=1)
        raise KeyError(f"unknown rule code {code!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
    header = f"{rule.code} {rule.name} ({rule.severity.value}{'' if rule.is_default() else ', off by default'})"
    return f"{header}\n\n{rule.docs()}\n"
