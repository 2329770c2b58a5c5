"""Lint an editor buffer: a Python text or the code cells of a notebook, as
`amplint FILE` would lint the saved file (same pipeline, same config, same
project facts), without touching the disk."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic
from ..model.facts import FileFacts
from .project import Projects

if TYPE_CHECKING:  # pragma: no cover
    from .incremental import Base


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
    base: "Optional[Base]" = None  # a Python buffer: what its next incremental re-lint starts from
    fast: bool = False  # from an incremental re-lint: a full lint should confirm it
    #: what code actions worked out for this text (`actions.withdrawn`), not part of the lint
    memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)


def lint_python(source: str, path: str, projects: Projects, base: "Optional[Base]" = None) -> Linted:
    """Lint a Python buffer; with `base` (its last exact lint) only the edited definition
    when that is enough (server/incremental.py): `Linted.fast` then says so."""
    from ..core.config import ConfigError
    from ..engine.pipeline import selected_rules
    from .incremental import base_of, relint

    try:
        config = projects.config_for(path)
    except ConfigError as exc:
        return Linted(source, [], Config(), error=str(exc))
    if base is not None:
        codes, rules = selected_rules(config)
        again = relint(base, source, path, config, rules, codes)
        if again is not None:
            return Linted(source, resolved(again.raw, again.facts, path, config, projects), config, base=again.base, fast=not again.base.confirmed)
    full = full_lint(source, path, config)
    diagnostics = resolved(full.raw, full.facts, path, config, projects)
    distrust = base.distrust if base is not None else frozenset()
    return Linted(source, diagnostics, config, base=base_of(source, full.raw, full.facts, full.active, config, distrust))


def exact(source: str, path: str, config: Config, full: "FullLint", projects: Projects, fast: "Optional[Base]" = None) -> Linted:
    """The Linted of a full lint done elsewhere (server/recheck.py); `fast`: the base of the
    incremental result it corrects (its disagreements are remembered: `incremental.distrusted`)."""
    from .incremental import base_of, distrusted

    diagnostics = resolved(full.raw, full.facts, path, config, projects)
    distrust = distrusted(fast, full.raw) if fast is not None else frozenset()
    return Linted(source, diagnostics, config, base=base_of(source, full.raw, full.facts, full.active, config, distrust))


def lint_text(source: str, path: str, config: Config, projects: Projects) -> List[Diagnostic]:
    """The engine's per-file pipeline, conditions resolved with the project's facts."""
    full = full_lint(source, path, config)
    return resolved(full.raw, full.facts, path, config, projects)


def resolved(raw: Sequence[Diagnostic], own: FileFacts, path: str, config: Config, projects: Projects) -> List[Diagnostic]:
    """A buffer's findings with their project-fact conditions decided (`own`: the buffer's facts)."""
    from ..engine.pipeline import resolve_conditions

    out = resolve_conditions(raw, projects.facts_for(path, own, config), config)
    return sorted(out, key=Diagnostic.sort_key)


@dataclass
class FullLint:
    """One text through the engine's per-file pipeline, before project-fact conditions."""

    raw: List[Diagnostic]
    facts: FileFacts  # of the whole text, even when the engine parsed only an excerpt
    active: Tuple[str, ...]  # the codes of the rules that passed the gate


#: the most seconds the server spends on one document's lint, whatever `file-timeout` says
#: (a repository's config cannot lift it): past it the document gets the budget's AMP000
MAX_LINT_SECONDS = 20.0


def full_lint(source: str, path: str, config: Config) -> FullLint:
    from dataclasses import replace

    from ..core.gating import passing
    from ..engine.parallel import facts_of_source
    from ..engine.pipeline import lint_file_source, selected_rules

    codes, rules = selected_rules(config)
    budget = config.file_timeout if 0 < config.file_timeout < MAX_LINT_SECONDS else MAX_LINT_SECONDS
    result = lint_file_source(source, path, replace(config, file_timeout=budget), rules, codes)
    facts = result.facts if result.parsed else (facts_of_source(source, path, config) or FileFacts())
    return FullLint(result.diagnostics, facts, tuple(r.code for r in passing(rules, source)))


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

