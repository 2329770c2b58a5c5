"""amplint: a static linter for PyTorch mixed-precision (AMP) pitfalls.

The public API, for rules, plugins and tools that embed amplint. Importing it
never imports torch; libcst is imported only when something is parsed. The
names below load on first use (PEP 562), so `amplint --version` and runs that
parse nothing start fast.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .__version__ import __version__

_EXPORTS = {
    "Config": ".config",
    "ConfigError": ".config",
    "Applicability": ".diagnostics",
    "Diagnostic": ".diagnostics",
    "Edit": ".diagnostics",
    "Fix": ".diagnostics",
    "Location": ".diagnostics",
    "Severity": ".diagnostics",
    "LintResult": ".engine",
    "lint_paths": ".engine",
    "lint_source": ".engine",
    "AUTOCAST": ".project",
    "FP16": ".project",
    "Invalid": ".rule",
    "Rule": ".rule",
    "Valid": ".rule",
}

__all__ = ["__version__", "watch", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    if name == "watch":  # the runtime guard's package, callable: `with amplint.watch(DIR):` (amplint/watch/)
        import importlib

        return importlib.import_module(".watch", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amplint' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS) | {"watch"})


if TYPE_CHECKING:  # pragma: no cover
    from .config import Config, ConfigError
    from .diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
    from .engine import LintResult, lint_paths, lint_source
    from .project import AUTOCAST, FP16
    from .rule import Invalid, Rule, Valid
