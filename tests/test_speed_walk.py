"""`amplint.model.walk.walk` fires the same hooks in the same order as libcst's `visit`,
and the AMP model built with it equals the one built with `visit`."""
from __future__ import annotations

import glob
import importlib.util
import os
import sysconfig

import libcst as cst
import pytest

from amplint.core.rule import example_source
from amplint.engine.registry import all_rules
from amplint.model.collector import _Collector
from amplint.model.context import ModuleContext
from amplint.model.walk import SKIP, own_hook, walk

HERE = os.path.dirname(os.path.abspath(__file__))


def _real_files():
    """Large real files that exist on every machine: the stdlib, torch's amp/optim code, amplint."""
    stdlib = sysconfig.get_paths()["stdlib"]
    names = ["dataclasses.py"]
    files = [os.path.join(stdlib, n) for n in names]
    spec = importlib.util.find_spec("torch")  # finds, does not import
    if spec is not None and spec.submodule_search_locations:
        root = list(spec.submodule_search_locations)[0]
        for pattern in ("amp/grad_scaler.py", "amp/autocast_mode.py", "optim/adam.py", "nn/utils/clip_grad.py"):
            files.extend(sorted(glob.glob(os.path.join(root, pattern))))
    return [f for f in files if os.path.isfile(f)]


def _sources():
    """Real files one by one; every rule's examples together (one case per rule)."""
    for f in _real_files():
        with open(f, encoding="utf-8") as fh:
            yield pytest.param([fh.read()], id=os.path.relpath(f, os.path.dirname(f) + "/.."))
    for rule in all_rules():
        yield pytest.param([example_source(c.code) for c in (*rule.VALID, *rule.INVALID)], id=f"{rule.code}-examples")
    yield pytest.param(
        [
            'x = f"{a:{width(1)}}" + f"{b!r}"\nmatch p:\n    case {"k": v} if g(v):\n        h(v)\n'
            "async def g():\n    async with autocast() as a, b:\n        await c(lambda q=1e9: -q)\n"
            "with (a as b, c()):\n    pass\n"
        ],
        id="f-strings-match-async",
    )


_ATTRS = [
    "If_body", "If_orelse", "For_body", "For_orelse", "While_body", "While_orelse",
    "Try_body", "Try_orelse", "Try_finalbody", "With_body", "Call_func", "Call_args", "FormattedStringExpression_format_spec",
]


class _Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.events = []

    def on_visit(self, node):
        if type(node) not in SKIP:
            self.events.append(("visit", type(node).__name__, id(node)))
        return True

    def on_leave(self, original_node):
        if type(original_node) not in SKIP:
            self.events.append(("leave", type(original_node).__name__, id(original_node)))


def _attr_hook(kind, name):
    def hook(self, node):
        self.events.append((kind, name, id(node)))

    return hook


for _a in _ATTRS:
    setattr(_Recorder, f"visit_{_a}", _attr_hook("enter", _a))
    setattr(_Recorder, f"leave_{_a}", _attr_hook("exit", _a))


@pytest.mark.parametrize("sources", list(_sources()))
def test_walk_fires_the_hooks_libcst_fires(sources):
    for source in sources:
        module = cst.parse_module(source)
        by_libcst, by_walk = _Recorder(), _Recorder()
        module.visit(by_libcst)
        walk(module, by_walk)
        assert by_walk.events == by_libcst.events


def _summary(ctx: ModuleContext):
    def path(p):
        return tuple((f.kind, id(f.node)) for f in p)

    def region(r):
        return None if r is None else (id(r.node), r.device, r.dtype, r.enabled, r.framework)

    return {
        "calls": [
            (c.order, sorted(c.qualnames), c.dotted, c.method, c.receiver_dotted, c.scope.name, path(c.path), region(c.region), id(c.statement))
            for c in ctx.calls
        ],
        "assignments": [(a.target, a.order, a.scope.name, path(a.path), region(a.region), a.unpacked) for a in ctx.assignments],
        "regions": [region(r) for r in ctx.regions],
        "literals": [(l.value, [type(p).__name__ for p in l.parents], l.keyword, l.position, id(l.statement)) for l in ctx.literals],
        "scopes": [(s.name, s.params, [(e.kind, e.order, e.scaler, e.optimizer, e.target) for e in s.events]) for s in ctx.scopes],
        "scalers": {k: (v.enabled, v.device, v.is_parameter) for k, v in ctx.scalers.items()},
        "optimizers": {k: (v.qualname, v.fused, v.prepared) for k, v in ctx.optimizers.items()},
        "casts": [(c.call.order, c.dtype, c.subject) for c in ctx.low_precision_casts],
        "dtype_refs": [(d, id(n)) for d, n in ctx.dtype_refs],
        "facts": ctx.facts,
    }


@pytest.mark.parametrize("sources", list(_sources()))
def test_model_built_by_walk_equals_model_built_by_visit(sources, monkeypatch):
    import amplint.model.context as context

    for source in sources:
        module = cst.parse_module(source)
        fast = _summary(ModuleContext.build(module, source))
        with monkeypatch.context() as m:
            # libcst's visit calls on_visit_attribute, which finds the per-field hooks itself
            m.setattr(context, "walk", lambda node, visitor: node.visit(visitor))
            slow = _summary(ModuleContext.build(module, source))
        assert fast == slow


def test_collector_has_no_hooks_for_skipped_nodes():
    for t in SKIP:
        assert own_hook(_Collector, f"visit_{t.__name__}") is None
        assert own_hook(_Collector, f"leave_{t.__name__}") is None


@pytest.mark.parametrize("sources", list(_sources())[:3])
def test_parent_map_equals_parent_node_provider(sources):
    from libcst.metadata import MetadataWrapper, ParentNodeProvider

    from amplint.model.walk import parent_map

    for source in sources:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        expected = dict(wrapper.resolve(ParentNodeProvider))
        assert parent_map(wrapper.module) == expected


def _references(ctx: ModuleContext):
    refs = [
        (id(r.node), sorted(r.qualnames), r.root, r.use, tuple((f.kind, id(f.node), id(f.test)) for f in r.path),
         id(r.call), id(r.decorator), r.annotation)
        for r in ctx.references()
    ]
    return refs, sorted(ctx._rebound)


@pytest.mark.parametrize("sources", list(_sources()))
def test_references_by_walk_equal_references_by_visit(sources, monkeypatch):
    """`ModuleContext.references` walks the tree with `walk`: the same references, paths and
    rebound names as libcst's `visit` gives (AMP001/002/503 read them)."""
    import amplint.model.context as context

    for source in sources:
        module = cst.parse_module(source)
        ctx = ModuleContext.build(module, source)
        fast = _references(ctx)
        with monkeypatch.context() as m:
            m.setattr(context, "walk", lambda node, visitor: node.visit(visitor))
            ctx._references = None
            slow = _references(ctx)
        assert fast == slow


def test_reference_collector_has_no_hooks_for_skipped_nodes():
    from amplint.model.references import _ReferenceCollector

    for t in SKIP:
        assert own_hook(_ReferenceCollector, f"visit_{t.__name__}") is None
        assert own_hook(_ReferenceCollector, f"leave_{t.__name__}") is None
