"""Lint an editor buffer: a Python text or the code cells of a notebook, as
`amplint FILE` would lint the saved file (same pipeline, same config, same
project facts), without touching the disk."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic
from .project import Projects


@dataclass
class Linted:
    """One lint of one document: the text it saw and its findings (in the
    document's coordinates; for a notebook `Diagnostic.cell` is the cell's
    1-based position among the notebook's cells)."""

    source: str
    diagnostics: List[Diagnostic]
    config: Config
    error: Optional[str] = None  # a configuration problem, shown instead of findings
    cells: List[str] = field(default_factory=list)  # notebook: the cell document of each position


def lint_python(source: str, path: str, projects: Projects) -> Linted:
    from ..core.config import ConfigError

    try:
        config = projects.config_for(path)
    except ConfigError as exc:
        return Linted(source, [], Config(), error=str(exc))
    return Linted(source, lint_text(source, path, config, projects), config)


def lint_text(source: str, path: str, config: Config, projects: Projects) -> List[Diagnostic]:
    """The engine's per-file pipeline, conditions resolved with the project's facts."""
    from ..engine.parallel import whole_file_facts
    from ..engine.pipeline import lint_file_source, resolve_conditions, selected_rules

    codes, rules = selected_rules(config)
    result = lint_file_source(source, path, config, rules, codes)
    facts = projects.facts_for(path, whole_file_facts(result, source, config), config)
    out = resolve_conditions(result.diagnostics, facts, config)
    return sorted(out, key=Diagnostic.sort_key)


def notebook_json(cells: Sequence[Tuple[str, str]]) -> str:
    """An nbformat 4 file of (kind, text) cells, kind "code" or "markdown"."""
    data = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": text, **({"outputs": [], "execution_count": None} if kind == "code" else {})}
            for kind, text in cells
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(data, indent=1)


def lint_notebook_cells(cells: Sequence[Tuple[str, str, str]], path: str, projects: Projects) -> Linted:
    """`cells`: (cell document uri, kind, text) in notebook order."""
    from ..core.config import ConfigError
    from ..engine.notebook import lint_notebook_text
    from ..engine.pipeline import resolve_conditions, selected_rules

    raw = notebook_json([(kind, text) for _, kind, text in cells])
    uris = [uri for uri, _, _ in cells]
    try:
        config = projects.config_for(path)
    except ConfigError as exc:
        return Linted(raw, [], Config(), error=str(exc), cells=uris)
    codes, rules = selected_rules(config)
    _, result = lint_notebook_text(raw, path, config, rules, codes)
    facts = projects.facts_for(path, result.facts, config)
    diagnostics = resolve_conditions(result.diagnostics, facts, config)
    return Linted(raw, sorted(diagnostics, key=Diagnostic.sort_key), config, cells=uris)

