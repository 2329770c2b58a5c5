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


def _calls_for(monkeypatch, make, owner, name, sizes=(20, 40)):
    out = []
    for n in sizes:
        with monkeypatch.context() as m:
            calls = _count(m, owner, name)
            found = lint_source(make(n), "x.py", Config(select=("ALL",), file_timeout=0))
            out.append((calls[0], len(found)))
    return out


def _linear(counts):
    (small, found_small), (big, found_big) = counts
    assert found_big > found_small > 0, "the pattern must produce findings"
    assert big <= 2.2 * small + 10, counts


def test_dtype_of_a_reassigned_name_is_linear(monkeypatch):
    """`scores = scores.masked_fill(...)` n times: known_dtype was asked O(n^10) times."""
    make = lambda n: "import torch\ndef f(q, k, mask):\n    scores = (q @ k).half()\n" + "    scores = scores.masked_fill(mask, -1e9)\n" * n  # noqa: E731
    _linear(_calls_for(monkeypatch, make, ModuleContext, "known_dtype", sizes=(8, 16)))


def test_additive_mask_chain_is_linear(monkeypatch):
    make = lambda n: "import torch\nmodel.half()\ndef f(q, k, mask):\n    scores = q @ k\n" + "    scores = torch.softmax(scores + (1 - mask) * -1e9, -1)\n" * n  # noqa: E731
    _linear(_calls_for(monkeypatch, make, ModuleContext, "known_dtype", sizes=(8, 16)))


def test_amp301_dtype_guards_are_read_once_per_scope(monkeypatch):
    make = lambda n: "import torch\nscores = torch.randn(8, 8, dtype=torch.float16)\n" + "".join(  # noqa: E731
        f"s{i} = scores.masked_fill(scores > k, -1e9)\n" for i in range(n)
    )
    _linear(_calls_for(monkeypatch, make, _amp301(), "_suites", sizes=(50, 100)))


def test_amp301_named_constants_are_matched_once(monkeypatch):
    make = lambda n: "import torch\nmodel.half()\n" + "".join(f"NEG{i} = -1e9\n" for i in range(n)) + "def f(x, m):\n" + "".join(  # noqa: E731
        f"    y{i} = x.masked_fill(m, NEG{i})\n" for i in range(n)
    )
    _linear(_calls_for(monkeypatch, make, _amp301(), "_args", sizes=(50, 100)))


def test_amp101_clips_read_back_to_their_backward(monkeypatch):
    from amplint.engine.registry import rules_by_code

    rule = importlib.import_module(rules_by_code()["AMP101"].__module__)
    step = (
        "        scaler.scale(loss).backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(opt)\n        scaler.update()\n"
    )
    make = lambda n: "import torch\nscaler = torch.amp.GradScaler('cuda')\ndef train(model, opt, loader):\n    for x in loader:\n" + step * n  # noqa: E731
    _linear(_calls_for(monkeypatch, make, rule, "exclusive", sizes=(20, 40)))


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
