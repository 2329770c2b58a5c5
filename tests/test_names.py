"""The import-alias table (amplint/model/names.py) answers like libcst's QualifiedNameProvider.

The AMP model asks "what may this callee / attribute chain refer to" for every
call; QualifiedNameProvider + ScopeProvider answer that at several times the
cost of the parse. These tests run both on the alias forms real training code
uses and require the same answer for every Name and Attribute the provider
resolves through an import.
"""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, QualifiedNameProvider, QualifiedNameSource

from amplint.model.names import ImportTable, dotted_name

CASES = {
    "import-as": """
        import torch as T
        T.autocast("cuda")
        s = T.amp.GradScaler("cuda")
        T.nn.utils.clip_grad_norm_(p, 1.0)
    """,
    "from-import-module": """
        from torch import nn
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        layer = nn.Linear(4, 4)
    """,
    "from-import-as": """
        from torch.cuda.amp import autocast as ac, GradScaler
        with ac():
            y = f(x)
        scaler = GradScaler()
    """,
    "submodule-as": """
        import torch.nn.functional as F
        y = F.binary_cross_entropy(F.sigmoid(x), t)
    """,
    "dotted-import": """
        import torch.cuda.amp
        import torch.nn.utils
        with torch.cuda.amp.autocast():
            pass
        torch.nn.utils.clip_grad.clip_grad_norm_(p, 1.0)
    """,
    "nested-attribute-chains": """
        import torch
        from torch import amp
        x = torch.nn.functional.softmax(y, dim=-1).half()
        amp.autocast_mode.autocast("cuda", dtype=torch.float16)
        torch.backends.cuda.matmul.allow_tf32 = True
    """,
    "function-local-import": """
        def train(model, loader):
            import torch.nn.functional as F
            from torch.amp import GradScaler as GS
            scaler = GS("cuda")
            for x in loader:
                loss = F.mse_loss(model(x), x)
                scaler.scale(loss).backward()

        class Trainer:
            def step(self):
                from torch.nn.utils import clip_grad_norm_
                clip_grad_norm_(self.model.parameters(), 1.0)
    """,
    "try-except-fallback": """
        try:
            from torch.amp import autocast
        except ImportError:
            from torch.cuda.amp import autocast
        with autocast("cuda"):
            pass
    """,
    "mixed-with-locals-and-builtins": """
        import torch, torch.distributed as dist
        from torch.optim import AdamW
        opt = AdamW(model.parameters(), eps=1e-8)
        print(len(x))
        dist.all_reduce(t)
        opt.step()
    """,
}


def _imported_qualnames(wrapper: MetadataWrapper):
    """node -> the IMPORT-sourced qualified names QualifiedNameProvider gives it."""
    names = wrapper.resolve(QualifiedNameProvider)
    out = {}
    for node in list(names):
        qs = names[node]
        if callable(getattr(qs, "__call__", None)) and not isinstance(qs, (set, frozenset)):
            qs = qs()
        imported = {q.name for q in qs if q.source == QualifiedNameSource.IMPORT}
        if imported:
            out[node] = imported
    return out


class _Uses(cst.CSTVisitor):
    """Every Name/Attribute outside import statements."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes = []

    def visit_Import(self, node):
        return False

    def visit_ImportFrom(self, node):
        return False

    def visit_Name(self, node):
        self.nodes.append(node)

    def visit_Attribute(self, node):
        self.nodes.append(node)


def _table(module: cst.Module) -> ImportTable:
    table = ImportTable()

    class _Imports(cst.CSTVisitor):
        def visit_Import(self, node):
            table.add_import(node)

        def visit_ImportFrom(self, node):
            table.add_import_from(node)

    module.visit(_Imports())
    return table


@pytest.mark.parametrize("name", sorted(CASES))
def test_alias_table_answers_like_qualified_name_provider(name):
    source = textwrap.dedent(CASES[name]).lstrip()
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    module = wrapper.module
    expected = _imported_qualnames(wrapper)
    table = _table(module)
    uses = _Uses()
    module.visit(uses)
    checked = 0
    for node in uses.nodes:
        if dotted_name(node) is None:
            # `f(x).half`: the provider answers "f.half" for an attribute of a
            # call's result, which is not a name at all; the table answers nothing
            continue
        want = expected.get(node, set())
        got = set(table.qualnames(node))
        assert got == want, f"{module.code_for_node(node)!r}: alias table {got}, provider {want}"
        checked += bool(want)
    assert checked >= 1


def test_the_context_uses_the_table_for_calls():
    from amplint.model.context import ModuleContext

    source = textwrap.dedent(CASES["from-import-as"]).lstrip()
    ctx = ModuleContext.build(cst.parse_module(source), source)
    assert ctx.calls_to("torch.cuda.amp.autocast") and ctx.calls_to("torch.cuda.amp.GradScaler")


def test_known_difference_function_local_import_is_file_wide():
    """Documented over-approximation: an import inside one function also
    resolves the same name in another function (the provider says nothing
    there). Rules only ever see more torch calls, never fewer."""
    source = "def f():\n    import torch.nn.functional as F\n\ndef g():\n    F.relu(x)\n"
    module = cst.parse_module(source)
    table = _table(module)
    call = module.body[1].body.body[0].body[0].value
    assert table.qualnames(call.func) == {"torch.nn.functional.relu"}


def test_a_star_import_is_where_an_unbound_torch_comes_from():
    from amplint.model.names import ImportTable
    import libcst as cst

    def table(source):
        t = ImportTable()
        for line in cst.parse_module(source).body:
            for small in getattr(line, "body", ()):
                if isinstance(small, cst.ImportFrom):
                    t.add_import_from(small)
                elif isinstance(small, cst.Import):
                    t.add_import(small)
        t.bind_star_torch()
        return t

    assert table("from pkg.utils import *\n").resolve_dotted("torch.cuda.amp.autocast") == {"torch.cuda.amp.autocast"}
    assert table("from .common import *\n").is_imported("torch")
    assert not table("from math import *\n").is_imported("torch")  # the standard library never brings torch
    assert table("import torch as th\nfrom pkg import *\n").resolve_dotted("th.cuda") == {"torch.cuda"}
    assert table("from torch.cuda import amp\nfrom pkg import *\n").resolve_dotted("torch.nn") == {"torch.nn"}
    assert not table("import numpy as np\n").is_imported("torch")
