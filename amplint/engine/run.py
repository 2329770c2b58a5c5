"""The run over many files: discover, lint each (in parallel, through the
cache), then resolve the project-fact conditions of per-file diagnostics after
every file has been read, so results never depend on the order files come in,
and add the cross-file findings of the projects the files belong to
(`crossfile.py`).

`lint_source` lints one text (the unit tests and the stdin path use it)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic
from ..model.facts import ProjectFacts
from .discovery import WalkRecord, discover
from .pipeline import SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE, FileResult, gc_paused, lint_file_source, resolve_conditions, selected_rules, syntax_error

if TYPE_CHECKING:  # pragma: no cover
    from .cache import Cache


@dataclass
class LintResult:
    diagnostics: List[Diagnostic]
    files: List[str]
    facts: ProjectFacts
    #: one-line notes for the user (files left out: links out of the project)
    notes: List[str] = field(default_factory=list)
    #: path -> (code, line key) of the `# noqa` comments that silence a cross-file finding
    #: (`unused_noqa.used_keys`): AMP900 counts them as used, and so does `--fix`'s re-lint
    noqa_used: Dict[str, Set[Tuple[str, str]]] = field(default_factory=dict)
    #: how many of `files` each `FileResult.read` outcome has (analysed, no AMP code, ...)
    read: Dict[str, int] = field(default_factory=dict)
    #: path -> (`text_digest` of the text linted, its per-file diagnostics before conditions, as
    #: copies) of the Python files this run linted (not the cached ones) whose findings offer a
    #: fix: the fix check's first lint of the same text (`fixer.withdraw_failing_fixes`)
    linted: Dict[str, Tuple[str, List[Diagnostic]]] = field(default_factory=dict)


def lint_source(source: str, path: str = "<string>", config: Optional[Config] = None) -> List[Diagnostic]:
    """Lint one text as if it were the whole project."""
    config = config or Config()
    codes, rules = selected_rules(config)
    result = lint_file_source(source, path, config, rules, codes)
    from .parallel import whole_file_facts

    facts = ProjectFacts.from_files([whole_file_facts(result, source, config)])
    out = resolve_conditions(result.diagnostics, facts, config)
    from ..model.project.reach import Reach
    from .crossfile import region_row_of

    # sites that never run, the text its own project (no folder: no import is decided)
    from .excerpt import PIECE_BYTES

    if len(source) <= PIECE_BYTES:  # a huge text's CPython tree costs ~5 KB a line: its findings stay
        reach = Reach([path], lambda p: source if p == path else None).of(path)
        out = [d for d in out if not reach.why(d.location.row, region_row_of(d)) or d.code in (SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE)]
    return sorted(out, key=Diagnostic.sort_key)


def lint_paths(
    paths: Sequence[str],
    config: Optional[Config] = None,
    force_exclude: bool = False,
    jobs: int = 1,
    cache: "Optional[Cache]" = None,
) -> LintResult:
    """Lint files and folders. `jobs` processes (results identical to one);
    `cache`: an `amplint.engine.cache.Cache` to reuse and record per-file results."""
    from .parallel import lint_files

    config = config or Config()
    codes, rules = selected_rules(config)
    unreadable: List[Tuple[str, str]] = []
    from .crossfile import ROOT_NAMES

    walk = WalkRecord(ROOT_NAMES)  # what the walk saw, for the cross-file pass (crossfile.Projects)
    outside: List[str] = []
    files = list(discover(paths, config, force_exclude, problems=unreadable, record=walk, outside=outside))
    results = lint_files(files, config, rules, codes, jobs=jobs, cache=cache)
    # copies, taken before anything can touch them: the fix check withdraws fixes from the run's
    # diagnostics (in place) between its passes
    with gc_paused():  # copies hold no cycle; with the collector on, their allocations rescan the heap
        linted = {r.path: (r.source_digest, [copy.copy(d) for d in r.diagnostics]) for r in results if r.source_digest is not None}
    from ..model.embedded import remembered

    # the conditions' walks of library copies, kept in the store (a warm run reads none of their files)
    with remembered(cache.memo("walks") if cache is not None else None):
        result = _after_lint(paths, config, jobs, cache, codes, rules, unreadable, walk, outside, files, results)
    result.linted = linted
    return result


def _after_lint(
    paths: Sequence[str], config: Config, jobs: int, cache: "Optional[Cache]", codes: FrozenSet[str], rules: Sequence[Any],
    unreadable: List[Tuple[str, str]], walk: WalkRecord, outside: List[str], files: List[str], results: List[FileResult],
) -> LintResult:
    """`lint_paths` after each file's lint: the project facts, the conditions, the cross-file pass."""
    from .parallel import settle_facts

    facts = settle_facts(files, results, config, jobs=jobs, cache=cache)
    from .crossfile import Projects, drop_unreached, merge, project_diagnostics
    from .parallel import pending_conditions

    projects = Projects(paths, files, config, walk)
    if pending_conditions(results, facts, config):
        # a subset run: the rest of the project decides, as in a run over all of it
        others = projects.others()
        if others:
            rest = [FileResult(path=o) for o in others]
            facts = settle_facts([*files, *others], [*results, *rest], config, jobs=jobs, cache=cache)
    diagnostics = resolve_conditions((d for r in results for d in r.diagnostics), facts, config)
    absolute = walk.abspath
    indexes = {absolute(r.path): r.index for r in results if r.index is not None}
    made = {absolute(r.path): r.summaries for r in results if r.summaries is not None}
    silenced: List[Diagnostic] = []
    with gc_paused():  # the summaries' `ast` trees and the project graph: no cycle worth a full collection mid-pass
        cross = project_diagnostics(projects, rules, codes, cache, indexes, silenced, made)
    if cross:
        diagnostics = merge(diagnostics, resolve_conditions(cross, facts, config))
    diagnostics = drop_unreached(diagnostics, projects, absolute, cache)  # sites that never run (model/project/reach)
    noqa_used = _noqa_used(resolve_conditions(silenced, facts, config)) if silenced else {}
    if noqa_used and UNUSED_NOQA_CODE in codes:
        diagnostics = _discounted(diagnostics, noqa_used)
    if SYNTAX_ERROR_CODE in codes:
        diagnostics.extend(
            syntax_error(folder, 1, 1, f"cannot read folder: {reason.lower()}; its files were not linted")
            for folder, reason in unreadable
        )
    diagnostics.sort(key=Diagnostic.sort_key)
    notes = [f"{path}: not linted: a symbolic link to a file outside the project (name it on the command line to lint it)" for path in outside]
    read: Dict[str, int] = {}
    for r in results:
        read[r.read] = read.get(r.read, 0) + 1
    return LintResult(diagnostics=diagnostics, files=files, facts=facts, noqa_used=noqa_used, read=read, notes=notes)


def _noqa_used(silenced: Sequence[Diagnostic]) -> Dict[str, Set[Tuple[str, str]]]:
    from .pipeline import read_file
    from .unused_noqa import used_keys

    by_file: Dict[str, List[Diagnostic]] = {}
    for d in silenced:
        by_file.setdefault(d.filename, []).append(d)
    out: Dict[str, Set[Tuple[str, str]]] = {}
    for path, found in by_file.items():
        source, _ = read_file(path)
        if source is not None:
            out[path] = used_keys(found, source)
    return out


def _discounted(diagnostics: List[Diagnostic], used: Dict[str, Set[Tuple[str, str]]]) -> List[Diagnostic]:
    """The AMP900 findings without the codes that silence a cross-file finding."""
    from .pipeline import read_file
    from .unused_noqa import discount

    by_file: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(d.filename, []).append(d)
    out: List[Diagnostic] = []
    for path, found in by_file.items():
        source = read_file(path)[0] if path in used and any(d.code == UNUSED_NOQA_CODE for d in found) else None
        out.extend(discount(found, source, used[path]) if source is not None else found)
    return out
