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
