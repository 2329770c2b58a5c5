"""The project-wide AMP model: summaries joined into one program.

Given the summaries of some files of a project (`summary.py`), this module
answers what one file alone cannot:

* what a spelled name refers to across files (imports resolved to project
  files: relative imports, packages, `src/` layouts, scripts importing their
  neighbours; re-exports through `__init__.py`);
* what a value is: an instance of a project class (and whether its
  parameters were made fp16), a project function, an external object such
  as a `torch.nn.BCELoss` instance; followed through assignments,
  attributes bound in `__init__`, builder functions' returns and the
  arguments call sites pass to parameters;
* the call graph: functions, `self.` methods, instances called as
  `model(x)` / `self.head(x)` / `criterion(...)` to their `forward`;
* facts propagated along it to a fixpoint: which functions may run under
  autocast (with the region and the chain of calls that leads there),
  including framework entry points (Lightning `Trainer(precision=...)`,
  accelerate `Accelerator(mixed_precision=...)` + `prepare`, Hugging Face
  `TrainingArguments(fp16/bf16=True)` + `Trainer(model=...)`).

It is a reusable layer: rules ask it questions (`Project.calls`,
`Project.resolve_call`, `Project.autocast_witnesses`), and so can the
verifier or an editor server. It never imports libcst or torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from .. import torchapi
from ...core.diagnostics import Diagnostic, Location, Related, Severity
from . import loaders
from .index import ModuleIndex

# A value type is a small tuple:
#   ("C", path, cls)         a project class object
#   ("I", path, cls, dtype, site)  an instance of it; dtype "" or "fp16"/"bf16" when its parameters
#                            were cast, site: (path, row) of that cast, else ()
#   ("F", path, qual)        a project function or method
#   ("M", path)              a project module
#   ("X", qualname)          an external name (torch.nn.BCELoss, torch.nn.functional.binary_cross_entropy)
#   ("R", qualname, dtype, site)  what calling an external name returned (a torch.nn.BCELoss instance,
#                            an nn.Linear whose parameters were cast: dtype and site as for "I")
#   ("A", device, dtype, enabled)  an autocast held for later: `partial(torch.autocast, "cuda")`
Type = Tuple[Any, ...]
TypeSet = FrozenSet[Type]
FuncKey = Tuple[str, str]  # (path, qual)

_EMPTY: TypeSet = frozenset()
#: callees that keep fp32 master weights for the optimizer they are given
_MASTER_WRAPPER = re.compile(r"fp16|master|initialize|mixedprecision|deepspeed", re.IGNORECASE)
_MAX_CHAIN = 8
_MAX_WITNESSES = 3
_ROUNDS = 4
#: how many (function, region) facts `reached` records at most: a bound on the modules it loads
_MAX_REACHED = 4000
_FORWARD = ("forward", "__call__")
#: Lightning's classmethod building an instance from a checkpoint (`Model.load_from_checkpoint(path)`)
_CHECKPOINT_LOADER = ".load_from_checkpoint"
_LIGHTNING_HOOKS = ("training_step", "validation_step", "test_step", "predict_step", "forward")
#: torch modules whose output autocast computes in lower precision (`self.qkv(x)`, `self.head(h)`)
#: module wrappers whose call runs the wrapped module's `forward` (`FSDP(model)(x)`)
FORWARD_KEEPING_WRAPPERS = torchapi.PARAMETER_KEEPING_WRAPPERS | frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
LOWERING_MODULES = frozenset(
    f"torch.nn.{m}" for m in (
        "Linear", "LazyLinear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
        "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
    )
)


@dataclass(frozen=True)
class Region:
    """An autocast region as the project sees it: where it opens and what it does."""

    path: str
    row: int
    device: Optional[str]
    dtype: Optional[str]
    enabled: Optional[bool]
    kind: str = "autocast"  # "autocast" | "lightning" | "accelerate" | "hf" | "framework"


@dataclass(frozen=True)
class Witness:
    """Why a function may run under autocast: the region, and the calls from it (function keys)."""

    region: Region
    chain: Tuple[FuncKey, ...]


@dataclass(frozen=True)
class Call:
    path: str
    func: str  # the qual of the function holding the call
    record: Dict[str, Any]  # the summary's call record

    @property
    def row(self) -> int:
        return self.record["r"]


class Project:
    """The AMP model of the files whose summaries it was given.

    `summaries`: path -> summary (from `summary.summarize`); `root`: the project
    folder (module names are read relative to it, and to `root/src`); `files`:
    every file of the project, and `load(path)` its summary: a module that a
    name resolves to is loaded when first needed (the files a question starts
    from are given, what they import comes as it is needed). `registering`: the
    files that register something to a registry (`index.registering`), which only
    the dispatch view (`dispatch.py`) reads.
    """

    def __init__(
        self,
        root: Optional[str],
        summaries: Dict[str, Dict[str, Any]],
        files: Optional[Iterable[str]] = None,
        load: Optional[Callable[[str], Optional[Dict[str, Any]]]] = None,
        registering: Iterable[str] = (),
    ) -> None:
        self.root = root
        self.registering = list(registering)
        #: files a view of this project read that it did not (`dispatch.py`): the engine's
        #: record of what the findings depend on names them too
        self.viewed: Set[str] = set()
        self.summaries = dict(summaries)
        self._given = list(summaries)  # the files the model starts from (the universe)
        self._load = load
        self._missing: Set[str] = set()
        self._index = ModuleIndex.of(files if files is not None else summaries, root)
        #: (path, function, parameter) -> the arguments call sites pass it: (caller path, caller
        #: function, the argument's vref), evaluated when asked, so what they name may load modules
        self._param_args: Dict[Tuple[str, str, str], Dict[Tuple[str, str, int], Dict[str, Any]]] = {}
        #: memos per loading mode: what a name is may differ once more modules are loaded
        self._memos: Dict[bool, Dict[Any, TypeSet]] = {False: {}, True: {}}
        self._may_load = True
        self._active: Set[Any] = set()
        self._resolveds: Dict[bool, Dict[int, TypeSet]] = {False: {}, True: {}}
        self._witnesses: Dict[FuncKey, List[Witness]] = {}
        self._entries: Optional[Dict[FuncKey, List[Region]]] = None
        self._callers: Optional[Dict[FuncKey, List[Call]]] = None
        self._bound: Dict[str, Set[str]] = {}
        self._loader_sites: Dict[Tuple[str, int], str] = {}
        self._reached: Optional[Set[FuncKey]] = None
        self._reached_callers: Dict[FuncKey, List[Call]] = {}
        self._casts: Dict[Tuple[FuncKey, bool, str], List[Tuple[str, str, Tuple[str, int]]]] = {}
        self._settle()

    # ------------------------------------------------------------------ modules

    def module_path(self, module: str, importer: str, level: int = 0) -> Optional[str]:
        """The project file of a module spelled in `importer` (None: not a project module,
        or one that does not parse)."""
        path = self._index.resolve(importer, level, module)
        if path is None or path in self.summaries:
            return path
        if self._load is None or not self._may_load or path in self._missing:
            return None
        summary = self._load(path)
        if summary is None:
            self._missing.add(path)
            return None
        self.summaries[path] = summary
        return path

    def load_file(self, path: str) -> bool:
        """Whether the project file `path` has a summary in the model, loading it if needed (the
        wrapper rules read some files' scale summaries first and ask names of them later)."""
        if path in self.summaries:
            return True
        if self._load is None or path in self._missing or path not in self._index.files:
            return False
        summary = self._load(path)
        if summary is None:
            self._missing.add(path)
            return False
        self.summaries[path] = summary
        return True

    # ------------------------------------------------------------------ names and values

    def functions(self) -> Iterator[Tuple[str, str, Dict[str, Any]]]:
        for path, s in list(self.summaries.items()):
            for qual, info in s["functions"].items():
                yield path, qual, info

    def calls(self) -> Iterator[Call]:
        for path, qual, info in self.functions():
            for record in info["calls"]:
                yield Call(path, qual, record)

    def function(self, key: FuncKey) -> Optional[Dict[str, Any]]:
        s = self.summaries.get(key[0])
        return s["functions"].get(key[1]) if s is not None else None

    def symbol(self, path: str, name: str, _depth: int = 0) -> TypeSet:
        """What a top-level `name` of the file `path` is."""
        memo = self._memos[self._may_load]
        key = ("symbol", path, name)
        found = memo.get(key)
        if found is None:
            if key in self._active:
                return _EMPTY
            self._active.add(key)
            try:
                found = memo[key] = self._symbol(path, name, _depth)
            finally:
                self._active.discard(key)
        return found

    def _symbol(self, path: str, name: str, _depth: int) -> TypeSet:
        s = self.summaries.get(path)
        if s is None or _depth > 6:
            return _EMPTY
        if name in s["classes"]:
            return frozenset({("C", path, name)})
        if name in s["functions"] and name != "<module>":
            return frozenset({("F", path, name)})
        imported = s["imports"].get(name)
        if imported is not None:
            level, module, attr = imported
            if not attr:
                target = self.module_path(module, path, level)
                return frozenset({("M", target)}) if target else frozenset({("X", module)})
            target = self.module_path(f"{module}.{attr}" if module else attr, path, level)
            if target is not None:
                return frozenset({("M", target)})
            owner = self.module_path(module, path, level) if (module or level) else None
            if owner is not None:
                return self.symbol(owner, attr, _depth + 1)
            if level:
                return _EMPTY
            return frozenset({("X", f"{module}.{attr}")})
        refs = s["functions"]["<module>"]["locals"].get(name)
        if refs:
            return self._values(path, "<module>", refs)
        unpacked = s["functions"]["<module>"].get("ue", {}).get(name)
        if unpacked:  # `model, cfg = build(...)` at the top level
            return self._unpacked(path, "<module>", unpacked)
        if "stars" in s:
            return self._star_symbol(path, s["stars"], name, _depth)
        return _EMPTY

    def _star_symbol(self, path: str, stars: List[List[Any]], name: str, _depth: int) -> TypeSet:
        """A name a file has only from `from .layers import *`: what the project module it
        star-imports binds to it, if that module exports it (its literal `__all__`, else every
        name not starting with `_`); the last star import that has it wins, as in Python."""
        for level, module in reversed(stars):
            target = self.module_path(module, path, level) if (module or level) else None
            if target is None:
                continue
            exported = self.summaries[target].get("all")
            if (name not in exported) if exported is not None else name.startswith("_"):
                continue
            found = self.symbol(target, name, _depth + 1)
            if found:
                return found
        return _EMPTY

    def name_types(self, path: str, func: str, name: str) -> TypeSet:
        """What the dotted `name` spelled in function `func` of `path` may be."""
        head, _, rest = name.partition(".")
        types = self._head(path, func, head)
        for attr in rest.split(".") if rest else ():
            types = frozenset(t for base in types for t in self.attribute(base, attr))
            if not types:
                break
        return types

    def _head(self, path: str, func: str, head: str) -> TypeSet:
        types = self._head_uncast(path, func, head)
        if types:
            for _, dtype, site in self.casts_in((path, func), head):  # in source order: the last one holds
                types = frozenset(_with_dtype(t, "" if dtype == "fp32" else dtype, site) for t in types)
        return types

    def casts_in(self, key: FuncKey, subject: str) -> List[Tuple[str, str, Tuple[str, int]]]:
        """(name, dtype, cast site) for every in-place cast of the name `subject` in a
        function, by itself (`model.half()`) or through a project function it passes the
        name to (`convert_weights(model)`, `model.apply(to_fp16)`). Only the calls passing
        `subject` are resolved: resolving every call of a big function loads modules."""
        memo = (key, self._may_load, subject)
        found = self._casts.get(memo)
        if found is not None:
            return found
        self._casts[memo] = []  # a recursive helper: what is known without it
        info = self.function(key)
        out: List[Tuple[str, str, Tuple[str, int]]] = []
        if info is not None:
            out.extend((name, dtype, (key[0], row)) for name, dtype, row in info["casts"] if name == subject)
            for record in info["calls"]:
                f = record["f"]
                if not record["a"] or not f:
                    continue
                if f.endswith(".apply"):  # model.apply(fn): fn casts each submodule it is given
                    if f[: -len(".apply")] != subject:
                        continue
                    targets = self._value(key[0], key[1], record["a"][0])
                    position = 0
                else:
                    first = record["a"][0]
                    if not first or first.get("n") != subject:
                        continue
                    targets, position = self.name_types(key[0], key[1], f), 0
                for t in targets:
                    if t[0] != "F":
                        continue
                    callee = self.function((t[1], t[2]))
                    if callee is None or len(callee["params"]) <= position:
                        continue
                    param = callee["params"][position]
                    for _, dtype, _site in self.casts_in((t[1], t[2]), param):
                        out.append((subject, dtype, (key[0], record["r"])))
        self._casts[memo] = out
        return out

    def _head_uncast(self, path: str, func: str, head: str) -> TypeSet:
        s = self.summaries[path]
        scope: Optional[str] = func
        while scope is not None:
            info = s["functions"].get(scope)
            if info is not None and scope != "<module>":
                params = info["params"]
                if info["cls"] and params and head == params[0] and scope.count(".") == 1:
                    return frozenset({("I", path, info["cls"], "", ())})
                refs = info["locals"].get(head)
                if refs and head in params and {"n": head} in refs:
                    # a parameter bound to itself (`model, opt = accelerator.prepare(model, opt)`
                    # keeps the module): what the callers pass, and any other binding
                    others = [r for r in refs if r != {"n": head}]
                    return self._param_values((path, scope, head)) | (self._values(path, scope, others) if others else _EMPTY)
                if refs:
                    return self._values(path, scope, refs)
                unpacked = info.get("ue", {}).get(head)
                if unpacked:  # `model, cfg = build(...)`: element i of what a project function returns
                    return self._unpacked(path, scope, unpacked)
                if f"{scope}.{head}" in s["functions"]:  # a function defined inside this one
                    return frozenset({("F", path, f"{scope}.{head}")})
                if head in params:
                    return self._param_values((path, scope, head))
            scope = scope.rsplit(".", 1)[0] if "." in scope else None
        return self.symbol(path, head)

    def _param_values(self, key: Tuple[str, str, str]) -> TypeSet:
        """What a parameter may be: the values of the arguments its call sites pass."""
        memo = self._memos[self._may_load]
        found = memo.get(("param", key))
        if found is None:
            out: Set[Type] = set()
            for (path, func, _), ref in self._param_args.get(key, {}).items():
                out |= self._value(path, func, ref)
            found = memo[("param", key)] = frozenset(out)
        return found

    def attribute(self, base: Type, attr: str) -> TypeSet:
        kind = base[0]
        if kind == "M":
            return self.symbol(base[1], attr)
        if kind == "X":
            return frozenset({("X", f"{base[1]}.{attr}")})
        if kind in ("I", "C"):
            path, cls = base[1], base[2]
            for p, c in self.mro(path, cls):
                info = self.summaries[p]["classes"][c]
                refs = info["attrs"].get(attr)
                if refs and kind == "I":
                    out: Set[Type] = set()
                    for func, ref in refs:
                        out |= self._value(p, func, ref)
                    if out:
                        return frozenset(out)
                qual = f"{c}.{attr}"
                if qual in self.summaries[p]["functions"]:
                    return frozenset({("F", p, qual)})
                if kind == "I" and attr in info.get("df", ()):
                    # a dataclass field: what the constructor's calls pass for it
                    found = self._param_values((p, f"{c}.__init__", attr))
                    if found:
                        return found
        return _EMPTY

    def mro(self, path: str, cls: str, _depth: int = 0) -> List[Tuple[str, str]]:
        """The class and its project base classes, nearest first."""
        key = ("mro", path, cls)
        memo = self._memos[self._may_load]
        found = memo.get(key)
        if found is None:
            found = memo[key] = tuple(self._mro(path, cls, _depth))  # type: ignore[assignment]
        return list(found)

    def _mro(self, path: str, cls: str, _depth: int) -> List[Tuple[str, str]]:
        out = [(path, cls)]
        if _depth > 8:
            return out
        for base in self.summaries[path]["classes"][cls]["bases"]:
            if not base:
                continue
            # sorted: a base bound two ways gives the same MRO in every process
            for t in sorted(self.name_types(path, "<module>", base), key=repr):
                if t[0] == "C" and (t[1], t[2]) not in out:
                    out.extend(x for x in self.mro(t[1], t[2], _depth + 1) if x not in out)
        return out

    def external_bases(self, path: str, cls: str) -> Set[str]:
        """The qualified names of the external classes a project class derives from."""
        out: Set[str] = set()
        for p, c in self.mro(path, cls):
            for base in self.summaries[p]["classes"][c]["bases"]:
                for t in self.name_types(p, "<module>", base) if base else ():
                    if t[0] == "X":
                        out.add(t[1])
        return out

    def _values(self, path: str, func: str, refs: Iterable[Dict[str, Any]]) -> TypeSet:
        out: Set[Type] = set()
        for ref in refs:
            out |= self._value(path, func, ref)
        return frozenset(out)

    def _value(self, path: str, func: str, ref: Optional[Dict[str, Any]]) -> TypeSet:
        if ref is None:
            return _EMPTY
        key = (path, func, id(ref))
        memo = self._memos[self._may_load]
        if key in memo:
            return memo[key]
        if key in self._active:
            return _EMPTY  # a cycle (`x = f(x)`): what is known without it
        self._active.add(key)
        try:
            if "n" in ref:
                types = self.name_types(path, func, ref["n"])
            elif "p" in ref and ref["a"]:
                types = self._partial(path, func, ref)
            elif "c" in ref:
                callees = self.name_types(path, func, ref["c"])
                types = self._loaded(path, callees, ref) or self._pretrained(path, func, callees, ref)
                if not types and "e0" not in ref:
                    types = frozenset(t for callee in callees for t in self.returns(callee))
                elif not types:
                    # `model, cfg = create_model(...)`: the first element every tuple return gives
                    types = frozenset(t for callee in callees for t in self.element_returned(callee, 0))
                if not types and not callees and ref["c"].endswith(_CHECKPOINT_LOADER):
                    types = self._restored(path, func, ref["c"][: -len(_CHECKPOINT_LOADER)])
                if any(t[0] == "X" and t[1] in FORWARD_KEEPING_WRAPPERS for t in callees):
                    # `FSDP(model, ...)`, `DDP(model)`, `torch.compile(model)`: calling the wrapper
                    # runs the wrapped module's `forward`
                    wrapped = ref["a"][0] if ref["a"] else ref["k"].get("module") or ref["k"].get("model")
                    types = types | self._value(path, func, wrapped)
            else:  # a number
                types = _EMPTY
            for method in ref.get("m", ()):
                if method.startswith("to:"):
                    dtype = method[3:]
                    types = frozenset(_with_dtype(t, "" if dtype == "fp32" else dtype, (path, ref.get("mr", 0))) for t in types)
        finally:
            self._active.discard(key)
        memo[key] = types
        return types

    def _restored(self, path: str, func: str, owner: str) -> TypeSet:
        """`Model.load_from_checkpoint(path)` of a project class no project code defines that
        method for (Lightning's classmethod): an instance of the class, its weights fp32."""
        out: Set[Type] = set()
        for t in self.name_types(path, func, owner):
            if t[0] == "C" and not any(f"{c}.load_from_checkpoint" in self.summaries[p]["functions"] for p, c in self.mro(t[1], t[2])):
                out.add(("I", t[1], t[2], "", ()))
        return frozenset(out)

    def _loaded(self, path: str, callees: TypeSet, ref: Dict[str, Any]) -> TypeSet:
        """A model that a library loader of `loaders.LOADERS` returns with fp16 weights."""
        for t in callees:
            if t[0] == "X":
                shown = loaders.fp16_weights(t[1], ref, first="e0" in ref)
                if shown is not None:
                    site = (path, ref.get("r", 0))
                    self._loader_sites[site] = shown
                    return frozenset({("R", t[1], "fp16", site)})
        return _EMPTY

    def _pretrained(self, path: str, func: str, callees: TypeSet, ref: Dict[str, Any]) -> TypeSet:
        """`AutoModel.from_pretrained(name, torch_dtype=d)` of an external class when `d` may be
        float16: a literal (`torch.float16`, `"float16"`), or a name bound to float16 among other
        dtypes (`d = torch.float16 if args.fp16 else torch.float32`: the flag's fp16 path); else
        bfloat16 when `d` may be that (no float16 among its candidates: AMP206's)."""
        if not ref["c"].endswith("." + loaders.PRETRAINED) or "e0" in ref:
            return _EMPTY
        external = next((t for t in callees if t[0] == "X"), None)
        dtype = ref["k"].get("torch_dtype") or ref["k"].get("dtype")
        if external is None or not dtype:
            return _EMPTY
        if "s" in dtype:
            found = {torchapi.DTYPE_STRINGS.get(str(dtype["s"]).replace("torch.", ""))}
        elif "n" in dtype:
            found = {torchapi.dtype_of_qualname(t[1]) for t in self.name_types(path, func, dtype["n"]) if t[0] == "X"}
        else:
            found = set()
        low = "fp16" if "fp16" in found else "bf16" if "bf16" in found else None
        if low is None:
            return _EMPTY
        site = (path, ref.get("r", 0))
        owner = external[1].rsplit(".", 2)
        self._loader_sites[site] = f"{owner[-2]}.{loaders.PRETRAINED_SHOWN}" if len(owner) >= 2 else loaders.PRETRAINED_SHOWN
        return frozenset({("R", external[1], low, site)})

    def loaded_at(self, site: Tuple[str, int]) -> Optional[str]:
        """The loader call (`clip.load(...)`) that made a module fp16 at `site`, if one did."""
        return self._loader_sites.get(tuple(site))  # type: ignore[arg-type]

    def _partial(self, path: str, func: str, ref: Dict[str, Any]) -> TypeSet:
        """`partial(torch.autocast, device_type="cuda", dtype=torch.float16)`: an autocast held for later."""
        if not any(t == ("X", "functools.partial") for t in self.name_types(path, func, ref["c"])):
            return _EMPTY
        target = self._value(path, func, ref["a"][0])
        held = [t[1] for t in target if t[0] == "X" and t[1] in torchapi.AUTOCAST_CONTEXTS]
        if not held:
            return _EMPTY
        args = dict(ref["k"])
        for name, value in zip(torchapi.autocast_parameters(held[0]), ref["a"][1:]):
            args.setdefault(name, value)
        return frozenset({self.autocast_of(path, func, held[0], args)})

    def autocast_of(self, path: str, func: str, qualname: str, args: Dict[str, Any]) -> Type:
        """("A", device, dtype, enabled) from an autocast's arguments (vrefs by parameter name)."""
        device = torchapi.AUTOCAST_CONTEXTS[qualname]
        if device is None:
            device = (args.get("device_type") or {}).get("s")
        dtype_ref = args.get("dtype")
        if dtype_ref is None:
            dtype = torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else None
        elif "s" in dtype_ref:
            dtype = torchapi.DTYPE_STRINGS.get(dtype_ref["s"].replace("torch.", ""))
        else:
            # every dtype the name may hold (`torch.bfloat16 if bf16 else torch.float16`): one is the
            # region's; several leave it decided at run time (never whichever the hash seed lists first)
            found = {torchapi.dtype_of_qualname(t[1]) for t in self._value(path, func, dtype_ref) if t[0] == "X"}
            dtype = found.pop() if len(found) == 1 else None
        enabled_ref = args.get("enabled")
        enabled: Optional[bool] = True
        if enabled_ref is not None:
            enabled = None
            if "n" in enabled_ref and enabled_ref["n"] in ("True", "False"):
                enabled = enabled_ref["n"] == "True"
        return ("A", device, dtype, enabled)

    def _unpacked(self, path: str, func: str, unpacked: List[List[Any]]) -> TypeSet:
        """What a name bound by unpacking calls may be (`ue`: [index, call reference] pairs)."""
        key = (path, func, "ue", id(unpacked))
        memo = self._memos[self._may_load]
        if key in memo:
            return memo[key]
        if key in self._active:
            return _EMPTY  # `a, b = f(a)`: what is known without it
        self._active.add(key)
        out: Set[Type] = set()
        try:
            for index, call in unpacked:
                for callee in self.name_types(path, func, call["c"]):
                    out |= self.element_returned(callee, index)
        finally:
            self._active.discard(key)
        found = memo[key] = frozenset(out)
        return found

    def element_returned(self, callee: Type, index: int) -> TypeSet:
        """What element `index` of calling a project function `callee` gives, when every
        `return` of it is a tuple spelled in place (`return model, model_cfg`) that long:
        nothing when one returns anything else (a name, a call, `None`), where which element
        is which is not certain."""
        if callee[0] != "F":
            return _EMPTY
        info = self.function((callee[1], callee[2]))
        if info is None or info["returns"] or info.get("ro") or info.get("rn") or not info.get("tr"):
            return _EMPTY
        if any(len(t) <= index or t[index] is None for t in info["tr"]):
            return _EMPTY
        return self._values(callee[1], callee[2], [t[index] for t in info["tr"]])

    def returns(self, callee: Type) -> TypeSet:
        """What calling a value of type `callee` gives."""
        kind = callee[0]
        if kind == "C":
            return frozenset({("I", callee[1], callee[2], "", ())})
        if kind == "X":
            return frozenset({("R", callee[1], "", ())})
        if kind == "F":
            info = self.function((callee[1], callee[2]))
            if info is None:
                return _EMPTY
            return self._values(callee[1], callee[2], info["returns"])
        return _EMPTY

    # ------------------------------------------------------------------ calls

    def resolve_call(self, call: Call) -> TypeSet:
        """What the callee of `call` may be (its value types, before calling)."""
        key = id(call.record)
        resolved = self._resolveds[self._may_load]
        found = resolved.get(key)
        if found is not None:
            return found
        record = call.record
        if record["f"]:
            types = self.name_types(call.path, call.func, record["f"])
        elif "fv" in record:
            types = self._value(call.path, call.func, record["fv"])
        else:
            types = _EMPTY
        resolved[key] = types
        return types

    def callees(self, call: Call) -> List[FuncKey]:
        """The project functions `call` runs: functions, methods, a class's `__init__`,
        an instance's `forward`."""
        out: List[FuncKey] = []
        for t in self.resolve_call(call):
            key = self.runs(t)
            if key is not None and key not in out:
                out.append(key)
        return out

    def runs(self, t: Type) -> Optional[FuncKey]:
        if t[0] == "F":
            return (t[1], t[2])
        if t[0] in ("C", "I"):
            names = ("__init__",) if t[0] == "C" else _FORWARD
            for p, c in self.mro(t[1], t[2]):
                for n in names:
                    if f"{c}.{n}" in self.summaries[p]["functions"]:
                        return (p, f"{c}.{n}")
        return None

    def _settle(self) -> None:
        """Parameter types from the arguments call sites pass, to a fixpoint (a few rounds),
        among the files given (no module is loaded for it), and who calls whom."""
        self._may_load = False
        try:
            self._settle_rounds()
            self._callers = {}
            for call in list(self.calls()):
                for callee in self.callees(call):
                    self._callers.setdefault(callee, []).append(call)
        finally:
            self._may_load = True

    def _settle_rounds(self) -> None:
        for _ in range(_ROUNDS):
            found: Dict[Tuple[str, str, str], Dict[Tuple[str, str, int], Dict[str, Any]]] = {}
            for call in list(self.calls()):
                if not call.record["a"] and not call.record["k"]:
                    continue  # binds no parameter
                for t in self.resolve_call(call):
                    key = self.runs(t)
                    if key is None:
                        if t[0] == "C":
                            self._bind_fields(call, t, found)
                        continue
                    self._bind_arguments(call, key, found)
            if found.keys() == self._param_args.keys() and all(found[k].keys() == self._param_args[k].keys() for k in found):
                break
            self._param_args = found
            for memo in (*self._memos.values(), *self._resolveds.values()):
                memo.clear()
            self._casts.clear()

    def _bind_arguments(self, call: Call, key: FuncKey, into: Dict[Tuple[str, str, str], Dict[Tuple[str, str, int], Dict[str, Any]]]) -> None:
        """Record the arguments `call` passes to the parameters of function `key`."""
        info = self.function(key)
        if info is None:
            return
        params = list(info["params"])
        if info["cls"] and key[1].count(".") == 1 and params:
            params = params[1:]  # self
        for i, ref in enumerate(call.record["a"]):
            if i < len(params) and ref is not None:
                into.setdefault((key[0], key[1], params[i]), {})[(call.path, call.func, id(ref))] = ref
        for kw, ref in call.record["k"].items():
            if kw in params and ref is not None:
                into.setdefault((key[0], key[1], kw), {})[(call.path, call.func, id(ref))] = ref

    def _bind_fields(self, call: Call, cls: Type, into: Dict[Tuple[str, str, str], Dict[Tuple[str, str, int], Dict[str, Any]]]) -> None:
        """A dataclass constructed (`Trainer(cfg, model, fsdp_model=fsdp_model)`): record the
        arguments its generated `__init__` binds to the fields (`df`, in order), as parameters of
        `Cls.__init__` (`attribute` reads them for `self.fsdp_model`). Only a class that defines
        no `__init__` and whose project bases declare no fields (their order is not read)."""
        path, name = cls[1], cls[2]
        info = self.summaries[path]["classes"].get(name)
        fields = info.get("df") if info is not None else None
        if not fields or len(self.mro(path, name)) > 1:
            return
        for i, ref in enumerate(call.record["a"]):
            if i < len(fields) and ref is not None:
                into.setdefault((path, f"{name}.__init__", fields[i]), {})[(call.path, call.func, id(ref))] = ref
        for kw, ref in call.record["k"].items():
            if kw in fields and ref is not None:
                into.setdefault((path, f"{name}.__init__", kw), {})[(call.path, call.func, id(ref))] = ref

    def updated_modules(self, call: Call) -> TypeSet:
        """The modules whose parameters an optimizer constructor call is given
        (`Adam(model.parameters())`, `filter(..., model.parameters())`, `params=`), also through
        a local of the optimizer's function bound once to one of those (`params = [p for p in
        model.parameters() if p.requires_grad]`, then `AdamW(params=params)`)."""
        record = call.record
        ref = record["a"][0] if record["a"] else record["k"].get("params")
        if ref and "n" in ref and "." not in ref["n"]:
            info = self.function((call.path, call.func))
            refs = (info or {}).get("locals", {}).get(ref["n"]) or []
            if info is None or ref["n"] in info["params"] or len(refs) != 1:
                return _EMPTY
            ref = refs[0]
        for _ in range(3):
            if not ref or "c" not in ref:
                return _EMPTY
            owner, _, method = ref["c"].rpartition(".")
            if method in ("parameters", "named_parameters") and owner:
                return self.name_types(call.path, call.func, owner)
            if ref["c"] in ("filter", "list") and ref["a"]:
                ref = ref["a"][-1]
                continue
            return _EMPTY
        return _EMPTY

    def names_bound_to(self, suffix: str) -> Set[str]:
        """The last parts of the names and attributes the loaded files bind to the result of a
        call spelled with `suffix` (`self.loss = nn.BCELoss()` -> "loss"): a cheap test of
        which calls may need resolving."""
        found = self._bound.get(suffix)
        if found is None:
            found = set()
            for s in list(self.summaries.values()):
                bindings = [n for f in s["functions"].values() for n, refs in f["locals"].items() if _has_call(refs, suffix)]
                bindings += [a for c in s["classes"].values() for a, refs in c["attrs"].items() if _has_call((r for _, r in refs), suffix)]
                found.update(bindings)
            self._bound[suffix] = found
        return found

    def optimizer_class(self, call: Call) -> Optional[str]:
        """`torch.optim.AdamW` when the call constructs a torch optimizer (not a scheduler)."""
        last = call.record["f"].rsplit(".", 1)[-1]
        if not last[:1].isupper() or last.endswith(("LR", "Scheduler", "Scaler")) or not self._from_torch(call):
            return None  # only a class imported from torch can be one: the spelling decides what is resolved
        for t in self.resolve_call(call):
            if t[0] == "X":
                parts = t[1].split(".")
                if (
                    len(parts) >= 3 and parts[:2] == ["torch", "optim"] and parts[-1][:1].isupper()
                    and parts[-1] != "Optimizer" and "lr_scheduler" not in parts and "swa_utils" not in parts
                ):
                    return t[1]
        return None

    def grad_scaler(self, call: Call) -> Optional[str]:
        """The qualified name when the call constructs a torch GradScaler."""
        if not call.record["f"].endswith("Scaler") or not self._from_torch(call):
            return None
        for t in self.resolve_call(call):
            if t[0] == "X" and (t[1] in torchapi.GRAD_SCALERS or (t[1].startswith("torch.") and t[1].endswith("GradScaler"))):
                return t[1]
        return None

    def _from_torch(self, call: Call) -> bool:
        """Whether the callee's first name is imported from torch (read off the import table,
        so asking loads no project module)."""
        imported = self.summaries[call.path]["imports"].get(call.record["f"].split(".")[0])
        return imported is not None and not imported[0] and imported[1].split(".")[0] == "torch"

    def callers(self, key: FuncKey) -> List[Call]:
        """The calls that run function `key`: in the files the model started from, and the
        ones `reached` followed into modules it loaded."""
        out = list((self._callers or {}).get(key, ()))
        out.extend(c for c in self._reached_callers.get(key, ()) if c not in out)
        return out

    def reached(self) -> Set[FuncKey]:
        """The functions that calls made inside an enabled autocast region of the files the
        model starts from run, directly or through further calls. Follows calls forward, loading the modules they
        resolve to, and records each call it follows (`callers` then knows them), so a model
        file nothing in the universe names is read only when a region leads there."""
        if self._reached is not None:
            return self._reached
        self._reached = set()  # asked again while it runs (a held region resolving): what is known
        found: Dict[FuncKey, Set[Tuple[Any, ...]]] = {}
        frontier: List[Tuple[Call, Region, Tuple[FuncKey, ...]]] = []
        for path in self._given:
            for qual, info in self.summaries[path]["functions"].items():
                for record in info["calls"]:
                    call = Call(path, qual, record)
                    region = self.region_of(call) if record["g"] >= 0 else None
                    if region is not None and region.enabled is not False:
                        frontier.append((call, region, ()))
        for key, regions in list(self._framework_map().items()):  # hooks a framework runs under its precision
            info = self.function(key)
            for region in regions:
                found.setdefault(key, set()).add((region.device, region.dtype, region.enabled))
                for record in info["calls"] if info is not None else ():
                    if record["g"] < 0:
                        frontier.append((Call(key[0], key[1], record), region, (key,)))
        budget = _MAX_REACHED
        while frontier and budget > 0:
            following: List[Tuple[Call, Region, Tuple[FuncKey, ...]]] = []
            for call, region, chain in frontier:
                for key in self.callees(call):
                    signatures = found.setdefault(key, set())
                    if call not in self._reached_callers.setdefault(key, []):
                        self._reached_callers[key].append(call)
                    sig = (region.device, region.dtype, region.enabled)
                    if sig in signatures or len(signatures) >= _MAX_WITNESSES:
                        continue
                    signatures.add(sig)
                    budget -= 1
                    info = self.function(key)
                    if info is None or len(chain) + 1 >= _MAX_CHAIN:
                        continue
                    for record in info["calls"]:
                        inner = Call(key[0], key[1], record)
                        own = self.region_of(inner) if record["g"] >= 0 else None
                        if own is None:
                            following.append((inner, region, (*chain, key)))
                        elif own.enabled is not False:  # its own region, from here down
                            following.append((inner, own, ()))
            frontier = following
        self._reached = set(found)
        return self._reached

    def saved_checkpoint(self, key: FuncKey) -> Optional[Tuple[Call, Dict[str, Any]]]:
        """The `torch.save({...})` of a resume checkpoint in function `key` -- a dict holding an
        optimizer's `state_dict()` -- and the dict; None when the function saves none."""
        info = self.function(key)
        if info is None:
            return None
        for record in info["calls"]:
            call = Call(key[0], key[1], record)
            if not record["a"] or not (any(t == ("X", "torch.save") for t in self.resolve_call(call)) or self._accelerator_save(call)
                                       or self._save_wrapper(call)):
                continue
            saved = record["a"][0]
            if saved and "n" in saved:  # `state = {...}; torch.save(state, path)`
                saved = _built_dict(info, saved["n"])
            if saved and "d" in saved and any(
                v and "c" in v and v["c"].endswith(".state_dict") and "optim" in v["c"].lower() for v in saved["d"].values()
            ):
                return call, saved
            if saved and saved.get("c", "").endswith(".state_dict"):
                held = self.attribute_state(key, record)
                if held is not None:
                    return call, held
        return None

    def holds_optimizer(self, path: str, cls: str) -> bool:
        """The project class `cls` of `path` binds an attribute named for an optimizer
        (`self.optimizer = optimizer`): a holder that checkpoints it with its other attributes."""
        record = self.summaries[path]["classes"].get(cls)
        return record is not None and any("optim" in a.lower() for a in record.get("attrs", {}))

    def attribute_state(self, key: FuncKey, record: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """A method checkpointing its instance attribute by attribute: `record` (a `torch.save(
        val.state_dict(), ...)` or `val.load_state_dict(...)`) sits in a loop over the instance's
        own attributes (`for key, val in self.__dict__.items():`, `vars(self)`), in a class whose
        attributes hold an optimizer (`self.optimizer = optimizer`: a U-ViT style `TrainState`).
        What it saves is then every attribute's state: a `{"d": {attr: self.<attr>.state_dict()}}`
        ref, one entry per attribute the class binds (a `scaler` among them is saved too), marked
        `"held"` with the class's name. None for any other loop or class."""
        info = self.function(key)
        cls = info.get("cls") if info is not None else None
        loop = record.get("l")
        if not cls or loop is None or key[1].count(".") != 1:
            return None
        receiver = (record["a"][0] or {}).get("c", "")[: -len(".state_dict")] if record["f"] != "" and record["a"] else ""
        if record["f"].endswith(".load_state_dict"):
            receiver = record["f"][: -len(".load_state_dict")]
        if not receiver or "." in receiver or receiver in info["params"] or receiver in info["locals"]:
            return None  # the loop's own variable, not a name the method binds
        if not any(r.get("r") == loop and r["f"] in _SELF_ATTRIBUTE_LOOPS and not r.get("a") or
                   r.get("r") == loop and r["f"] in ("vars", "vars().items", "vars().values") and r.get("a") and (r["a"][0] or {}).get("n") == "self"
                   for r in info["calls"]):
            return None
        if not self.holds_optimizer(key[0], cls):
            return None
        attrs = sorted(self.summaries[key[0]]["classes"][cls].get("attrs", {}))
        entries = {a: {"c": f"self.{a}.state_dict", "a": [], "k": {}} for a in attrs}
        return {"d": entries, "held": cls}

    def _save_wrapper(self, call: Call) -> bool:
        """A project function that hands its first parameter to `torch.save` itself (`my_save(obj,
        path)`: `torch.save(obj, tmp); shutil.move(tmp, path)`, a save under another name): what it
        is given is what is saved. One level: the wrapper's own `torch.save`, not a wrapper's wrapper."""
        if "save" not in call.record["f"].rsplit(".", 1)[-1].lower():
            return False  # named for saving, like every save helper the rules follow
        for key in self.callees(call):
            info = self.function(key)
            if info is None:
                continue
            params = info["params"][1:] if info.get("cls") and info["params"][:1] in (["self"], ["cls"]) else info["params"]
            if not params:
                continue
            for record in info["calls"]:
                first = record["a"][0] if record["a"] else None
                if not first or first.get("n") != params[0] or not (record["f"] == "save" or record["f"].endswith(".save")):
                    continue
                types = self.resolve_call(Call(key[0], key[1], record))
                # spelled `torch.save` and resolved to nothing else (a module the run did not load)
                if any(t == ("X", "torch.save") for t in types) or (record["f"] == "torch.save" and not types):
                    return True
        return False

    def _accelerator_save(self, call: Call) -> bool:
        """`accelerator.save(obj, path)` on an `Accelerator` (a `torch.save` on the main process:
        what it is given, nothing of the accelerator's own state)."""
        head, _, method = call.record["f"].rpartition(".")
        if method != "save" or not head:
            return False
        return any(t[0] in ("R", "I") and t[1] in ("accelerate.Accelerator", "accelerate.accelerator.Accelerator")
                   for t in self.name_types(call.path, call.func, head))

    def is_save(self, call: Call) -> bool:
        """Whether the call is `torch.save(...)` (by its spelling first: only `...save` is resolved)."""
        f = call.record["f"]
        return bool(call.record["a"]) and (f == "save" or f.endswith(".save")) and any(
            t == ("X", "torch.save") for t in self.resolve_call(call)
        )

    def saved_state_dicts(self, call: Call) -> List[str]:
        """The spellings whose `.state_dict()` a `torch.save` call writes: directly, in a dict
        (`{"model": model.state_dict(), ...}`), or through one local name bound to either."""
        saved = call.record["a"][0]
        if saved and "n" in saved:
            info = self.function((call.path, call.func))
            refs = info["locals"].get(saved["n"], ()) if info is not None else ()
            saved = refs[-1] if refs else None
        values = list(saved["d"].values()) if saved and "d" in saved else [saved]
        out: List[str] = []
        for v in values:
            if v and "c" in v and v["c"].endswith(".state_dict") and not v["a"] and v["c"] != ".state_dict":
                owner = v["c"][: -len(".state_dict")]
                if owner not in out:
                    out.append(owner)
        return out

    def restored_checkpoint(self, key: FuncKey) -> Optional[Call]:
        """The `<optimizer>.load_state_dict(...)` of a resume in function `key` -- one that also
        `torch.load`s -- when the function restores no scaler (by the name of what it restores);
        None otherwise."""
        info = self.function(key)
        if info is None:
            return None
        loads, found = False, None
        for record in info["calls"]:
            f = record["f"]
            call = Call(key[0], key[1], record)
            if (f == "load" or f.endswith(".load")) and any(t == ("X", "torch.load") for t in self.resolve_call(call)):
                loads = True
            elif f.endswith(".load_state_dict"):
                owner = f[: -len(".load_state_dict")]
                if "scaler" in owner.lower():
                    return None
                if found is None and self._optimizer_name(key, owner):
                    found = call
                elif found is None:
                    held = self.attribute_state(key, record)
                    if held is not None and not any("scaler" in a.lower() for a in held["d"]):
                        found = call  # every attribute restored, the optimizer among them
        return found if loads else None

    def _optimizer_name(self, key: FuncKey, spelled: str) -> bool:
        """A name spelled like an optimizer, or one its call sites bind to a torch optimizer."""
        if "optim" in spelled.rsplit(".", 1)[-1].lower():
            return True
        return any(t[0] == "R" and t[1].startswith("torch.optim.") and "lr_scheduler" not in t[1] for t in self.name_types(key[0], key[1], spelled))

    def site(self, call: Call, note: str) -> Related:
        """Another site of a finding in the finding's own file: the span of a call."""
        r = call.record
        return Related(Location(r["r"], r["c"]), Location(r["er"], r["ec"]), note)

    def master_weights(self, call: Call, itself: bool = True) -> bool:
        """Whether the function holding `call` hands its optimizer to something that keeps fp32
        master weights (apex `amp.initialize`, `FP16_Optimizer`, DeepSpeed, fairseq's optimizers);
        with `itself` False, `call`'s own spelling does not count (`FP16FusedAdam(...)`, a
        project optimizer whose class was read)."""
        info = self.function((call.path, call.func))
        return info is not None and any(
            _MASTER_WRAPPER.search(r["f"]) for r in info["calls"] if r["f"] and (itself or r is not call.record)
        )

    def fp16_modules(self, types: Iterable[Type], pretrained: bool = False) -> List[Tuple[str, Tuple[str, int]]]:
        """(class name, cast site) of the modules among `types` whose parameters were cast to
        fp16 (project classes and external ones, `nn.Linear`, `resnet50`), in a stable order;
        with `pretrained`, also those `from_pretrained(torch_dtype=...)` may load fp16."""
        return self.low_precision_modules(types, "fp16", pretrained)

    def low_precision_modules(self, types: Iterable[Type], dtype: str, pretrained: bool = False) -> List[Tuple[str, Tuple[str, int]]]:
        """`fp16_modules` for `dtype` ("fp16" | "bf16"): the modules among `types` whose
        parameters were cast to it, and with `pretrained` those `from_pretrained` may load so."""
        found = {
            (t[2] if t[0] == "I" else self._loader_sites.get(t[-1]) or t[1].rsplit(".", 1)[-1], t[-1])
            for t in types if t[0] in ("I", "R") and t[-2] == dtype
            and (pretrained or not (self._loader_sites.get(t[-1]) or "").endswith(loaders.PRETRAINED_SHOWN))
        }
        return sorted(found)

    # ------------------------------------------------------------------ autocast

    def region_of(self, call: Call) -> Optional[Region]:
        """The innermost autocast region a call sits in within its own file (None: none known).
        A region whose `enabled` is False is returned too: it shields what it holds."""
        regions = self.summaries[call.path]["regions"]
        index = call.record["g"]
        while index >= 0:
            r = regions[index]
            region = self._region(call.path, call.func, r)
            if region is not None:
                return region
            index = r["parent"]
        return None

    def _region(self, path: str, func: str, r: Dict[str, Any]) -> Optional[Region]:
        via = r.get("via")
        if via is None:
            kind = "framework" if r.get("framework") else "autocast"
            return Region(path, r["row"], r["device"], r["dtype"], r["enabled"], kind)
        # `with self.amp_autocast():` -- what the callee holds decides
        types = self.name_types(path, func, via)
        held = [t for t in types if t[0] == "A"]
        if not r.get("va"):
            # `autocast = get_autocast(args.precision)` returning `torch.cuda.amp.autocast` itself, then
            # `with autocast():`: that class called with no arguments; its dtype is left to run time (the
            # helper's other returns, a lambda making a bf16 autocast, are not all read)
            held += [("A", torchapi.AUTOCAST_CONTEXTS[t[1]], None, True) for t in sorted(types, key=repr)
                     if t[0] == "X" and torchapi.AUTOCAST_CONTEXTS.get(t[1])]
        if not held:
            return None
        device, dtype, enabled = held[0][1], held[0][2], held[0][3]
        if len(held) < len(types) or any(h[1:] != held[0][1:] for h in held):
            # `amp_autocast = partial(torch.autocast, ...) if amp else suppress`: decided at run time
            # off only if every binding is off: not whichever the hash seed listed first
            enabled = False if all(h[3] is False for h in held) else None
            if any(h[1] != device for h in held):
                device = None
            if any(h[2] != dtype for h in held):
                dtype = None
        return Region(path, r["row"], device, dtype, enabled, "held")

    def autocast_witnesses(self, key: FuncKey) -> List[Witness]:
        """Why function `key` may run under autocast: up to a few regions (distinct device,
        dtype, enabled), each with the chain of calls from the region down to `key`, nearest
        first. Found by walking callers back from `key`, so only what leads there is read."""
        found = self._witnesses.get(key)
        if found is not None:
            return found
        out: List[Witness] = []
        signatures: Set[Tuple[Any, ...]] = set()

        def add(region: Region, chain: Tuple[FuncKey, ...]) -> None:
            sig = (region.device, region.dtype, region.enabled)
            if region.enabled is not False and sig not in signatures and len(out) < _MAX_WITNESSES:
                signatures.add(sig)
                out.append(Witness(region, chain))

        seen = {key}
        frontier: List[Tuple[FuncKey, Tuple[FuncKey, ...]]] = [(key, (key,))]
        while frontier and len(out) < _MAX_WITNESSES:
            following: List[Tuple[FuncKey, Tuple[FuncKey, ...]]] = []
            for fkey, chain in frontier:
                for region in self._entry_regions(fkey):
                    add(region, chain)
                for call in self.callers(fkey):
                    region = self.region_of(call)
                    if region is not None:
                        add(region, chain)  # entered here (or shielded by enabled=False)
                        continue
                    caller = (call.path, call.func)
                    if caller not in seen and len(chain) < _MAX_CHAIN:
                        seen.add(caller)
                        following.append((caller, (caller, *chain)))
            frontier = following
        self._witnesses[key] = out
        return out

    def _entry_regions(self, key: FuncKey) -> List[Region]:
        """Regions a function is entered under without a call the project shows: its
        decorators', and a framework's precision setting for the hooks it runs."""
        out = list(self._framework_map().get(key, ()))
        info = self.function(key)
        for decorator in info["decorators"] if info is not None else ():
            if decorator:
                scope = "<module>" if "." not in key[1] else key[1].rsplit(".", 1)[0]
                for t in sorted(self.name_types(key[0], scope, decorator), key=repr):  # not set order
                    region = self.decorator_region(t)
                    if region is not None:
                        out.append(region)
        return out

    def _framework_map(self) -> Dict[FuncKey, List[Region]]:
        """The hooks each framework precision setting of the loaded files runs (Lightning's
        `training_step`, a prepared model's `forward`), with the setting as their region."""
        if self._entries is None:
            self._entries = {}
            for path, s in list(self.summaries.items()):
                for fw in s["frameworks"]:
                    region = Region(path, fw["row"], fw["device"], fw["dtype"], True, fw["kind"])
                    for entry in self._framework_entries(path, fw):
                        self._entries.setdefault(entry, []).append(region)
        return self._entries

    def decorator_region(self, t: Type) -> Optional[Region]:
        """The region a project decorator runs the decorated function under: one whose
        nested wrapper calls the function it was given inside an enabled autocast."""
        if t[0] != "F":
            return None
        info = self.function((t[1], t[2]))
        if info is None or not info["params"]:
            return None
        param = info["params"][0]
        prefix = f"{t[2]}."
        for qual, inner in self.summaries[t[1]]["functions"].items():
            if not qual.startswith(prefix):
                continue
            for record in inner["calls"]:
                if record["f"] == param:
                    region = self.region_of(Call(t[1], qual, record))
                    if region is not None and region.enabled is not False:
                        return region
        return None

    def _framework_entries(self, path: str, fw: Dict[str, Any], runs: Tuple[str, ...] = ("fit",)) -> List[FuncKey]:
        """The project functions a framework runs under its precision setting (a Lightning
        Trainer's: the hooks of the models its `runs` methods are given, `fit` by default)."""
        info = self.summaries[path]["functions"].get(fw["func"])
        if info is None:
            return []
        target = fw["target"]
        models: Set[Type] = set()
        for record in info["calls"]:
            f = record["f"]
            if fw["kind"] == "lightning" and f.startswith(f"{target}.") and f[len(target) + 1:] in runs:
                ref = record["a"][0] if record["a"] else record["k"].get("model")
                models |= self._value(path, fw["func"], ref)
            elif fw["kind"] == "accelerate" and f == f"{target}.prepare":
                for ref in record["a"]:
                    models |= self._value(path, fw["func"], ref)
            elif fw["kind"] == "hf" and (record["k"].get("args") or {}).get("n") == target:
                models |= self._value(path, fw["func"], record["k"].get("model"))
        out: List[FuncKey] = []
        hooks = _LIGHTNING_HOOKS if fw["kind"] == "lightning" else _FORWARD
        for t in sorted(models, key=repr):  # sorted: the entries' order must not follow the hash seed
            if t[0] != "I":
                continue
            for hook in hooks:  # the nearest definition of each hook
                for p, c in self.mro(t[1], t[2]):
                    key = (p, f"{c}.{hook}")
                    if key[1] in self.summaries[p]["functions"]:
                        if key not in out:
                            out.append(key)
                        break
        return out

    def lightning_entries(self, path: str, func: str, target: str) -> List[FuncKey]:
        """The hooks of the models the Lightning Trainer bound to `target` in function `func` is
        given by `fit`, `validate`, `test` or `predict` (`training_step`, `predict_step`, `forward`)."""
        return self._framework_entries(path, {"kind": "lightning", "func": func, "target": target}, ("fit", "validate", "test", "predict"))

    def lowers(self, path: str, func: str, spelled: str) -> bool:
        """Whether the callable spelled in `func` is a torch module autocast runs in lower
        precision (`self.qkv` bound to an `nn.Linear`)."""
        return any(t[0] == "R" and t[1] in LOWERING_MODULES for t in self.name_types(path, func, spelled))

    def carried_into(self, key: FuncKey, param: str, device: Optional[str]) -> List[Tuple[Region, Tuple[FuncKey, ...], Call]]:
        """Where parameter `param` of function `key` receives a tensor that an autocast region of
        `device` made in lower precision: (the region, the chain of functions from the one that
        made it down to `key`, the call that passed it there). Follows parameters passed on
        unchanged (the summary's `ap`) up to a few calls, in any file of the model."""
        out: List[Tuple[Region, Tuple[FuncKey, ...], Call]] = []
        seen = {(key, param)}
        frontier = [(key, param, (key,))]
        while frontier:
            following = []
            for fkey, name, chain in frontier:
                info = self.function(fkey)
                if info is None:
                    continue
                params = list(info["params"])
                if info["cls"] and fkey[1].count(".") == 1 and params:
                    params = params[1:]  # called on an instance: `self` is bound
                if name not in params:
                    continue
                position = str(params.index(name))
                for call in self.callers(fkey):
                    carried = call.record.get("ap", {}).get(position)
                    caller = (call.path, call.func)
                    if isinstance(carried, str) and carried.startswith("p:"):
                        if len(chain) < _MAX_CHAIN and (caller, carried[2:]) not in seen:
                            seen.add((caller, carried[2:]))
                            following.append((caller, carried[2:], (caller, *chain)))
                        continue
                    if carried is None or (carried != "lp" and not any(self.lowers(call.path, call.func, m) for m in carried.get("m", ()))):
                        continue
                    region = self.region_of(call)
                    entered: List[Tuple[Region, Tuple[FuncKey, ...]]] = [(region, (caller, *chain))] if region is not None else [
                        (w.region, (*w.chain, *chain)) for w in self.autocast_witnesses(caller)  # made under its callers' autocast
                    ]
                    for region, through in entered:
                        if region.enabled is not False and region.dtype != "fp32" and device is not None and region.device == device:
                            out.append((region, through, call))
                            break
            frontier = following
        return out

    # ------------------------------------------------------------------ reporting

    def where(self, path: str, row: int) -> str:
        """`segkit/engine/trainer.py:18`: a place in the project, as a user reads it."""
        rel = os.path.relpath(path, self.root) if self.root else os.path.basename(path)
        return f"{rel.replace(os.sep, '/')}:{row}"

    def named(self, region: Region) -> str:
        """A region as a short message names it, without its place (the related site holds
        that): `the CUDA autocast of `trainer.py``, `Lightning's float16 `Trainer``."""
        dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(region.dtype or "", "mixed")
        if region.kind == "lightning":
            return f"Lightning's {dtype} `Trainer`"
        if region.kind == "accelerate":
            return f"the {dtype} `Accelerator`"
        if region.kind == "hf":
            return f"the {dtype} `TrainingArguments`"
        device = {"cuda": "CUDA ", "cpu": "CPU ", "xpu": "XPU "}.get(region.device or "", "")
        held = "held in" if region.kind == "held" else "of"
        return f"the {device}autocast {held} `{os.path.basename(region.path)}`"

    def entered(self, region: Region, chain: Tuple[FuncKey, ...] = ()) -> Related:
        """The related site where `region` starts, with the calls that lead from it to the
        finding (`chain`): "autocast entered here (via `UNet.forward` -> `DiceBCELoss.forward`)"."""
        note = "precision set here" if region.kind in ("lightning", "accelerate", "hf") else "autocast entered here"
        if chain:
            note += f" (via {chain_text(chain)})"
        return self.related(region.path, region.row, note)

    def related(self, path: str, row: int, note: str) -> Related:
        """The cause of a finding, elsewhere in the project (a line: summaries keep rows)."""
        shown = os.path.relpath(path)
        return Related(Location(row, 1), Location(row, 1), note, filename=path if shown.startswith("..") else shown)

    def diagnostic(
        self,
        rule: Any,
        call: Call,
        message: str,
        *,
        data: Optional[dict] = None,
        severity: Optional[Severity] = None,
        related: Tuple[Related, ...] = (),
        help: Optional[str] = None,
    ) -> Diagnostic:
        """A diagnostic of `rule` spanning a call, or any summary record with the same
        position keys (the path is the project's absolute one); `related`: where its cause is."""
        r = call.record
        return Diagnostic(
            code=rule.code,
            name=rule.name,
            message=message,
            severity=severity or rule.severity,
            filename=call.path,
            location=Location(r["r"], r["c"]),
            end_location=Location(r["er"], r["ec"]),
            noqa_row=r["r"],
            url=rule.url(),
            data=dict(data or {}),
            related=tuple(related),
            help=help,
        )


#: the name rules know a project call by (`amplint.model.ProjectCall`)
ProjectCall = Call


def chain_text(chain: Tuple[FuncKey, ...]) -> str:
    """"`UNet.forward` -> `DiceBCELoss.forward`"."""
    return " -> ".join(f"`{display(k)}`" for k in chain)


#: the calls a loop over an instance's own attributes iterates (`for key, val in self.__dict__.items():`)
_SELF_ATTRIBUTE_LOOPS = frozenset(("self.__dict__.items", "self.__dict__.values"))


def _built_dict(info: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The dict a local `name` holds when it is saved: its literal (`{...}` or `dict(k=v, ...)`)
    with the state dicts the function adds under literal keys (`state["optimizer"] =
    optimizer.state_dict()`, the summary's `it`), as one `{"d": ...}` ref; None when it is bound
    to no dict."""
    bound = next((r for r in info["locals"].get(name, ()) if r and ("d" in r or (r.get("c") == "dict" and not r.get("a")))), None)
    if bound is None:
        return None
    entries = dict(bound["d"] if "d" in bound else bound.get("k", {}))
    entries.update(info.get("it", {}).get(name, {}))
    return {**bound, "d": entries} if entries != bound.get("d") else bound


def _has_call(refs: Iterable[Optional[Dict[str, Any]]], suffix: str) -> bool:
    return any(r is not None and r.get("c", "").endswith(suffix) for r in refs)


def _with_dtype(t: Type, dtype: str, site: Tuple[str, int]) -> Type:
    if t[0] == "I":
        return ("I", t[1], t[2], dtype, site if dtype else ())
    if t[0] == "R":
        return ("R", t[1], dtype, site if dtype else ())
    return t


def display(key: FuncKey) -> str:
    """`Net.forward`, `compute_loss` (module level code shows as the file's name)."""
    if key[1] == "<module>":
        return os.path.basename(key[0])
    return key[1]
