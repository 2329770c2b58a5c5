"""A dtype a config object's property maps its precision string to, across the project's files.

Trainers often take their autocast dtype from a configuration class in another module:
`torch.autocast("cuda", dtype=self.cfg.autocast_precision)`, where the config's

    @property
    def autocast_precision(self) -> torch.dtype:
        if self.precision == "amp_bf16":
            return torch.bfloat16
        elif self.precision == "amp_fp16":
            return torch.float16
        ...

maps a documented precision option to a dtype (allenai/OLMo, allenai/molmo). The file holding the
region spells only the attribute; the choices are literals in another file. `fp16_dtype_property`
answers, from the project's text when conditions are resolved (`facts.DTYPE_PROPERTY`), whether
the name read (`autocast_precision`) is such a mapping with float16 among its values.

Precision first: every definition of the name in the project (a `def` of that name, in any class
or at module level) must be of the kind the read needs (a `@property` / `cached_property` for an
attribute read, a plain method taking only `self` for a call `cfg.amp_dtype()`), and every value
it returns a torch dtype literal (`torch.float16`, `torch.bfloat16`, `torch.float32`, `torch.half`),
a conditional expression of them or a dict literal of them subscripted; a `raise` for an unknown
string is fine. Any other return, any assignment to an attribute or class field of that name
(`self.autocast_precision = ...`, a dataclass field: the object read may be that one; not a
`TypedDict`'s field, which is read as a key), no
definition at all, or a project cut at the listing's limit: not known, False. Each definition is
read by `project/dtype_maps.read_dtype_map`, the reader AMP803's scale summary shares.
"""
from __future__ import annotations

import ast
import re
from typing import Dict, FrozenSet, Optional, Tuple

from .project.astutil import dotted
from .project.dtype_maps import read_dtype_map

_cache: Dict[Tuple[str, str, str, int], Optional[Tuple[Optional[str], FrozenSet[str]]]] = {}


def fp16_dtype_property(filename: Optional[str], spelled: str, root: Optional[str] = None) -> Optional[str]:
    """`config.py:1318` (the `def` returning float16) when the project maps the name `spelled`
    reads to a dtype among literals that include float16 (module docstring), else None.
    `spelled` is `name` (an attribute read: a property) or `name()` (a call of a method)."""
    read = _read_property(filename, spelled, root)
    return read[0] if read is not None else None


def dtype_property_values(filename: Optional[str], spelled: str, root: Optional[str] = None) -> Optional[FrozenSet[str]]:
    """Every dtype the project's definitions of the name `spelled` reads may return (`fp16`,
    `bf16`, `fp32`), under the same precision-first reading as `fp16_dtype_property`; None when
    that is not known (a definition of another kind, the name bound as a value, no definition at
    all, a project cut at the listing's limit). `{"bf16", "fp32"}` for dinov3's
    `ModelDtype.autocast_dtype`, a dict of `torch.bfloat16` and `torch.float32` subscripted."""
    read = _read_property(filename, spelled, root)
    return read[1] if read is not None and read[1] else None


def _read_property(filename: Optional[str], spelled: str, root: Optional[str]) -> Optional[Tuple[Optional[str], FrozenSet[str]]]:
    """(the first `def` returning float16 as `path:row` or None, the dtypes all definitions
    return) when every definition of the name in the project is known; None otherwise."""
    from .texts import files_stamp, project_root, read_text, whole_listing

    called = spelled.endswith("()")
    name = spelled[:-2] if called else spelled
    if not filename or not name.isidentifier():
        return None
    base = project_root(filename, root)
    if base is None:
        return None
    listing = whole_listing(base, (".py",))
    if listing is None:
        return None
    listing = sorted(listing)
    key = (base, name, "call" if called else "attr", files_stamp(listing))
    if key in _cache:
        return _cache[key]
    if len(_cache) > 64:
        _cache.clear()
    word = re.compile(rf"\b{re.escape(name)}\b")
    found: Optional[str] = None
    values: set = set()
    known = True
    for path in listing:
        text = read_text(path)
        if text is None:
            known = False
            break
        if not word.search(text):
            continue
        site = _definitions(text, name, called)
        if site is False:
            known = False
            break
        row, dtypes = site
        values |= dtypes
        if row and found is None:
            import os

            found = f"{os.path.relpath(path, base)}:{row}"
    out = (found, frozenset(values)) if known else None
    _cache[key] = out
    return out


def _definitions(text: str, name: str, called: bool):
    """In one file: (the row of the first definition of `name` returning float16, 0 when none
    does; the dtypes every definition returns), or False when one definition is not a literal
    dtype mapping of the kind the read needs, or the file binds the name as a value."""
    from ..core.pyast import parse

    tree = parse(text)
    if tree is None:
        return False
    row = 0
    values: set = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            mapping = read_dtype_map(node)
            if mapping is None or (mapping.kind == "property") == called or (called and mapping.arguments):
                return False
            values |= mapping.dtypes
            if "fp16" in mapping.dtypes and not row:
                row = node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for leaf in ast.walk(t):
                    if isinstance(leaf, ast.Attribute) and leaf.attr == name:
                        return False  # `self.autocast_precision = ...`: a value of that name
        elif isinstance(node, ast.ClassDef) and not _typed_dict(node):  # a TypedDict's fields are keys, not attributes
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return False  # a field of that name (a dataclass's `autocast_precision: torch.dtype`)
    return row, frozenset(values)


def _typed_dict(node: ast.ClassDef) -> bool:
    """`class BaseModelContext(TypedDict)`: its fields are read as keys (`context["autocast_dtype"]`),
    never as attributes, so a field of the name binds no value an attribute read may get."""
    return any((dotted(b) or "").rsplit(".", 1)[-1] == "TypedDict" for b in node.bases)

