"""Lint many files: the cache, worker processes, and project facts on demand.

`lint_files` returns one `FileResult` per file, in the order given, whatever
the number of processes: each worker lints whole files with exactly the
serial code (`dispatch.lint_path`), and results are put back by index, so a
parallel run is identical to a serial one.

Processes pay off only when there is enough to read: below `MIN_PARALLEL_BYTES`
of files to look at (after the cache), everything runs in this process.

`settle_facts` makes project-fact conditions exact even though files that
pass no rule's gate are never parsed: when a conditional diagnostic is still
undecided after the lint, the files that pass the *facts gate* (the text any
fact needs, see `FACT_TRIGGERS`) and were not parsed are parsed for their
facts only, until the conditions hold or no such file is left.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
from typing import Any, Callable, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from ..core.config import Config
from ..model.facts import ProjectFacts, condition_holds
from .cache import Cache, Stat, file_digest, now, stat_key
from ..core.safe_read import read_bytes

#: below this many bytes of files to read, one process is faster than several
MIN_PARALLEL_BYTES = 1 << 20
MIN_PARALLEL_FILES = 8

#: text without which a file cannot contribute a project fact (fp16, bf16,
#: dtype decided at run time, autocast): autocast regions, GradScalers,
#: `.half()`/`.bfloat16()`, `torch.float16`/`torch.half`/`torch.bfloat16`,
#: "float16"/"fp16"/"bf16"/"half" dtype strings, `HalfTensor`, custom_fwd/custom_bwd (autocast_aware).
#: tests/test_speed_facts.py proves it on every example and real file it has.
FACT_TRIGGERS: Tuple[str, ...] = ("autocast", "GradScaler", "half", "Half", "float16", "fp16", "bf16", "custom_fwd", "custom_bwd")


def passes_facts_gate(source: str) -> bool:
    return any(t in source for t in FACT_TRIGGERS)


def open_cache(config: Config, directory: Optional[str] = None) -> Cache:
    """The cache for this configuration: --cache-dir, $AMPLINT_CACHE_DIR or .amplint_cache."""
    from .cache import cache_dir, fingerprint
    from .pipeline import selected_rules

    codes, rules = selected_rules(config)
    extra = repr(sorted(r.key() for r in rules if hasattr(r, "key"))) + repr(FACT_TRIGGERS)
    return Cache(cache_dir(directory, config.root), fingerprint(config, codes, extra))


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------ one file (in any process)

_STATE: dict = {}


def _init(config: Config, rules: Sequence[Any], codes: FrozenSet[str], kind: str) -> None:
    _STATE.update(config=config, rules=rules, codes=codes, kind=kind)


Item = Tuple[int, str, Optional[str], bool]


def _work(item: Item) -> Tuple[int, Optional[Stat], Optional[str], float, Any]:
    """(index, path, digest on record, hash it?) -> (index, stat, digest, read time, result or None if unchanged).
    A file over `isolate.CONFINED_BYTES` is worked on in a forked child whose time and memory
    are bounded (engine/isolate.py)."""
    from . import isolate

    if isolate.confines(_size(item[1])):
        return _work_confined(item)
    return _work_here(item)


def _work_confined(item: Item) -> Tuple[int, Optional[Stat], Optional[str], float, Any]:
    from . import isolate
    from .pipeline import FAILED, SYNTAX_ERROR_CODE, TIMEOUT_NAME, FileResult, syntax_error

    config, codes, kind = _STATE["config"], _STATE["codes"], _STATE["kind"]
    index, path = item[0], item[1]
    read_at = now()
    how, value = isolate.run_confined(_work_here, (item,), config.file_timeout)
    if how == "ok":
        return value
    # never cached: the next run tries again; read but not analysed, as a lint past its budget in process
    result = FileResult(path=path, parsed=True, over_budget=True, read=FAILED)
    if kind == "lint" and SYNTAX_ERROR_CODE in codes:
        message = f"analysis {isolate.overrun(how, value, config.file_timeout)}; skipped"
        result.diagnostics.append(syntax_error(path, 1, 1, message, TIMEOUT_NAME))
    if kind == "facts":
        result = FileResult(path=path)  # no facts: as a facts pass past its budget gives
    return index, None, None, read_at, result


def _work_here(item: Item) -> Tuple[int, Optional[Stat], Optional[str], float, Any]:
    index, path, known, hashing = item
    config, rules, codes, kind = _STATE["config"], _STATE["rules"], _STATE["codes"], _STATE["kind"]
    st: Optional[Stat] = None
    digest: Optional[str] = None
    data: Optional[bytes] = None
    read_at = now()
    if hashing:
        try:
            st = stat_key(os.stat(path))
            data = read_bytes(path)
            digest = file_digest(data)
        except OSError:
            st = digest = data = None
        if known is not None and digest == known:
            return index, st, digest, read_at, None
    if kind == "facts":
        return index, st, digest, read_at, facts_of_path(path, config)
    from .dispatch import lint_path

    return index, st, digest, read_at, lint_path(path, config, rules, codes, data)


def facts_of_path(path: str, config: Config) -> Any:
    """A FileResult with only the file's project facts (no rule runs)."""
    from .pipeline import FileResult, read_file

    result = FileResult(path=path)
    if path.lower().endswith(".ipynb"):
        from .notebook import Notebook, NotebookError, read_notebook_text

        try:
            source: Optional[str] = Notebook.from_text(read_notebook_text(path)).source
        except (OSError, UnicodeDecodeError, NotebookError):
            source = None
    else:
        source, _ = read_file(path)
    if source is not None:
        facts = facts_of_source(source, path, config)
        if facts is not None:
            result.facts, result.parsed = facts, True
    return result


def facts_of_source(source: str, path: str, config: Config) -> Any:
    """The FileFacts of a whole text; None when it gives none (no fact trigger, or unparsable)."""
    if not passes_facts_gate(source):
        return None
    import libcst as cst

    from ..model.context import ModuleContext
    from ..model.parse import parse_module
    from .pipeline import run_guarded, too_deep

    if too_deep(source) is not None:  # libcst would overflow the C stack
        return None

    def build() -> Any:
        ctx = ModuleContext.build(parse_module(source), source, path, config)
        facts = ctx.facts
        ctx.release()
        return facts

    from .budget import BudgetExceeded, file_budget

    try:
        with file_budget(config.file_timeout):
            return run_guarded(build)
    except (cst.ParserSyntaxError, RecursionError, MemoryError, BudgetExceeded):
        return None
    except Exception:  # a bug in the AMP model: the file gives no facts; the lint pass reports such bugs
        return None


def whole_file_facts(result: Any, source: str, config: Config) -> Any:
    """`result.facts`, completed by reading the whole text when only an excerpt was parsed.

    For callers that lint one text as a whole project (stdin, `lint_source`,
    fixing one file); a run over many files completes facts in `settle_facts`.
    """
    if result.parsed or not result.diagnostics:
        return result.facts
    return facts_of_source(source, result.path, config) or result.facts


# ------------------------------------------------------------------ many files


def lint_files(
    files: Sequence[str],
    config: Config,
    rules: Sequence[Any],
    codes: FrozenSet[str],
    jobs: int = 1,
    cache: Optional[Cache] = None,
    kind: str = "lint",
    stop: Optional[Callable[[Any], bool]] = None,
) -> List[Any]:
    """One result per file, in order. `stop(result)` returning True ends the run
    early (results not computed are None)."""
    results: List[Any] = [None] * len(files)
    todo: List[Item] = []
    size = 0
    for i, path in enumerate(files):
        if cache is None:
            todo.append((i, path, None, False))
            continue
        try:
            st: Optional[Stat] = stat_key(os.stat(path))
        except OSError:
            st = None
        hit, known = cache.lookup(kind, path, st)
        if hit is not None:
            results[i] = hit
            if stop is not None and stop(hit):
                return results
            continue
        todo.append((i, path, known, True))
        size += st[1] if st else 0
    if cache is None and jobs > 1 and len(todo) >= MIN_PARALLEL_FILES:
        size = sum(_size(item[1]) for item in todo)
    parallel = jobs > 1 and len(todo) >= MIN_PARALLEL_FILES and size >= MIN_PARALLEL_BYTES
    _init(config, rules, codes, kind)
    outputs = _run_parallel(todo, jobs) if parallel else map(_work, todo)
    try:
        for index, st, digest, read_at, result in outputs:
            path = files[index]
            if result is None:  # bytes unchanged: reuse
                result = cache.reuse(kind, path, st, read_at) if cache is not None and st is not None else None
                if result is None:
                    _, _, _, _, result = _work((index, path, None, False))
            elif cache is not None and st is not None and digest is not None:
                cache.store(kind, path, st, digest, read_at, result)
            results[index] = result
            if stop is not None and stop(result):
                break
    finally:
        close = getattr(outputs, "close", None)
        if close is not None:
            close()
    return results


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _run_parallel(todo: List[Item], jobs: int) -> Iterator[Tuple[int, Optional[Stat], Optional[str], float, Any]]:
    """Results in the order of `todo`, computed by `jobs` processes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        context = multiprocessing.get_context("fork")  # workers inherit what is imported
    else:
        context = multiprocessing.get_context("spawn")
    if context.get_start_method() == "fork" and _STATE["kind"] == "lint":
        _preload([item[1] for item in todo], _STATE["rules"])
    workers = min(jobs, len(todo))
    # big files first would balance better, but order must not change what
    # is computed, only when: keep the given order and use small chunks
    chunksize = max(1, min(32, len(todo) // (workers * 8)))
    executor = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init,
        initargs=(_STATE["config"], _STATE["rules"], _STATE["codes"], _STATE["kind"]),
    )

    def results() -> Iterator[Tuple[int, Optional[Stat], Optional[str], float, Any]]:
        try:
            for out in executor.map(_work, todo, chunksize=chunksize):
                yield out
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    return results()


def _preload(paths: Sequence[str], rules: Sequence[Any]) -> None:
    """Import libcst and the AMP model before the workers fork, when the run will parse
    something: the forked workers inherit them instead of each importing libcst again (one
    import per run instead of one per process; see docs/performance.md). Whether a file
    will be parsed is probed on the first files of the run (`_will_parse`); a run whose
    files pass no gate imports libcst nowhere. (The project pass needs no libcst: the
    rules' `check_project` read only the `ast` summaries.)"""
    if _will_parse(paths, rules):
        from ..model.context import ModuleContext  # noqa: F401  (libcst and the collector)


#: how much of a pool run's files the parent reads before forking, looking for one that passes a gate
PROBE_BYTES = 1 << 20


def _will_parse(paths: Sequence[str], rules: Sequence[Any]) -> bool:
    """Whether one of the first files (up to `PROBE_BYTES`) passes a selected rule's gate.
    A speed hint only: a miss just lets each worker import libcst when it first parses."""
    from ..core.gating import passing
    from .pipeline import decode_source

    read = 0
    for path in paths:
        if read >= PROBE_BYTES:
            return False
        if path.lower().endswith(".ipynb"):
            continue
        try:
            data = read_bytes(path)
            source = decode_source(data)
        except (OSError, ValueError, SyntaxError, LookupError):  # the worker reports it
            continue
        read += len(data)
        if passing(rules, source):
            return True
    return False


# ------------------------------------------------------------------ project facts


#: every fact on: a condition that fails even so fails on what no fact decides (the file is a
#: script no fp16 reaches, a kernel's source), and reading more files' facts cannot help it
_ALL_FACTS = ProjectFacts(**{f.name: True for f in dataclasses.fields(ProjectFacts)})


def pending_conditions(results: Sequence[Any], facts: ProjectFacts, config: Config) -> set:
    """The conditions some diagnostic needs that the facts do not (yet) satisfy, and more facts could."""
    return {
        d.condition
        for r in results
        for d in r.diagnostics
        if d.condition is not None
        and not condition_holds(d.condition, facts, config.precision, d.filename, config.root)
        and condition_holds(d.condition, _ALL_FACTS, config.precision, d.filename, config.root)
    }


def settle_facts(
    files: Sequence[str],
    results: Sequence[Any],
    config: Config,
    jobs: int = 1,
    cache: Optional[Cache] = None,
) -> ProjectFacts:
    """The project facts, reading unparsed files' facts only while a condition needs them.

    Facts only ever turn on, so a condition that holds stays held: the facts
    pass stops as soon as every pending condition holds.
    """
    facts = ProjectFacts.from_files(r.facts for r in results)
    pending = pending_conditions(results, facts, config)
    rest = [f for f, r in zip(files, results) if not r.parsed]
    if not pending or not rest:
        return facts
    state = {"facts": facts}

    def decided(result: Any) -> bool:
        merged = ProjectFacts.from_files([state["facts"], result.facts])  # type: ignore[list-item]
        state["facts"] = merged
        return all(condition_holds(c, merged, config.precision) for c in pending)

    lint_files(rest, config, (), frozenset(), jobs=jobs, cache=cache, kind="facts", stop=decided)
    return state["facts"]
