"""The per-file cost is linear in the file: counted in work done, not in seconds.

Each case lints a generated file of n and 2n repetitions of one pattern and counts
the calls of the function that used to rescan the file per site; doubling the file
must at most (about) double the count. Wall-clock scaling is in benchmarks/scaling.py.
"""
from __future__ import annotations

import importlib


from amplint import Config, lint_source
from amplint.model.context import ModuleContext



def _amp301():
    from amplint.engine.registry import rules_by_code

    return importlib.import_module(rules_by_code()["AMP301"].__module__)


def _count(monkeypatch, owner, name):
    calls = [0]
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting if not isinstance(real, staticmethod) else staticmethod(counting))
    return calls


def _calls_for(monkeypatch, make, owner, name, sizes=(20, 40), select=("ALL",)):
    out = []
    for n in sizes:
        with monkeypatch.context() as m:
            calls = _count(m, owner, name)
            found = lint_source(make(n), "x.py", Config(select=select, file_timeout=0))
            out.append((calls[0], len(found)))
    return out


def _linear(counts):
    (small, found_small), (big, found_big) = counts
    assert found_big > found_small > 0, "the pattern must produce findings"
    assert big <= 2.2 * small + 10, counts


def test_dtype_of_a_reassigned_name_is_linear(monkeypatch):
    """`scores = scores.masked_fill(...)` n times: known_dtype was asked O(n^10) times."""
    make = lambda n: "import torch\ndef f(q, k, mask):\n    scores = (q @ k).half()\n" + "".join(f"    scores = scores.masked_fill(mask, -{10**9 + i}.0)\n" for i in range(n))  # noqa: E731
    # (distinct constants: repeated fills of one constant are one finding)
    _linear(_calls_for(monkeypatch, make, ModuleContext, "known_dtype", sizes=(8, 16)))


def test_additive_mask_chain_is_linear(monkeypatch):
    make = lambda n: "import torch\nmodel.half()\ndef f(q, k, mask):\n    scores = q @ k\n" + "    scores = torch.softmax(scores + (1 - mask) * -1e9, -1)\n" * n  # noqa: E731
    _linear(_calls_for(monkeypatch, make, ModuleContext, "known_dtype", sizes=(8, 16)))


def test_amp301_dtype_guards_are_read_once_per_scope(monkeypatch):
    make = lambda n: "import torch\nscores = torch.randn(8, 8, dtype=torch.float16)\n" + "".join(  # noqa: E731
        f"s{i} = scores.masked_fill(scores > k, -{10**9 + i}.0)\n" for i in range(n)
    )
    _linear(_calls_for(monkeypatch, make, _amp301(), "_suites", sizes=(50, 100)))


def test_amp301_named_constants_are_matched_once(monkeypatch):
    make = lambda n: "import torch\nmodel.half()\n" + "".join(f"NEG{i} = -{10**9 + i}.0\n" for i in range(n)) + "def f(x, m):\n" + "".join(  # noqa: E731
        f"    y{i} = x.masked_fill(m, NEG{i})\n" for i in range(n)
    )
    _linear(_calls_for(monkeypatch, make, _amp301(), "_args", sizes=(50, 100)))


def test_amp101_clips_read_back_to_their_backward(monkeypatch):
    from amplint.engine.registry import rules_by_code

    import amplint.model

    importlib.import_module(rules_by_code()["AMP101"].__module__)  # the rule imports `exclusive` where it runs
    step = (
        "        scaler.scale(loss).backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(opt)\n        scaler.update()\n"
    )
    make = lambda n: "import torch\nscaler = torch.amp.GradScaler('cuda')\ndef train(model, opt, loader):\n    for x in loader:\n" + step * n  # noqa: E731
    # the package's `exclusive` is what every rule's function-local import reads: count AMP101's alone
    _linear(_calls_for(monkeypatch, make, amplint.model, "exclusive", sizes=(20, 40), select=("AMP101",)))


# n copies of a training step in one loop: AMP104 paired every scaled backward with every
# `scaler.step`, and the step slices of AMP101-AMP104's findings rescanned the function's
# events from its start for each finding.
_TRAIN = "import torch\nscaler = torch.amp.GradScaler('cuda')\ndef train(model, opt, loader):\n    for i, x in enumerate(loader):\n"


def _rule(code):
    from amplint.engine.registry import rules_by_code

    return importlib.import_module(rules_by_code()[code].__module__)


def test_amp104_pairs_alike_backwards_once(monkeypatch):
    step = (
        "        scaler.scale(loss).backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(opt)\n        scaler.update()\n"
    )
    _linear(_calls_for(monkeypatch, lambda n: _TRAIN + step * n, _rule("AMP104"), "_boundary"))


def test_amp104_reads_each_boundary_class_once(monkeypatch):
    """n accumulation boundaries `if (i + 1) % accum == 0:` with equal tests: whether the loop
    accumulates is decided once, not once per (backward, step) pair."""
    step = (
        "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
        "        if (i + 1) % accum == 0:\n"
        "            scaler.step(opt)\n            scaler.update()\n            opt.zero_grad()\n"
    )
    counts = _calls_for(monkeypatch, lambda n: _TRAIN + step * n, _rule("AMP104"), "_equivalent_in")
    _linear(counts)


def test_step_slices_read_forward_from_the_finding(monkeypatch):
    """Event orders read while building n findings' step slices and autocast regions."""
    from amplint.model.types import Event

    step = (
        "        with torch.autocast('cuda'):\n            loss = model(x)\n"
        "        scaler.scale(loss).backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(opt)\n        scaler.update()\n        opt.zero_grad()\n"
    )
    out = []
    for n in (20, 40):
        reads = [0]
        order = Event.order.fget

        def counting(self, _order=order, _reads=reads):
            _reads[0] += 1
            return _order(self)

        with monkeypatch.context() as m:
            m.setattr(Event, "order", property(counting))
            found = lint_source(_TRAIN + step * n, "x.py", Config(select=("ALL",), file_timeout=0))
        assert sum(d.code == "AMP101" for d in found) == n
        assert all(d.data.get("step_source") for d in found if d.code == "AMP101")
        out.append((reads[0], len(found)))
    _linear(out)


def test_scope_events_and_calls_are_in_source_order():
    """`model/event_index.py` bisects a scope's events and calls by order number: they must be
    recorded in ascending order (every rule example and fixture, with helpers inlined)."""
    import pathlib

    import libcst as cst

    from amplint.engine.registry import all_rules

    sources = [ex.code for rule in all_rules() for ex in list(rule.VALID) + list(rule.INVALID)]
    sources += [p.read_text() for p in sorted(pathlib.Path(__file__).parent.parent.joinpath("fixtures").glob("*.py"))]
    scopes = 0
    for source in sources:
        source = source.lstrip("\n")
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        ctx = ModuleContext.build(module, source, "t.py")
        for scope in ctx.scopes:
            for items in (scope.events, scope.calls):
                orders = [item.order for item in items]
                assert orders == sorted(orders), source
            scopes += bool(scope.events)
    assert scopes > 50


# The paths below were quadratic in the number of training steps of one function: guard
# clauses reread the statements before every event, `exclusive()` compared every frame of
# one path with every frame of the other, AMP104 paired every two unscales, AMP102 read the
# function's events from its start for each `optimizer.step()`, AMP103 reread them for each
# `scaler.step()`. Work is counted as lines run in the module that did it (no timing).

def _lines_run(source: str, files) -> int:
    """Lines executed in `files` (module paths) while linting `source` (threads included:
    the file is linted on a thread with a large stack)."""
    import sys
    import threading

    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename in files else None

    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        lint_source(source, "x.py", Config(select=("ALL",), file_timeout=0))
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return count[0]


def _work_is_linear(make, files, sizes=(10, 20)):
    small, big = (_lines_run(make(n), files) for n in sizes)
    assert 0 < small and big <= 2.2 * small + 50, (small, big)


def test_guard_clauses_are_read_once_per_block(monkeypatch):
    """n accumulation boundaries in one loop: each block's guard clauses are listed once."""
    from amplint.model import guards

    step = (
        "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
        "        if (i + 1) % accum == 0:\n"
        "            scaler.step(opt)\n            scaler.update()\n            opt.zero_grad()\n"
    )
    _linear(_calls_for(monkeypatch, lambda n: _TRAIN + step * n, guards, "_exits"))


def test_guarded_paths_keep_their_frames_in_order():
    """The per-block summary gives the same guarded paths as reading the block: guards of
    one block latest first, after the frames that enclose them; none from after the statement."""
    import libcst as cst

    from amplint.model.guards import GuardedPaths

    source = (
        "def f(loader):\n    if a:\n        return\n    for x in loader:\n        if b:\n            continue\n"
        "        if c: break\n        if d:\n            work()\n        if e:\n            continue\n        step()\n"
        "        if z:\n            return\n"
    )
    ctx = ModuleContext.build(cst.parse_module(source), source, "t.py")
    guarded = GuardedPaths(ctx)
    calls = {c.dotted: guarded.path(c.path, c.statement) for c in ctx.calls if c.dotted in ("work", "step")}
    described = {k: [(f.kind, ctx.module.code_for_node(f.test) if f.test is not None else None) for f in p] for k, p in calls.items()}
    assert described["work"] == [("else", "a"), ("loop", None), ("else", "c"), ("else", "b"), ("if", "d")]
    assert described["step"] == [("else", "a"), ("loop", None), ("else", "e"), ("else", "c"), ("else", "b")]


def test_exclusive_files_frames_by_condition(monkeypatch):
    """Two paths of k guard frames each: `exclusive()` no longer deep-compares every pair."""
    import libcst as cst

    from amplint.model import paths
    from amplint.model.guards import GuardedPaths

    def compared(k):
        source = "def f(loader):\n    for x in loader:\n" + "        if skip(x):\n            continue\n" * k
        source += "        first()\n        if not skip(x):\n            second()\n        if skip(x):\n            third()\n"
        ctx = ModuleContext.build(cst.parse_module(source), source, "t.py")
        guarded = GuardedPaths(ctx)
        at = {c.dotted: guarded.path(c.path, c.statement) for c in ctx.calls if c.dotted in ("first", "second", "third")}
        with monkeypatch.context() as m:
            calls = _count(m, paths, "_opposite_tests")
            assert not paths.exclusive(at["first"], at["second"])
            assert paths.exclusive(at["second"], at["third"]) and paths.exclusive(at["first"], at["third"])
            assert len(at["first"]) == k + 1
        return calls[0]

    small, big = compared(20), compared(40)
    assert big <= 2.2 * small + 10, (small, big)


def test_amp104_second_unscales_read_back_to_the_last_update():
    rule = _rule("AMP104")
    step = (
        "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
        "        if log_grads:\n            scaler.unscale_(opt)\n"
        "        scaler.step(opt)\n        scaler.update()\n"
    )
    found = [d.code for d in lint_source(_TRAIN + step * 3, "x.py", Config(select=("AMP104",)))]
    assert found == ["AMP104"] * 3
    _work_is_linear(lambda n: _TRAIN + step * n, {rule.__file__})


def test_amp102_reads_back_from_each_optimizer_step():
    rule = _rule("AMP102")
    step = "        scaler.scale(loss).backward()\n        opt.step()\n        scaler.update()\n"
    found = [d.code for d in lint_source(_TRAIN + step * 3, "x.py", Config(select=("AMP102",)))]
    assert found == ["AMP102"] * 3
    _work_is_linear(lambda n: _TRAIN + step * n, {rule.__file__})


def test_amp103_decides_each_loop_once():
    """n steps in one loop that is updated once at its end: whether the loop updates is
    decided once, not by rereading the function for each step (without the update: found)."""
    rule = _rule("AMP103")
    step = "        scaler.scale(loss).backward()\n        scaler.step(opt)\n"
    make = lambda n: _TRAIN + step * n + "        scaler.update()\n"  # noqa: E731
    assert [d.code for d in lint_source(_TRAIN + step * 3, "x.py", Config(select=("AMP103",)))] == ["AMP103"]
    assert not lint_source(make(3), "x.py", Config(select=("AMP103",)))
    _work_is_linear(make, {rule.__file__})


def test_gate_site_rows_match_counting_newlines():
    """AMP301's and AMP302's excerpt lines come from one newline index (bisected per site, not
    the newlines before each site counted again): the same rows as counting them, multi-byte
    characters and names used on other lines included."""
    from amplint.core import gates

    source = "é = 'ü'\nimport torch\nNEG = -1e9\n" + "".join(
        f"s{i} = x.masked_fill(m, -1e9)  # ü\ny{i} = x / (z + 1e-12) if c else x.masked_fill(m, NEG)\n"
        for i in range(30)
    )
    data = source.encode()

    def row(offset):
        return data.count(b"\n", 0, offset) + 1

    expected = set()
    for start, name in gates._overflowing_literal_site_list(source):
        expected.add(row(start))
        if name:
            expected |= {row(m.start()) for m in __import__("re").finditer(rb"\b%s\b" % name, data)}
    assert gates.overflowing_literal_lines(source) == expected and len(expected) == 61
    tiny = {row(start) for start in gates._tiny_literal_site_list(source)}
    assert len(tiny) == 30 and gates.underflowing_eps_lines(source) == tiny


def test_step_slices_split_the_file_once_and_share_a_loop_body():
    """n AMP104 findings in one accumulation loop: the file is split into lines once, not once
    per finding, and the loop body (the verifier's micro-batch) is one string all of them hold
    (it was a copy of the n-step body per finding: n^2 memory)."""
    import libcst as cst

    from amplint.engine.registry import rules_by_code

    cls = rules_by_code()["AMP104"]
    step = (
        "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
        "        if (i + 1) % accum == 0:\n"
        "            scaler.step(opt)\n            scaler.update()\n            opt.zero_grad()\n"
    )
    splits = []
    for n in (10, 20):
        calls = [0]

        class Counting(str):
            def splitlines(self, *args, **kwargs):
                calls[0] += 1
                return str.splitlines(self, *args, **kwargs)

        source = _TRAIN + step * n
        ctx = ModuleContext.build(cst.parse_module(source), Counting(source), "x.py")
        found = list(cls().check(ctx))
        assert len(found) == n
        bodies = {id(d.data["step_source"]) for d in found}
        assert len(bodies) == 1 and found[0].data["step_source"].count("scaler.unscale_(opt)") == n
        splits.append(calls[0])
    assert splits[1] <= splits[0], splits
