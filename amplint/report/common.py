"""Helpers the CI formats share: repository-relative paths and rule metadata."""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Type

from ..core.diagnostics import Diagnostic, Severity

#: the engine's pseudo-rules, which have no Rule class
PSEUDO_RULES: Dict[str, Dict[str, str]] = {
    "AMP000": {
        "name": "syntax-error",
        "severity": "error",
        "message": "file cannot be parsed or read",
        "summary": "The file could not be read or parsed, so nothing in it was checked.",
    },
    "AMP900": {
        "name": "unused-noqa",
        "severity": "warning",
        "message": "unused `noqa` directive",
        "summary": "A `# noqa: AMPxxx` comment that suppresses nothing (enable with `--extend-select AMP900`).",
    },
}


def relative_path(filename: str, root: Optional[str] = None) -> str:
    """`filename` relative to `root` (default: the current folder) with `/`; absolute if outside it."""
    if filename.startswith("<") or filename == "-":
        return filename
    base = os.path.abspath(root or os.getcwd())
    full = os.path.abspath(filename)
    try:
        rel = os.path.relpath(full, base)
    except ValueError:  # another drive on Windows
        return full.replace(os.sep, "/")
    if rel == ".." or rel.startswith(".." + os.sep):
        return full.replace(os.sep, "/")
    return rel.replace(os.sep, "/")


def rule_classes(rules: Optional[Sequence[Type]] = None) -> Dict[str, Type]:
    if rules is None:
        from ..engine.registry import all_rules

        rules = all_rules()
    return {r.code: r for r in rules}


def severity_of(d: Diagnostic) -> Severity:
    return d.severity if isinstance(d.severity, Severity) else Severity(d.severity)
