#!/usr/bin/env python3
"""Where a cold run's CPU time goes, per phase and per rule (run by hand; not a test).

    python benchmarks/profile_cold.py PATH [--select ALL] [--cprofile OUT.prof] [--top 30]
    python benchmarks/profile_cold.py PATH --warm [--cache-dir DIR]   # a warm run's phases

`--warm`: the same timers over a run with the cache (`--cache-dir`, default a fresh temporary
folder), after one untimed run that fills it: the cache's load, its lookups, the conditions'
walks of library copies and the rest of a warm run (`--jobs 1`; a warm run starts no pool).

Lints PATH in this process (`--jobs 1`, no cache, the analysis thread run inline so that
the timers and cProfile see it) with `process_time` timers wrapped around the phases:
discovery, the gates, the docstring second look, the excerpt cuts, libcst's parse, the AMP
model, each rule's per-file check, the text-only rules, the text index, the summaries made
in the lint, the facts pass, the cross-file pass and the report. Each timer counts its own
time only (a timed call inside another timed call is charged to the inner one), so the rows
add up to the whole. A profile of where the time goes, not a benchmark: the wrappers cost a
little themselves (~1 us a call).
"""
from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOTALS: "collections.Counter[str]" = collections.Counter()
CALLS: "collections.Counter[str]" = collections.Counter()
_STACK: list = []
#: set while the cross-file pass runs: a phase timed there is reported as "cross-file pass: ..."
_IN_PASS: list = []


def _timed(label, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        clock = time.process_time
        start = clock()
        _STACK.append(0.0)
        try:
            return fn(*args, **kwargs)
        finally:
            took = clock() - start
            inner = _STACK.pop()
            name = label if not _IN_PASS or label.startswith("cross-file") else "cross-file pass: " + label
            TOTALS[name] += took - inner
            CALLS[name] += 1
            if _STACK:
                _STACK[-1] += took

    wrapper.__wrapped_by_profile__ = True
    return wrapper


def _listed(fn):
    """A rule's check, its findings made inside the timer (checks are generators)."""

    @functools.wraps(fn)
    def listed(*args, **kwargs):
        return list(fn(*args, **kwargs))

    return listed


def wrap(module: str, name: str, label: str, *also: str) -> None:
    """Wrap `module.name` (and the same function imported as `name` into the modules `also`)."""
    mod = importlib.import_module(module)
    owner, attr = mod, name
    if "." in name:
        cls, attr = name.split(".")
        owner = getattr(mod, cls)
    fn = getattr(owner, attr)
    if getattr(fn, "__wrapped_by_profile__", False):
        return
    if isinstance(owner, type) and isinstance(owner.__dict__.get(attr), classmethod):
        wrapped = classmethod(_timed(label, owner.__dict__[attr].__func__))
        setattr(owner, attr, wrapped)
        return
    timed = _timed(label, fn)
    setattr(owner, attr, timed)
    for other in also:
        m = importlib.import_module(other)
        if getattr(m, name.split(".")[-1], None) is fn:
            setattr(m, name.split(".")[-1], timed)


def install() -> None:
    from amplint.engine import pipeline, registry

    pipeline._run_on_big_stack = lambda fn, *args: fn(*args)  # inline: the timers see the work
    wrap("amplint.engine.discovery", "discover", "discovery", "amplint.engine.run")
    wrap("amplint.core.safe_read", "read_bytes", "read files", "amplint.engine.parallel")
    wrap("amplint.engine.pipeline", "decode_source", "read files")
    wrap("amplint.engine.cache", "file_digest", "read files", "amplint.engine.parallel")
    wrap("amplint.core.gating", "passing", "gates (passing)", "amplint.engine.registry")
    wrap("amplint.core.gating", "site_lines", "gates (site_lines)")
    wrap("amplint.core.gating", "not_torch_code", "gates (passing)")
    wrap("amplint.core.docstrings", "without_docstrings", "docstring second look")
    wrap("amplint.core.docstrings", "has_triple_quotes", "docstring second look")
    wrap("amplint.engine.excerpt", "excerpt", "excerpt cut")
    wrap("amplint.engine.excerpt", "pieces", "excerpt cut")
    wrap("amplint.engine.pipeline", "_python_refuses", "CPython parse (whole text, shared)")
    wrap("amplint.core.pyast", "parse", "CPython parse (whole text, shared)")
    wrap("amplint.engine.pipeline", "too_deep", "too_deep")
    wrap("amplint.model.parse", "parse_module", "libcst parse")
    wrap("amplint.model.context", "ModuleContext.build", "AMP model (ModuleContext.build)")
    wrap("amplint.model.positions", "positions_for", "positions") if hasattr(importlib.import_module("amplint.model.positions"), "positions_for") else None
    wrap("amplint.engine.pipeline", "apply_noqa", "noqa")
    wrap("amplint.engine.pipeline", "_unused_noqa", "noqa")
    wrap("amplint.model.project", "text_index", "text index")
    wrap("amplint.engine.crossfile", "summaries_ahead", "summaries in the lint")
    wrap("amplint.engine.parallel", "settle_facts", "facts pass", "amplint.engine.run")
    wrap("amplint.engine.crossfile", "Projects.__init__", "cross-file pass: Projects")
    wrap("amplint.engine.crossfile", "project_diagnostics", "cross-file pass (rest)")
    from amplint.engine import crossfile

    inner = crossfile.project_diagnostics

    def in_pass(*args, **kwargs):
        _IN_PASS.append(1)
        try:
            return inner(*args, **kwargs)
        finally:
            _IN_PASS.pop()

    crossfile.project_diagnostics = in_pass
    wrap("amplint.engine.crossfile", "_Store.universe", "universe")
    wrap("amplint.engine.crossfile", "_Store.summary", "summaries")
    wrap("amplint.engine.crossfile", "_Store.scale", "summaries")
    wrap("amplint.engine.crossfile", "_Store.remember", "remember")
    wrap("amplint.model.project.index", "scale_lazy", "scale_lazy", "amplint.engine.crossfile")
    wrap("amplint.model.project.index", "scale_universe", "scale_universe")
    wrap("amplint.model.project.graph", "Project.__init__", "Project()")
    wrap("amplint.model.project.summary", "summarize", "summaries")
    wrap("amplint.model.project.scale", "summarize", "summaries")
    wrap("amplint.model.project.scale", "summarize_both", "summaries")
    wrap("amplint.engine.crossfile", "merge", "cross-file pass")
    wrap("amplint.fix.fixer", "withdraw_failing_fixes", "fix check")
    wrap("amplint.engine.parallel", "open_cache", "cache: open and load", "amplint.cli")
    wrap("amplint.engine.cache", "Cache.lookup", "cache: lookups")
    wrap("amplint.engine.cache", "Cache.save", "cache: save")
    wrap("amplint.engine.parallel", "pending_conditions", "conditions (pending)")
    wrap("amplint.engine.pipeline", "resolve_conditions", "conditions (resolve)", "amplint.engine.run")
    wrap("amplint.model.embedded", "_is_copy", "conditions: library-copy walks")
    # the wrapper rules' per-file view (summaries made for them) and the lint's hand-over
    wrappers = importlib.import_module("amplint.model.project.wrappers")
    for name in ("file_view", "made_for"):
        if hasattr(wrappers, name):
            wrap("amplint.model.project.wrappers", name, "summaries in the lint")
    # every rule's per-file check, by code
    original_load = registry.RuleSpec.load

    def load(self):
        cls = original_load(self)
        for meth in ("check", "check_text"):
            fn = cls.__dict__.get(meth)
            if fn is not None and not getattr(fn, "__wrapped_by_profile__", False):
                setattr(cls, meth, _timed(f"rule {cls.code}", _listed(fn)))
        proj = cls.__dict__.get("check_project")
        if proj is not None and not getattr(proj, "__wrapped_by_profile__", False):
            setattr(cls, "check_project", _timed(f"cross-file pass: rule {cls.code}", _listed(proj)))
        return cls

    registry.RuleSpec.load = load


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--select", nargs="*", default=None)
    ap.add_argument("--cprofile", help="also write a cProfile of the run here")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--warm", action="store_true", help="time a warm run (the cache filled by an untimed run first)")
    ap.add_argument("--cache-dir", help="with --warm: the cache folder (default: a fresh temporary one)")
    args = ap.parse_args()

    import gc

    start_cpu, start_wall = time.process_time(), time.perf_counter()
    install()
    from amplint.core.config import Config

    config = Config()
    if args.select:
        import dataclasses

        config = dataclasses.replace(config, select=tuple(args.select))
    imports = time.process_time() - start_cpu
    cache_dir = None
    if args.warm:
        import tempfile

        from amplint import cli as _cli

        cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="amplint-profile-")
        child = os.fork()  # fills the cache, untimed, in a child: its in-process memos die with it
        if child == 0:
            try:
                _cli._run([args.path], config, None, jobs=1, cache_dir=cache_dir)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        TOTALS.clear()
        CALLS.clear()
    profiler = None
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    collections_before = sum(s["collections"] for s in gc.get_stats())
    run_cpu = time.process_time()
    from amplint import cli
    from amplint.report import renderer

    read: dict = {}
    diagnostics = _timed("run (rest)", cli._run)([args.path], config, None, jobs=1, cache_dir=cache_dir, read=read)
    text = _timed("report", lambda d: renderer("concise")(d, unsafe_fixes=True))(diagnostics)
    run_cpu = time.process_time() - run_cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    total = time.process_time() - start_cpu
    print(f"findings {len(diagnostics)}, read {read}, report {len(text)} chars")
    print(f"gc collections during the run: {sum(s['collections'] for s in gc.get_stats()) - collections_before}")
    print(f"imports before the run {imports:.2f} s CPU; run {run_cpu:.2f} s CPU; total {total:.2f} s CPU; wall {time.perf_counter() - start_wall:.2f} s")
    print("| phase | CPU (s) | calls |\n|---|---:|---:|")
    for label, secs in TOTALS.most_common(args.top):
        print(f"| {label} | {secs:.3f} | {CALLS[label]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
