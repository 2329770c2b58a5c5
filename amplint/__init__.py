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
    "Config": ".core.config",
    "ConfigError": ".core.config",
    "Applicability": ".core.diagnostics",
    "Diagnostic": ".core.diagnostics",
    "Edit": ".core.diagnostics",
    "Fix": ".core.diagnostics",
    "Location": ".core.diagnostics",
    "Related": ".core.diagnostics",
    "Severity": ".core.diagnostics",
    "LintResult": ".engine.run",
    "lint_paths": ".engine.run",
    "lint_source": ".engine.run",
    "AUTOCAST": ".model.facts",
    "AUTOCAST_OR_LIBRARY": ".model.facts",
    "FP16": ".model.facts",
    "Invalid": ".core.rule",
    "Rule": ".core.rule",
    "Valid": ".core.rule",
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
    from .core.config import Config, ConfigError
    from .core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Related, Severity
    from .core.rule import Invalid, Rule, Valid
    from .engine.run import LintResult, lint_paths, lint_source
    from .model.facts import AUTOCAST, AUTOCAST_OR_LIBRARY, FP16
