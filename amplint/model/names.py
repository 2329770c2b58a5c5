"""Resolve spelled names to qualified names through a module's imports.

libcst's QualifiedNameProvider + ScopeProvider answer this for every node of a
file and cost more than the parse itself. Rules only ever ask "what does this
callee/decorator/attribute chain refer to", so one table of import aliases
answers the same question for a fraction of the price: `import torch as T`,
`from torch.cuda import amp`, `from torch.cuda.amp import autocast as ac` and
`import torch.nn.functional as F` all resolve. A local name imported twice
under different targets (the `try: from torch.amp ... except ImportError:
from torch.cuda.amp ...` fallback) resolves to every target, and callers decide
what ambiguity means for them.
"""
from __future__ import annotations

import sys
from typing import Dict, FrozenSet, Optional, Set

import libcst as cst

EMPTY: FrozenSet[str] = frozenset()
#: star imports from these never bring `torch`
_STDLIB: FrozenSet[str] = frozenset(getattr(sys, "stdlib_module_names", ()))


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None (calls, subscripts...)."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _module_name(node: cst.BaseExpression) -> str:
    name = dotted_name(node)
    return name or ""


class ImportTable:
    """Local name -> the qualified names it was imported as."""

    def __init__(self) -> None:
        self._aliases: Dict[str, Set[str]] = {}
        #: `from pkg.utils import *` of a module outside the standard library was seen
        self.star_import = False

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, full)
            else:
                # `import torch.cuda.amp` binds `torch`, referring to the package.
                root = full.split(".")[0]
                self._bind(root, root)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            root = _module_name(node.module).split(".")[0] if node.module is not None else ""
            self.star_import = self.star_import or bool(node.relative) or root not in _STDLIB
            return
        if node.relative or node.module is None:
            return  # project-local code: not a torch API
        module = _module_name(node.module)
        for alias in node.names:
            name = _module_name(alias.name)
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._bind(local, f"{module}.{name}")

    def bind_star_torch(self) -> None:
        """A file that star-imports a module and never imports `torch` itself can only have its
        `torch` from the star: `from pkg.utils import *` then `torch.cuda.amp.autocast()`."""
        if self.star_import and "torch" not in self._aliases:
            self._bind("torch", "torch")

    def _bind(self, local: str, qualified: str) -> None:
        self._aliases.setdefault(local, set()).add(qualified)

    def is_imported(self, local: str) -> bool:
        return local in self._aliases

    def bound_name(self, qualified: str) -> Optional[str]:
        """A local name bound to exactly `qualified` (`import torch as th` -> "th"), if any."""
        for local in sorted(self._aliases):
            if self._aliases[local] == {qualified}:
                return local
        return None

    def resolve_dotted(self, dotted: str) -> FrozenSet[str]:
        root, _, rest = dotted.partition(".")
        targets = self._aliases.get(root)
        if not targets:
            return EMPTY
        if not rest:
            return frozenset(targets)
        return frozenset(f"{t}.{rest}" for t in targets)

    def qualnames(self, node: cst.CSTNode) -> FrozenSet[str]:
        """Every qualified name `node` may refer to; empty if not an import."""
        dotted = dotted_name(node)
        if dotted is None:
            return EMPTY
        return self.resolve_dotted(dotted)

    def qualname(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of `node` when it is unambiguous."""
        names = self.qualnames(node)
        if len(names) == 1:
            return next(iter(names))
        return None
