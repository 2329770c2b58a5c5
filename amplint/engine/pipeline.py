"""The per-file pipeline: source -> gate -> parse once -> AMP model -> rules -> noqa -> FileResult.

Everything that runs it sits above it: `notebook.py` (a notebook as one
program), `dispatch.py` (one path on disk), `parallel.py` and `run.py` (the
run over many files, which resolves project-fact conditions at the end).
Also here: which rules a configuration selects, reading and decoding a file,
and the guards that turn a crash or a too-deep file into one AMP000 line.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import io
import itertools
import os
import tokenize
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple, Type

from ..core.config import Config
from ..core.diagnostics import Diagnostic, Location, Severity
from ..core.noqa import file_exemption, noqa_map
from ..core.rule import Rule
from ..model.facts import FileFacts, ProjectFacts, condition_holds


SYNTAX_ERROR_CODE = "AMP000"
SYNTAX_ERROR_NAME = "syntax-error"
TIMEOUT_NAME = "analysis-timeout"  # AMP000 for a file past its time budget (engine/budget.py)
UNUSED_NOQA_CODE = "AMP900"  # see amplint/engine/unused_noqa.py
PSEUDO_CODES = (SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE)
#: pseudo-codes reported only when selected explicitly (`--extend-select AMP900`, `ALL`)
OPT_IN_CODES = (UNUSED_NOQA_CODE,)

PYTHON_SUFFIXES = (".py", ".pyi")

#: what happened to a file (`FileResult.read`), as the summary counts it
ANALYSED = "analysed"  # parsed (whole or an excerpt) and its rules ran
NO_AMP_CODE = "no-amp"  # no selected rule's gate passed: nothing it could flag, not parsed
EXEMPT = "exempt"  # a file-level `# amplint: noqa`
FAILED = "failed"  # read, but not analysed: a syntax error, too deep, past its time budget
UNREADABLE = "unreadable"  # could not be read or decoded


@dataclass
class FileResult:
    """What linting one file produced, before project-wide conditions are resolved."""

    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    facts: FileFacts = field(default_factory=FileFacts)
    parsed: bool = False
    #: the analysis ran past the file's time budget (engine/budget.py): never cached
    over_budget: bool = False
    #: the file's text index for the project model (`amplint.model.project.text_index`)
    index: Optional[dict] = None
    #: (project summary, scale summary) of the file's text when the lint made them
    #: (`crossfile.summaries_of`; marshalled where a wrapper rule's view read them,
    #: `wrappers.made_for`): handed to this run's cross-file pass, never cached
    summaries: Any = None
    #: ANALYSED, NO_AMP_CODE, EXEMPT, FAILED or UNREADABLE (the summary's "Checked N files: ...")
    read: str = NO_AMP_CODE
    #: `core.digest.text_digest` of the Python text linted, when a diagnostic offers a fix: the
    #: run's check of those fixes takes `diagnostics` as its lint of the same text instead of
    #: linting it again (`LintResult.linted`); never cached
    source_digest: Optional[str] = None


# ------------------------------------------------------------------ selection


def known_codes() -> List[str]:
    from .registry import all_codes

    return [*PSEUDO_CODES, *all_codes()]


def default_codes() -> List[str]:
    from .registry import default_codes as rule_defaults

    return [*(c for c in PSEUDO_CODES if c not in OPT_IN_CODES), *rule_defaults()]


def selected_rules(config: Config) -> Tuple[FrozenSet[str], List[Type[Rule]]]:
    """The selected codes and rules. The rules are `RuleSpec`s: they gate
    without importing rule modules (and libcst) and stand in for the class."""
    from .registry import select_specs

    codes = config.selected_codes(known_codes(), default_codes())
    return codes, select_specs(codes)  # type: ignore[return-value]


# ------------------------------------------------------------------ one source


def decode_source(data: bytes) -> str:
    """Bytes -> text the way Python would read the file (coding cookie, BOM)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def lint_file_source(source: str, path: str, config: Config, rules: Sequence[Type[Rule]], codes: FrozenSet[str]) -> FileResult:
    """Lint one file's text; conditional diagnostics are returned unresolved. A file whose
    analysis runs past `config.file_timeout` seconds gives only an AMP000 line (engine/budget.py)."""
    from .budget import BudgetExceeded, file_budget

    try:
        with file_budget(config.file_timeout):
            return _lint_file_source(source, path, config, rules, codes)
    except BudgetExceeded as exc:
        # no facts either (parsed: the facts pass would only run out of time again)
        result = FileResult(path=path, parsed=True, over_budget=True, read=FAILED)
        if SYNTAX_ERROR_CODE in codes:
            result.diagnostics.append(syntax_error(path, 1, 1, f"{exc}; skipped", TIMEOUT_NAME))
        return result


def _lint_file_source(source: str, path: str, config: Config, rules: Sequence[Type[Rule]], codes: FrozenSet[str]) -> FileResult:
    result = FileResult(path=path)
    from ..core.docstrings import has_triple_quotes, without_docstrings
    from ..core.gating import passing, site_lines

    exempt = file_exemption(source)
    if exempt is not None and not exempt:
        result.read = EXEMPT
        return result  # `# amplint: noqa`: the whole file, as ruff's `# ruff: noqa`
    if "\0" in source:  # not Python at all (CPython refuses it), whatever the gates say; cheap to see
        result.read = FAILED
        if SYNTAX_ERROR_CODE in codes:
            at = source.index("\0")
            row = source.count("\n", 0, at) + 1
            result.diagnostics.append(syntax_error(path, row, at - (source.rfind("\n", 0, at) + 1) + 1, "SyntaxError: source code cannot contain null bytes"))
        return result
    active = passing(rules, source)
    if active and has_triple_quotes(source) and site_lines(active, source) is None:
        # about to be parsed whole: drop the rules whose gate passed only on docstring words
        with gc_paused():  # CPython's tree of the whole file: freed by reference counting
            blanked = without_docstrings(source)
        active = passing(active, blanked or source)
    if not active:
        if UNUSED_NOQA_CODE in codes:
            result.diagnostics = _unused_noqa([], source, path, config, codes)
        return result
    if all(getattr(r, "text_only", False) for r in active):
        return _lint_text_only(source, path, config, active, codes, exempt, result)
    texts = [r for r in active if getattr(r, "text_only", False) and getattr(r, "gate_sites", None) is None]
    if texts:
        # the text-only rules read the whole text with `ast` (their `check(ctx)` is `check_text` of
        # the whole source): they need no libcst tree, so the others may still parse an excerpt
        return lint_active(source, path, config, [r for r in active if r not in texts], codes, exempt, result, texts, active)
    return lint_active(source, path, config, active, codes, exempt, result)


def _keep(diagnostics: List[Diagnostic], source: str, path: str, config: Config, codes: FrozenSet[str], exempt: Optional[FrozenSet[str]], result: FileResult) -> FileResult:
    """A file's findings after per-file-ignores, the caller's exemptions and `# noqa` comments
    (with AMP000's unused-noqa findings when selected), added to `result`."""
    ignored = config.ignored_for(path, known_codes()) if config.per_file_ignores else frozenset()
    diagnostics = [d for d in diagnostics if d.code not in ignored and not (exempt and d.code in exempt)]
    result.diagnostics.extend(apply_noqa(diagnostics, source))
    if UNUSED_NOQA_CODE in codes:
        result.diagnostics.extend(_unused_noqa(diagnostics, source, path, config, codes))
    return result


def _lint_text_only(source: str, path: str, config: Config, active: Sequence[Type[Rule]], codes: FrozenSet[str], exempt: Optional[FrozenSet[str]], result: FileResult) -> FileResult:
    """Run rules that read the text only (`Rule.text_only`): no libcst parse, no AMP model (the
    file stays unparsed for the project facts, as a file passing no gate)."""
    with gc_paused():  # the wrapper rules summarise the file with `ast` (wrappers.file_view)
        diagnostics = _check_texts(source, path, active, codes, result)
    return _keep(diagnostics, source, path, config, codes, exempt, result)


def lint_active(
    source: str,
    path: str,
    config: Config,
    active: Sequence[Type[Rule]],
    codes: FrozenSet[str],
    exempt: Optional[FrozenSet[str]],
    result: Optional[FileResult] = None,
    texts: Sequence[Type[Rule]] = (),
    order: Sequence[Type[Rule]] = (),
) -> FileResult:
    """Run the rules `active` (already gated) on `source`; `exempt`: the file-level noqa codes.
    The server's incremental re-lint (server/incremental.py) calls it on an excerpt with
    the gate and the exemption of the whole buffer, so the excerpt runs what the file would.
    `texts`: text-only rules (`Rule.text_only`) run on the whole `source` once the others
    have been analysed (as when they ran in the same whole-file parse: nothing when it fails);
    `order`: every rule of the file in turn, the order their findings are kept in."""
    result = result if result is not None else FileResult(path=path)
    with gc_paused():
        if texts and _python_refuses(source):
            diagnostics = None  # the whole-file parse says why, as when every rule ran in it
        else:
            diagnostics = _excerpt_checked(source, path, config, active, codes, result)
        if diagnostics is None:
            deep = too_deep(source)  # in this thread: the recursion limit Python runs the file with
            if deep is not None:
                if SYNTAX_ERROR_CODE in codes:
                    result.diagnostics.append(syntax_error(path, deep[0], 1, deep[1]))
                result.read = FAILED
                return result
            diagnostics = run_guarded(_parse_and_check, source, path, config, active, codes, result)
        if diagnostics is not None and texts:
            diagnostics = _in_rule_order([*diagnostics, *run_guarded(_check_texts, source, path, texts, codes, result)], order or [*active, *texts])
    if diagnostics is None:
        result.read = FAILED
        return result
    result.read = ANALYSED
    return _keep(diagnostics, source, path, config, codes, exempt, result)


def _python_refuses(source: str) -> bool:
    """Whether CPython cannot parse the whole text (the text-only rules' own parse, shared
    through `pyast.remembered`): an excerpt leaves such a file's error out."""
    from ..core.pyast import parse

    return parse(source) is None


def _check_texts(source: str, path: str, texts: Sequence[Type[Rule]], codes: FrozenSet[str], result: FileResult) -> List[Diagnostic]:
    """The findings of text-only rules on `source`; a crash becomes an AMP000 line in `result`,
    as in `_parse_and_check`."""
    diagnostics: List[Diagnostic] = []
    for rule_cls in texts:
        try:
            diagnostics.extend(list(rule_cls().check_text(source, path)))
        except RecursionError:
            if SYNTAX_ERROR_CODE in codes:
                result.diagnostics.append(syntax_error(path, 1, 1, f"file is nested too deeply for {rule_cls.code} to analyse"))
        except Exception as exc:
            result.diagnostics.append(internal_error(path, f"rule {rule_cls.code} ({rule_cls.name})", exc))
    return diagnostics


def _in_rule_order(diagnostics: List[Diagnostic], rules: Sequence[Type[Rule]]) -> List[Diagnostic]:
    """`diagnostics` by the position of their rule in `rules` (each rule's own in the order it
    gave them): the list one parse running every rule in turn gives."""
    order = {r.code: i for i, r in enumerate(rules)}
    return sorted(diagnostics, key=lambda d: order.get(d.code, len(order)))


def _excerpt_checked(source: str, path: str, config: Config, active: Sequence[Type[Rule]], codes: FrozenSet[str], result: FileResult) -> Optional[List[Diagnostic]]:
    """The diagnostics from parsing only what `active` can fire in (amplint/engine/excerpt.py);
    None when the file must be parsed whole."""
    from .excerpt import PIECE_BYTES, exact_excerpt, excerpt, pieces
    from ..core.gating import passing, site_lines

    lines = site_lines(active, source)
    if lines is None:
        return None
    # a file that may be parsed in pieces first asks only the cut read off the indentation: the
    # exact cut's whole-file CPython tree (1.2 GB for a 140,000-line function) is built only when
    # neither that cut nor the pieces answer (each gives the findings of the whole file)
    huge = len(source) > PIECE_BYTES
    text = excerpt(source, lines, exact=not huge)
    if text is None:
        # nothing to cut; a huge file of sites may still be parsed in pieces
        parts = pieces(source, None, lines)
        if parts is not None:
            return _pieces_checked(parts, path, config, active, codes, result)
        text = exact_excerpt(source, lines) if huge else None
        if text is None:
            return None
    # the excerpt holds all a rule's findings depend on: a rule whose gate fails on it cannot fire
    kept = passing(active, text)
    if not kept:
        return []
    if len(kept) < len(active):
        active = kept
        text = excerpt(source, site_lines(active, source) or ()) or text  # a smaller cut for the rest
    parts = pieces(text, None, site_lines(active, source))
    if parts is not None:
        del text  # each piece is parsed, checked and freed before the next
        return _pieces_checked(parts, path, config, active, codes, result)
    attempt = FileResult(path=path)
    diagnostics = run_guarded(_parse_and_check, text, path, config, active, codes, attempt)
    if diagnostics is None or attempt.diagnostics:
        return None  # let the whole file speak for itself
    result.facts = attempt.facts  # partial: the facts pass still reads the file whole if needed
    return diagnostics


def _rows_in_order(diagnostics: List[Diagnostic]) -> bool:
    """Whether each rule's findings come in the order of their rows (what lets pieces' findings
    be joined piece after piece into the order of one whole parse)."""
    last: dict = {}
    for d in diagnostics:
        if d.location.row < last.get(d.code, 0):
            return False
        last[d.code] = d.location.row
    return True


def _pieces_checked(parts: List[Tuple[str, range]], path: str, config: Config, active: Sequence[Type[Rule]], codes: FrozenSet[str], result: FileResult) -> Optional[List[Diagnostic]]:
    """The diagnostics of an excerpt parsed in pieces (`excerpt.pieces`), one tree at a time:
    each piece's findings on its own rows, kept by rule and, within a rule, piece after piece
    (the order of one whole parse); None when a piece cannot be analysed."""
    import pickle

    from ..core.gating import passing

    # each piece's findings wait pickled (one block of bytes each) and come back as objects only
    # once the last tree is gone: kept as objects, they would be scattered over the memory every
    # tree was built in, which then could not be given back (tracemalloc: ~3 KB a finding, RSS:
    # twice that)
    stash: List[bytes] = []
    facts = None
    while parts:
        piece, own = parts.pop(0)
        kept = passing(active, piece)
        if not kept:
            continue
        attempt = FileResult(path=path)
        found = run_guarded(_parse_and_check, piece, path, config, kept, codes, attempt)
        del piece
        if found is None or attempt.diagnostics:
            return None  # let the whole file speak for itself
        if not _rows_in_order(found):
            return None  # a rule that does not report in row order: only one whole parse knows its order
        if facts is None:
            facts = attempt.facts
        stash.append(pickle.dumps([d for d in found if d.location.row in own], pickle.HIGHEST_PROTOCOL))
        del found, attempt
    if facts is not None:
        result.facts = facts  # partial, as an excerpt's
    by_rule: dict = {r.code: [] for r in active}
    while stash:
        for d in pickle.loads(stash.pop(0)):
            by_rule.setdefault(d.code, []).append(d)
    return [d for r in active for d in by_rule.pop(r.code, [])] + [d for rest in by_rule.values() for d in rest]


# ------------------------------------------------------------------ never crash
#
# A linter in pre-commit sees every file a repository holds. Three guards keep
# one file from taking down the run:
#  1. CPython's own parser (C, several times faster than libcst) first rejects
#     nesting Python itself cannot run ("too many nested parentheses",
#     RecursionError/MemoryError while building the tree): libcst's native
#     parser would overflow the C stack and kill the process on such input.
#  2. libcst and the AMP model run in a thread with a large stack and a higher
#     recursion limit, so legitimately deep code (long `a and b and ...`
#     chains, which CPython keeps flat but libcst nests) parses; what is
#     still too deep raises RecursionError, reported as AMP000.
#  3. Every rule runs in its own try: a bug in one rule on one file becomes an
#     `AMP000 internal-error` diagnostic naming the rule and the exception, and
#     the other rules and files go on. The CLI exits 2 when any occurred.

INTERNAL_ERROR_NAME = "internal-error"
REPORT_URL = "https://github.com/amplint/amplint/issues"
_STACK_SIZE = 512 * 1024 * 1024  # reserved address space, committed only as used
_RECURSION_LIMIT = 20_000
_TOO_DEEP = ("too many nested parentheses", "too many levels of indentation")


_BRACKETS_ONLY = bytes(c for c in range(256) if c not in b"()[]{}")
_BRACKET_STEP = [0] * 256
for _c in b"([{":
    _BRACKET_STEP[_c] = 1
for _c in b")]}":
    _BRACKET_STEP[_c] = -1


def may_be_too_deep(source: str) -> bool:
    """False when `source` certainly nests too little to trouble any parser (cheap: ~4 ms/MB).

    Real code nests brackets a few dozen deep; CPython refuses 200 and libcst
    needs thousands to exhaust the guarded thread's stack. The bracket depth is
    read off the bracket characters alone, strings and comments included (a
    few stray brackets in strings, as in regexes, move it by a few levels); a
    badly unbalanced count, very long lines or long continuation runs (the
    other ways to build deep trees) send the file to the full check.
    """
    data = source.encode("utf-8", "surrogatepass")
    brackets = data.translate(None, _BRACKETS_ONLY)
    if abs(sum(map(_BRACKET_STEP.__getitem__, brackets))) > 16:
        return True  # many unmatched brackets in strings: the estimate below could be far off
    if max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0) >= 90:
        return True
    if data.count(b"\\\n") > 500 or b"\n" + b" " * 100 in data or b"\n" + b"\t" * 50 in data:
        return True
    return max(map(len, data.split(b"\n")), default=0) > 20_000


def too_deep(source: str) -> Optional[Tuple[int, str]]:
    """(row, reason) when CPython itself cannot parse `source` for its nesting."""
    import ast
    import warnings

    if not may_be_too_deep(source):
        return None

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            ast.parse(source)
    except (RecursionError, MemoryError):
        return 1, "file is nested too deeply to parse (Python's own parser gives up on it too)"
    except SyntaxError as exc:
        msg = str(exc.msg or "")
        if any(t in msg for t in _TOO_DEEP):
            return exc.lineno or 1, f"SyntaxError: {msg}"
    except (ValueError, TypeError):  # NUL bytes: libcst reports them
        pass
    return None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """CPython's cycle collector paused while one file is parsed and analysed.

    libcst (and `ast`) build a few hundred thousand objects for a 100 KB file,
    and the collector, started by allocation counts, rescans the growing tree
    again and again: about a third of a cold run's time. Neither tree holds
    cycles, and `ModuleContext.release` unlinks the model's, so reference
    counting frees them; what a rule may still leave in a cycle is collected
    once, from the young objects only, when the file is done.
    """
    if not gc.isenabled():  # paused further out
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


def run_guarded(fn, *args):
    """`fn(*args)` on a thread with a large stack and recursion limit (see above), with
    the cycle collector paused (`gc_paused`)."""
    with gc_paused():
        return _run_on_big_stack(fn, *args)


def _run_on_big_stack(fn, *args):
    import sys
    import threading

    from .budget import wait

    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    try:
        previous_size = threading.stack_size(_STACK_SIZE)
    except (ValueError, RuntimeError):  # platform without settable stacks
        return fn(*args)
    previous_limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(previous_limit, _RECURSION_LIMIT))
        thread = threading.Thread(target=target, name="amplint-lint", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous_size)
    try:
        wait(thread)  # until the file's time budget runs out, if one is open
    finally:
        sys.setrecursionlimit(previous_limit)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def internal_error(path: str, where: str, exc: BaseException) -> Diagnostic:
    text = str(exc).replace("\n", " ").strip()
    if len(text) > 200:
        text = text[:197] + "..."
    return Diagnostic(
        code=SYNTAX_ERROR_CODE,
        name=INTERNAL_ERROR_NAME,
        message=(
            f"internal error in {where}: {type(exc).__name__}{': ' + text if text else ''}; "
            f"this file was not fully checked, please report it at {REPORT_URL}"
        ),
        severity=Severity.ERROR,
        filename=path,
        location=Location(1, 1),
        end_location=Location(1, 1),
        noqa_row=None,
    )


def is_internal_error(d: Diagnostic) -> bool:
    return d.code == SYNTAX_ERROR_CODE and d.name == INTERNAL_ERROR_NAME


def _parse_and_check(source: str, path: str, config: Config, active: Sequence[Type[Rule]], codes: FrozenSet[str], result: FileResult) -> Optional[List[Diagnostic]]:
    """Parse, build the AMP model and run `active` rules; None when the file could not be analysed
    (the reason is then in `result.diagnostics`)."""
    import libcst as cst

    from ..model.context import ModuleContext
    from ..model.parse import parse_module

    try:
        module = parse_module(source)
    except cst.ParserSyntaxError as exc:
        if SYNTAX_ERROR_CODE in codes:
            row, column, message = python_syntax_error(source) or (exc.raw_line, exc.raw_column + 1, exc.message)
            result.diagnostics.append(syntax_error(path, row, column, f"SyntaxError: {message}"))
        return None
    except (RecursionError, MemoryError):
        if SYNTAX_ERROR_CODE in codes:
            result.diagnostics.append(syntax_error(path, 1, 1, "file is nested too deeply to parse"))
        return None
    except Exception as exc:  # libcst itself failed on input it should handle
        result.diagnostics.append(internal_error(path, "the parser (libcst)", exc))
        return None
    result.parsed = True
    try:
        ctx = ModuleContext.build(module, source, path, config)
    except RecursionError:
        if SYNTAX_ERROR_CODE in codes:
            result.diagnostics.append(syntax_error(path, 1, 1, "file is nested too deeply to analyse"))
        return None
    except Exception as exc:
        result.diagnostics.append(internal_error(path, "the AMP model (context.py)", exc))
        return None
    result.facts = ctx.facts
    diagnostics: List[Diagnostic] = []
    for rule_cls in active:
        try:
            diagnostics.extend(list(rule_cls().check(ctx)))
        except RecursionError:
            if SYNTAX_ERROR_CODE in codes:
                result.diagnostics.append(syntax_error(path, 1, 1, f"file is nested too deeply for {rule_cls.code} to analyse"))
        except Exception as exc:
            result.diagnostics.append(internal_error(path, f"rule {rule_cls.code} ({rule_cls.name})", exc))
    ctx.release()
    return diagnostics


def _unused_noqa(diagnostics: List[Diagnostic], source: str, path: str, config: Config, codes: FrozenSet[str]) -> List[Diagnostic]:
    """AMP900 for the `# noqa` codes of `source` that suppressed none of `diagnostics`."""
    from .unused_noqa import unused_noqa

    ignored = config.ignored_for(path, known_codes()) if config.per_file_ignores else frozenset()
    if UNUSED_NOQA_CODE in ignored:
        return []
    return unused_noqa(diagnostics, source, path, codes - ignored, known_codes())


def python_syntax_error(source: str) -> Optional[Tuple[int, int, str]]:
    """(row, 1-based column, message) of the syntax error CPython's own parser reports for
    `source`, as `python file.py` would show it; None when CPython accepts the text (libcst
    refused it alone: its location is then the only one)."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            ast.parse(source)
    except SyntaxError as exc:
        return max(exc.lineno or 1, 1), max(exc.offset or 1, 1), str(exc.msg or "invalid syntax")
    except (ValueError, TypeError, RecursionError, MemoryError):
        return None
    return None


def syntax_error(path: str, row: int, column: int, message: str, name: str = SYNTAX_ERROR_NAME) -> Diagnostic:
    """An AMP000 line: the file (or part of it) could not be analysed, and why."""
    return Diagnostic(
        code=SYNTAX_ERROR_CODE,
        name=name,
        message=message,
        severity=Severity.ERROR,
        filename=path,
        location=Location(max(row, 1), max(column, 1)),
        end_location=Location(max(row, 1), max(column, 1)),
        noqa_row=None,
    )


def apply_noqa(diagnostics: List[Diagnostic], source: str) -> List[Diagnostic]:
    rows = noqa_map(source)
    if not rows:
        return diagnostics
    kept = []
    for d in diagnostics:
        row = d.noqa_row
        if row in rows and (rows[row] is None or d.code in rows[row]):
            continue
        kept.append(d)
    return kept


def resolve_conditions(diagnostics: Iterable[Diagnostic], facts: ProjectFacts, config: Config) -> List[Diagnostic]:
    """The diagnostics whose condition holds; a rule's finding in the test suite of a separate
    library the checkout carries (`embedded.library_test`: a vendored copy's `tests/`) is kept
    at `info`: that code is the library's, not the project's training code."""
    kept = [
        d
        for d in diagnostics
        if d.condition is None or condition_holds(d.condition, facts, config.precision, d.filename, config.root)
    ]
    tests: Dict[Optional[str], bool] = {}  # filename -> library_test, asked once per file here (140,000 findings of one file)
    return [_library_test_info(d, config, tests) if d.severity is not Severity.INFO and _rule_finding(d) else d for d in kept]


def _rule_finding(d: Diagnostic) -> bool:
    return d.code not in (SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE) and not is_internal_error(d)


def _library_test_info(d: Diagnostic, config: Config, tests: Dict[Optional[str], bool]) -> Diagnostic:
    found = tests.get(d.filename)
    if found is None:
        from ..model.embedded import library_test

        found = tests[d.filename] = library_test(d.filename, config.root)
    if not found:
        return d
    lowered = copy.copy(d)
    lowered.severity = Severity.INFO
    return lowered


def read_file(path: str, data: Optional[bytes] = None) -> Tuple[Optional[str], Optional[str]]:
    """(text, None) or (None, a one-line reason the file cannot be read). `data`: the file's
    bytes when the caller has read them already (to hash them), so they are read once."""
    from ..core.safe_read import NotRegularFile, read_bytes

    try:
        if data is None:
            data = read_bytes(path)  # never opens a pipe, socket or device
    except NotRegularFile as exc:
        return None, exc.strerror
    except FileNotFoundError:
        if os.path.islink(path):
            return None, f"broken symbolic link (to {os.readlink(path)!r})"
        return None, "no such file or directory"
    except IsADirectoryError:
        return None, "is a directory"
    except PermissionError:
        return None, "permission denied"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except ValueError as exc:  # a NUL byte in the path
        return None, f"invalid path: {exc}"
    try:
        return decode_source(data), None
    except UnicodeDecodeError as exc:
        return None, _decode_problem(data, exc)
    except (SyntaxError, LookupError) as exc:
        # tokenize.detect_encoding: a bad or unknown coding cookie, or bytes that are not UTF-8
        # in the first two lines of a file without one
        msg = str(exc.args[0] if exc.args else exc)
        if "invalid or missing encoding declaration" in msg:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as err:
                return None, _decode_problem(data, err)
        return None, f"cannot decode: {msg}"


def _decode_problem(data: bytes, exc: UnicodeDecodeError) -> str:
    row = data.count(b"\n", 0, exc.start) + 1
    byte = data[exc.start : exc.start + 1].hex()
    if exc.encoding.replace("_", "-").lower() in ("utf-8", "utf-8-sig", "utf8"):
        return f"cannot decode: byte 0x{byte} on line {row} is not UTF-8 and no coding cookie (`# -*- coding: ... -*-`) names another encoding"
    return f"cannot decode: byte 0x{byte} on line {row} is not valid {exc.encoding}"
