"""amplint: a static linter for PyTorch mixed-precision (AMP) pitfalls.

The public API, for rules, plugins and tools that embed amplint. Importing it
never imports torch; libcst is imported only when something is parsed.
"""
from .__version__ import __version__
from .config import Config, ConfigError
from .diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
from .engine import LintResult, lint_paths, lint_source
from .project import AUTOCAST, FP16
from .rule import Invalid, Rule, Valid

__all__ = [
    "__version__",
    "Applicability",
    "Config",
    "ConfigError",
    "Diagnostic",
    "Edit",
    "Fix",
    "FP16",
    "AUTOCAST",
    "Invalid",
    "LintResult",
    "Location",
    "Rule",
    "Severity",
    "Valid",
    "lint_paths",
    "lint_source",
]
