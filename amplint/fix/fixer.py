"""`--fix`, `--unsafe-fixes` and `--diff`: apply the fixes of a finished lint run.

The project is linted once (so project-fact conditions are resolved over
every file); then each file that has an applicable fix is fixed with
`fixes.fix_until_stable` (lint -> apply -> lint until nothing applies; a fix
whose result does not parse is dropped) against those same project facts,
and is either written back (`writer`) or shown as a unified diff. Notebooks
are fixed as one program and written back cell by cell (`notebook`). A plain run checks
the fixes it offers the same way (`withdraw_failing_fixes`).

Fixing a file lints it again, as it is and as fixed: its whole analysis, twice or more. So
a file's fixes are fixed and checked under the bounds its lint runs with (`_within_bounds`):
one time budget for the whole check, and a file over 512 KB in a forked child with the lint's
memory bound (`engine/isolate.py`), never in this process (libcst's trees of a 70,000-line
file took 5 GB here). A check that cannot finish within them (`Unchecked`) fixes nothing in
the file and withdraws its fixes, with the reason.
"""
from __future__ import annotations

import copy
import difflib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Callable, Dict, List, Optional, Sequence, Tuple

from ..core.config import Config
from ..core.diagnostics import Applicability, Diagnostic
from ..model.facts import ProjectFacts
from .apply import applicable, fix_key, fix_until_stable

if TYPE_CHECKING:
    from ..engine.cache import Cache


@dataclass
class FileChange:
    path: str
    fixed: List[Diagnostic]  # the diagnostics whose fixes were applied
    diff: str  # a unified diff of the change
    written: bool = False


@dataclass
class FixOutcome:
    diagnostics: List[Diagnostic]  # what remains after fixing
    changes: List[FileChange] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # "path: why it was not written"
    output: Optional[str] = None  # the fixed text for stdin
    rejected: List[str] = field(default_factory=list)  # "path:row:col: CODE fix not applied: why"
    read: Optional[Dict[str, int]] = None  # what the run read (`LintResult.read`); None for stdin

    @property
    def fixed_count(self) -> int:
        return sum(len(c.fixed) for c in self.changes)


def unified_diff(old: str, new: str, fromfile: str, tofile: Optional[str] = None) -> str:
    def lines(text: str) -> List[str]:
        out = text.splitlines(keepends=True)
        if out and not out[-1].endswith(("\n", "\r")):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(difflib.unified_diff(lines(old), lines(new), fromfile=fromfile, tofile=tofile or fromfile))


def _linter(path: str, config: Config, facts: ProjectFacts, used: AbstractSet[Tuple[str, str]] = frozenset()) -> Callable[[str], List[Diagnostic]]:
    """The file's own lint, as the run made it; `used`: the `# noqa` codes that silence the
    file's cross-file findings (`LintResult.noqa_used`), which AMP900 must not call unused.
    Within a fix check's budget (`_budgeted`) a lint that ran past it raises `BudgetExceeded`:
    its AMP000 timeout line is the check running out of time, not a finding of the fix, and
    the check stops there instead of linting on (a pass's fixes retried one at a time are a
    lint each)."""
    from ..engine.budget import remaining
    from ..engine.pipeline import lint_file_source, resolve_conditions, selected_rules
    from ..engine.unused_noqa import discount

    codes, rules = selected_rules(config)

    def lint(source: str) -> List[Diagnostic]:
        result = lint_file_source(source, path, config, rules, codes)
        if result.over_budget:
            remaining()  # raises past the budget this lint ran within (none: stdin, the server)
        found = resolve_conditions(result.diagnostics, facts, config)
        return discount(found, source, used) if used else found

    return lint


class Unchecked(Exception):
    """A file's fixes could not be checked within the bounds of its lint (`_within_bounds`);
    the message says which bound, after "fix withdrawn:" or "fix not applied:"."""


Fixing = Tuple[str, List[Diagnostic], List[Diagnostic], List[Tuple[Diagnostic, str]]]


def _fixed(
    source: str, path: str, config: Config, facts: ProjectFacts, unsafe: bool, used: AbstractSet[Tuple[str, str]],
    first: Optional[List[Diagnostic]] = None,
) -> Fixing:
    """(fixed source, fixed diagnostics, remaining diagnostics, [(dropped fix's diagnostic,
    why)]): `fix_until_stable` of one text with the file's own lint (`_linter`). `first`: the
    per-file diagnostics (before conditions) this run's lint gave for `source` itself, which
    then stand in for linting it again (`LintResult.linted`)."""
    rejected: List[Tuple[Diagnostic, str]] = []
    lint = _linter(path, config, facts, used) if used else _linter(path, config, facts)
    if first is not None:
        lint = _linted_once(lint, source, first, facts, config, used)
    return (*fix_until_stable(source, lint, unsafe, rejected=rejected), rejected)


def _linted_once(
    lint: Callable[[str], List[Diagnostic]], source: str, first: List[Diagnostic], facts: ProjectFacts, config: Config,
    used: AbstractSet[Tuple[str, str]],
) -> Callable[[str], List[Diagnostic]]:
    """`lint`, answering for `source` itself (the same object: `fix_until_stable` lints its
    text first) from `first` as `_linter`'s lint answers from a fresh result."""
    from ..engine.pipeline import resolve_conditions
    from ..engine.unused_noqa import discount

    def known(text: str) -> List[Diagnostic]:
        if text is not source:
            return lint(text)
        from ..engine.pipeline import gc_paused

        with gc_paused():  # (no cycle among copies: see `run.lint_paths`)
            copies = [copy.copy(d) for d in first]
        found = resolve_conditions(copies, facts, config)
        return discount(found, text, used) if used else found

    return known


def _within_bounds(fn: Callable, args: tuple, size: int, timeout: float):
    """`fn(*args)`, the fixing or the check of one file of `size` bytes, under the bounds its
    lint runs with: `timeout` seconds (the file's budget, for all the lints of the check
    together) and, for a file the lint confines (`isolate.confines`), a forked child with its
    memory bound, from which the value comes back pickled. Raises `Unchecked` past either."""
    from ..engine import isolate
    from ..engine.budget import BudgetExceeded

    if isolate.confines(size):
        how, value = isolate.run_confined(_budgeted, (fn, args, timeout), timeout)
    else:
        try:
            how, value = "ok", _budgeted(fn, args, timeout)
        except BudgetExceeded:
            how, value = "timeout", None
    if how != "ok":
        raise Unchecked(f"checking the fixed file {isolate.overrun(how, value, timeout)}")
    return value


def _budgeted(fn: Callable, args: tuple, timeout: float):
    """`fn(*args)` within one budget of `timeout` seconds (each lint inside keeps what is left
    of it: nested budgets keep the earlier deadline)."""
    from ..engine.budget import file_budget

    with file_budget(timeout):
        return fn(*args)


def fix_text(
    source: str, path: str, config: Config, facts: ProjectFacts, unsafe: bool, outcome: Optional["FixOutcome"] = None, nb=None,
    used: AbstractSet[Tuple[str, str]] = frozenset(), size: Optional[int] = None, first: Optional[List[Diagnostic]] = None,
) -> Tuple[str, List[Diagnostic], List[Diagnostic]]:
    """(fixed source, fixed diagnostics, remaining diagnostics) of one Python text; the fixes
    that were checked and dropped are listed in `outcome.rejected` (`nb`: map their rows to cells)
    and withdrawn from the remaining diagnostics (no `[*]`, not counted as fixable);
    `used`: see `_linter`. `size`: the bytes of the file the text was read from, to fix it under
    the bounds of its lint (`_within_bounds`, which may raise `Unchecked`); None: here, as it is
    (stdin's text, which was linted here). `first`: the run's per-file diagnostics of this very
    text (`_fixed`)."""
    args = (source, path, config, facts, unsafe, used, first)
    new, fixed, remaining, rejected = _fixed(*args) if size is None else _within_bounds(_fixed, args, size, config.file_timeout)
    dropped = {fix_key(d) for d, _ in rejected}
    for d in remaining:
        if d.fix is not None and fix_key(d) in dropped:
            d.fix = None
    if outcome is not None:
        for d, why in rejected:
            outcome.rejected.append(_line(path, nb.map_diagnostic(d) if nb is not None else d, "fix not applied", why))
    return new, fixed, remaining


def _line(path: str, d: Diagnostic, what: str, why: str) -> str:
    """One line of the report, `path:[cell N:]row:col: CODE <what>: why` (`what`: "fix not
    applied" or "fix withdrawn")."""
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{path}:{cell}{d.location.row}:{d.location.column}: {d.code} {what}: {why}"


def dropped_fixes(source: str, lint: Callable[[str], List[Diagnostic]], offered: Sequence[Diagnostic], unsafe: bool) -> Dict[tuple, str]:
    """{fix key: why} of the fixes of `offered` (findings of `source` with a fix) that fixing
    `source` would drop, each checked as the fix that applies it runs: safe fixes (all of them
    with `unsafe`) by fixing under the current settings (`--fix`), unsafe ones without `unsafe`
    as `--fix --unsafe-fixes` would, so a hidden fix that `--unsafe-fixes` would then drop is
    not advertised. `lint`: the file's lint (`_linter`). One engine: `amplint server`'s quick
    fixes are these checks on the buffer, the CLI's are `withdraw_failing_fixes`."""
    out: Dict[tuple, str] = {}
    for mode, group in _by_mode(offered, unsafe):
        rejected: List[Tuple[Diagnostic, str]] = []
        fix_until_stable(source, lint, mode, rejected=rejected)
        keys = {fix_key(d) for d in group}
        out.update((fix_key(d), why) for d, why in rejected if fix_key(d) in keys)
    return out


def _by_mode(offered: Sequence[Diagnostic], unsafe: bool) -> List[Tuple[bool, List[Diagnostic]]]:
    """[(unsafe setting to check under, the fixes it decides)]: the fixes `--fix` applies under
    the current settings, then the hidden (unsafe) ones under `--unsafe-fixes`."""
    shown = [d for d in offered if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)]
    hidden = [d for d in offered if d.fix is not None and not (unsafe or d.fix.applicability is Applicability.SAFE)]
    return [(mode, group) for mode, group in ((unsafe, shown), (True, hidden)) if group]


def withdraw_in_text(source: str, lint: Callable[[str], List[Diagnostic]], diagnostics: Sequence[Diagnostic], unsafe: bool) -> List[Diagnostic]:
    """`withdraw_failing_fixes` for a text that is not a file on disk (stdin, an editor's
    buffer): the fixes of `diagnostics` that fixing `source` would drop get `fix = None` (in
    place); returns those diagnostics."""
    offered = [d for d in diagnostics if d.fix is not None]
    if not offered:
        return []
    why = dropped_fixes(source, lint, offered, unsafe)
    out = [d for d in offered if fix_key(d) in why]
    for d in out:
        d.fix = None
    return out


def withdraw_failing_fixes(
    diagnostics: Sequence[Diagnostic], facts: ProjectFacts, config: Config, unsafe: bool = True, cache: Optional["Cache"] = None,
    noqa_used: Optional[Dict[str, AbstractSet[Tuple[str, str]]]] = None, linted: Optional[Dict[str, Tuple[str, List[Diagnostic]]]] = None,
) -> List[str]:
    """Check the fixes a run offers the way `--fix` applies them (`dropped_fixes`): each file
    (notebook or not) with a fix is fixed in memory and re-linted, under the current settings for
    the fixes they apply and under `--unsafe-fixes` for the hidden ones the summary advertises.
    A fix dropped there is withdrawn from its diagnostic (`fix = None`, in place); returns one
    warning line per withdrawn fix that the settings would apply (a hidden one just is not
    counted). Files without a fix are not read again; with `cache` (an `engine.cache.Cache`),
    the outcome is kept with the file's lint entry, so a warm run of an unchanged file parses
    nothing for it either. A file whose check does not finish within its bounds (`Unchecked`)
    has every fix of the group withdrawn, with that reason (and nothing kept in the cache).
    `linted`: `LintResult.linted`, the run's own lint of a file's text, which the check then
    does not lint again (a file's lint is most of its check: at 10,000 AMP-dense lines 14 of 29
    CPU-s)."""
    by_file: Dict[str, List[Diagnostic]] = {}
    for d in applicable(diagnostics, True):
        by_file.setdefault(d.filename, []).append(d)
    lines: List[str] = []
    for path, found in by_file.items():
        for mode, group in _by_mode(found, unsafe):
            try:
                why_by_key = _fix_check(path, config, facts, mode, cache, (noqa_used or {}).get(path, frozenset()), (linted or {}).get(path))
            except Unchecked as exc:
                why_by_key = {fix_key(d): str(exc) for d in group}
            for d in group:
                why = why_by_key.get(fix_key(d))
                if why is not None:
                    d.fix = None
                    if mode == unsafe:
                        lines.append(_line(path, d, "fix withdrawn", why))
    return lines


def _fix_check(
    path: str, config: Config, facts: ProjectFacts, unsafe: bool, cache: Optional["Cache"], used: AbstractSet[Tuple[str, str]] = frozenset(),
    linted: Optional[Tuple[str, List[Diagnostic]]] = None,
) -> Dict[tuple, str]:
    """{fix key: why} of the fixes of `path` that `--fix` would drop, from `cache` when it
    holds the check of these bytes under this key (nothing dropped when unreadable);
    `linted`: (text digest, per-file diagnostics) of the run's lint of the file."""
    from ..core.safe_read import read_bytes
    from ..engine.cache import file_digest, stat_key
    from ..model.facts import library_module

    # the rest of what the outcome depends on (config, rules, amplint) names the store
    key = f"{facts!r} unsafe={unsafe} library={library_module(path, config.root)}"
    if used:
        key += f" noqa-used={sorted(used)!r}"
    outcome: Optional[list] = None
    if cache is not None:
        try:
            outcome = cache.fix_check(path, key, st=stat_key(os.stat(path)))
        except OSError:
            return {}
    if outcome is None:
        try:
            data = read_bytes(path)
        except OSError:
            return {}
        digest = file_digest(data)
        outcome = cache.fix_check(path, key, digest=digest) if cache is not None else None
        if outcome is None:
            outcome = _check_fixes(path, data, config, facts, unsafe, used, linted)
            if cache is not None:
                cache.record_fix_check(path, digest, key, outcome)
    return {(code, message, tuple(contents)): why for code, message, contents, why in outcome}


def _check_fixes(
    path: str, data: bytes, config: Config, facts: ProjectFacts, unsafe: bool, used: AbstractSet[Tuple[str, str]] = frozenset(),
    linted: Optional[Tuple[str, List[Diagnostic]]] = None,
) -> list:
    """[[code, fix title, edit contents, why], ...]: the fixes of the file's bytes `data`
    that fixing drops (JSON data, as the cache keeps it), checked within the bounds of the
    file's lint (`_within_bounds`: may raise `Unchecked`). `linted`: the run's lint of the file,
    used as the check's first lint when its text digest is that of the text decoded here."""
    from . import writer
    from ..engine.notebook import Notebook, NotebookError, is_notebook

    notebook = is_notebook(path)
    try:
        text = writer.decode(data, path, python=not notebook).text
        if notebook:
            text = Notebook.from_text(text).source
    except (UnicodeDecodeError, SyntaxError, LookupError, NotebookError):
        return []
    first = None
    if linted is not None and not notebook:
        from ..core.digest import text_digest

        first = linted[1] if text_digest(text) == linted[0] else None
    return _within_bounds(_dropped, (text, path, config, facts, unsafe, used, first), len(data), config.file_timeout)


def _dropped(
    text: str, path: str, config: Config, facts: ProjectFacts, unsafe: bool, used: AbstractSet[Tuple[str, str]],
    first: Optional[List[Diagnostic]] = None,
) -> list:
    """`_check_fixes`' outcome of a decoded text: only that comes back from a forked child (not
    the fixed text and its findings, which the check does not keep)."""
    rejected = _fixed(text, path, config, facts, unsafe, used, first)[3]
    return [[code, title, list(contents), why] for (code, title, contents), why in ((fix_key(d), why) for d, why in rejected)]


def _fix_python(
    path: str, config: Config, facts: ProjectFacts, unsafe: bool, write: bool, outcome: FixOutcome, used: AbstractSet[Tuple[str, str]] = frozenset(),
    linted: Optional[Tuple[str, List[Diagnostic]]] = None,
) -> Optional[List[Diagnostic]]:
    from . import writer

    try:
        original = writer.read_source(path)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
        outcome.errors.append(f"{path}: cannot read: {exc}")
        return None
    first = None
    if linted is not None:
        from ..core.digest import text_digest

        first = linted[1] if text_digest(original.text) == linted[0] else None
    new, fixed, remaining = fix_text(original.text, path, config, facts, unsafe, outcome, used=used, size=original.size, first=first)
    if not fixed or new == original.text:
        return remaining
    change = FileChange(path, fixed, unified_diff(original.text, new, path))
    if write:
        try:
            change.written = writer.write_text(new, original)
        except (OSError, UnicodeEncodeError) as exc:
            outcome.errors.append(f"{path}: not written: {exc}")
            return None
    outcome.changes.append(change)
    return remaining


def _fix_notebook(path: str, config: Config, facts: ProjectFacts, unsafe: bool, write: bool, outcome: FixOutcome, used: AbstractSet[Tuple[str, str]] = frozenset()) -> Optional[List[Diagnostic]]:
    from . import writer
    from ..engine.notebook import Notebook, NotebookError

    try:
        original = writer.read_source(path, python=False)
        nb = Notebook.from_text(original.text)
    except (OSError, UnicodeDecodeError, NotebookError) as exc:
        outcome.errors.append(f"{path}: cannot read: {exc}")
        return None
    program, fixed, remaining = fix_text(nb.source, path, config, facts, unsafe, outcome, nb, size=original.size)
    remaining = [nb.map_diagnostic(d) for d in remaining]
    if not fixed or program == nb.source:
        return remaining
    rendered = nb.render(program)
    if rendered is None:
        outcome.errors.append(f"{path}: the fixes could not be mapped back to the notebook's cells; not written")
        return None
    diff = "".join(unified_diff(old, new, f"{path}:cell {i}") for i, old, new in nb.changed_cells(program))
    change = FileChange(path, [nb.map_diagnostic(d) for d in fixed], diff)
    if write:
        try:
            change.written = writer.write_text(rendered, original)
        except OSError as exc:
            outcome.errors.append(f"{path}: not written: {exc}")
            return None
    outcome.changes.append(change)
    return remaining


def fix_files(
    diagnostics: Sequence[Diagnostic],
    facts: ProjectFacts,
    config: Config,
    unsafe: bool = False,
    write: bool = True,
    noqa_used: Optional[Dict[str, AbstractSet[Tuple[str, str]]]] = None,
    linted: Optional[Dict[str, Tuple[str, List[Diagnostic]]]] = None,
) -> FixOutcome:
    """Fix every file of a lint run that has an applicable fix; diagnostics of the others are kept.
    `noqa_used`: `LintResult.noqa_used` (the run's cross-file findings' `# noqa` codes);
    `linted`: `LintResult.linted` (the run's lint of a Python file stands in for the fixing's first)."""
    from ..engine.notebook import is_notebook

    by_file: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(d.filename, []).append(d)
    outcome = FixOutcome(diagnostics=[])
    for path, found in by_file.items():
        if applicable(found, unsafe):
            used = (noqa_used or {}).get(path, frozenset())
            try:
                if is_notebook(path):
                    remaining = _fix_notebook(path, config, facts, unsafe, write, outcome, used)
                else:
                    remaining = _fix_python(path, config, facts, unsafe, write, outcome, used, (linted or {}).get(path))
            except Unchecked as exc:  # nothing written: the file's findings stay, without their fixes
                for d in applicable(found, unsafe):
                    outcome.rejected.append(_line(path, d, "fix not applied", str(exc)))
                    d.fix = None
                remaining = None
            if remaining is not None:
                outcome.diagnostics.extend(remaining)
                continue
        outcome.diagnostics.extend(found)
    outcome.diagnostics.sort(key=Diagnostic.sort_key)
    return outcome


def fix_paths(
    paths: Sequence[str],
    config: Config,
    unsafe: bool = False,
    write: bool = True,
    force_exclude: bool = False,
    jobs: int = 1,
    cache_dir: Optional[str] = None,
) -> FixOutcome:
    """Lint `paths` (with `jobs` processes and the cache, like a plain run), then fix.

    cache_dir: None disables the cache; "" means the default place.
    """
    from ..engine.run import lint_paths

    cache = None
    if cache_dir is not None:
        from ..engine.parallel import open_cache

        cache = open_cache(config, cache_dir or None)
    result = lint_paths(paths, config, force_exclude=force_exclude, jobs=max(jobs, 1), cache=cache)
    outcome = fix_files(result.diagnostics, result.facts, config, unsafe, write, result.noqa_used, result.linted)
    outcome.read = result.read
    if write and not unsafe:
        # the summary's "hidden fixes can be enabled with --unsafe-fixes": only those it would apply
        withdraw_failing_fixes(outcome.diagnostics, result.facts, config, unsafe, cache, result.noqa_used)
    if cache is not None:
        cache.save()
    return outcome


def stdin_linter(source: str, path: str, config: Config) -> Callable[[str], List[Diagnostic]]:
    """The linter `--fix` uses for a text read from stdin (its project facts: its own)."""
    from ..engine.parallel import whole_file_facts
    from ..engine.pipeline import lint_file_source, selected_rules

    codes, rules = selected_rules(config)
    facts = ProjectFacts.from_files([whole_file_facts(lint_file_source(source, path, config, rules, codes), source, config)])
    return _linter(path, config, facts)


def fix_stdin(source: str, path: str, config: Config, unsafe: bool = False) -> FixOutcome:
    """Fix a text read from stdin; `output` is the fixed text (a notebook's JSON for .ipynb)."""
    from ..engine.pipeline import selected_rules
    from ..engine.notebook import is_notebook, lint_notebook_text
    from ..engine.parallel import whole_file_facts

    codes, rules = selected_rules(config)
    if is_notebook(path):
        nb, result = lint_notebook_text(source, path, config, rules, codes)
        facts = ProjectFacts.from_files([whole_file_facts(result, nb.source if nb is not None else "", config)])
        if nb is None:
            return FixOutcome(diagnostics=list(result.diagnostics), output=source)
        outcome = FixOutcome(diagnostics=[])
        program, fixed, remaining = fix_text(nb.source, path, config, facts, unsafe, outcome, nb)
        rendered = nb.render(program)
        outcome.diagnostics = sorted((nb.map_diagnostic(d) for d in remaining), key=Diagnostic.sort_key)
        if rendered is None:
            outcome.errors.append(f"{path}: the fixes could not be mapped back to the notebook's cells")
            outcome.output = source
            return outcome
        outcome.output = rendered
        if fixed and rendered != source:
            diff = "".join(unified_diff(o, n, f"{path}:cell {i}") for i, o, n in nb.changed_cells(program))
            outcome.changes.append(FileChange(path, [nb.map_diagnostic(d) for d in fixed], diff))
        return outcome
    from ..engine.pipeline import lint_file_source

    facts = ProjectFacts.from_files([whole_file_facts(lint_file_source(source, path, config, rules, codes), source, config)])
    outcome = FixOutcome(diagnostics=[])
    new, fixed, remaining = fix_text(source, path, config, facts, unsafe, outcome)
    withdraw_in_text(new, _linter(path, config, facts), remaining, unsafe)
    outcome.diagnostics, outcome.output = sorted(remaining, key=Diagnostic.sort_key), new
    if fixed and new != source:
        outcome.changes.append(FileChange(path, fixed, unified_diff(source, new, path)))
    return outcome
