"""One path on disk to its per-file linter: Python source (`pipeline.py`) or a
notebook (`notebook.py`)."""
from __future__ import annotations

import sys
from typing import FrozenSet, Optional, Sequence, Type

from ..core.config import Config
from ..core.rule import Rule
from .pipeline import UNREADABLE, FileResult, SYNTAX_ERROR_CODE, lint_file_source, read_file, syntax_error


def lint_path(path: str, config: Config, rules: Sequence[Type[Rule]], codes: FrozenSet[str], data: Optional[bytes] = None) -> FileResult:
    """`data`: the file's bytes when the caller has read them already (a Python file)."""
    if path.lower().endswith(".ipynb"):
        from .notebook import lint_notebook_path

        return lint_notebook_path(path, config, rules, codes)
    source, problem = read_file(path, data)
    if source is None:
        result = FileResult(path=path, read=UNREADABLE)
        if SYNTAX_ERROR_CODE in codes:
            result.diagnostics.append(syntax_error(path, 1, 1, f"cannot lint: {problem}"))
        return result
    from ..core.pyast import remembered

    with remembered():  # one `ast` parse of the text for the docstring look, the wrapper rules, the summaries
        return _lint_python(path, source, config, rules, codes)


def _lint_python(path: str, source: str, config: Config, rules: Sequence[Type[Rule]], codes: FrozenSet[str]) -> FileResult:
    result = lint_file_source(source, path, config, rules, codes)
    if any(d.fix is not None for d in result.diagnostics):
        from ..core.digest import text_digest

        result.source_digest = text_digest(source)  # the fix check's first lint is this one
    if path.endswith(".py"):
        from ..model.project import text_index

        result.index = text_index(source)  # for the project model (crossfile.py), cached with the result
        wrappers = sys.modules.get("amplint.model.project.wrappers")  # imported when a wrapper rule ran
        if wrappers is not None:
            result.summaries = wrappers.made_for(path, source)
        roles = result.index["r"]
        if result.summaries is None and roles:
            from .crossfile import summaries_ahead

            result.summaries = summaries_ahead(source, roles, rules)
    return result
