"""The "wrapper kind" fact: what wraps a model object, across files, and the precision its
wrapper, policy and configuration set.

`ScaleView` joins the scale summaries (`scale.py`) of a project's files and answers, for a
name spelled in a function (`model`, `self.model`, `engine`), which wrappers it may hold:

    plain | "ddp" | "fsdp1" (FullyShardedDataParallel) | "fsdp2" (fully_shard) |
    "deepspeed" (deepspeed.initialize) | "accelerate" (Accelerator.prepare) | "fabric" (Fabric.setup)

following assignments, tuple unpacking (`engine, optimizer, _, _ = deepspeed.initialize(...)`:
element 1 is the engine's optimizer), `self.` attributes bound in any method of the class or
its project bases, builder functions' returns (`model = wrap(model)` in another module) and,
through the project model's call graph, the arguments call sites pass to a parameter
(`Trainer(model)` -> `self.model = model`), and `torch.compile`: the `OptimizedModule` it
returns holds the same module (`_orig_mod`) and hands on its parameters and attributes, so
`torch.compile(FSDP(m))`, `model = torch.compile(model)` and `compiled._orig_mod` keep the
wrapper kind of what was compiled (`scale.COMPILERS`, `uncompiled`). A Fabric setup is resolved to its `Fabric(...)`
constructor and strategy (`FSDPStrategy` makes it an FSDP1 wrapper, with the mixed-precision
policy Lightning derives from `precision=`); a DeepSpeed engine to its configuration (a dict
literal, or a JSON file the code names, read by `configs.py`).

Only what the code shows counts: a value decided at run time (a parameter no call site fills,
a registry lookup, a `precision=args.precision`) is not followed, and the rules stay silent.
The name resolution itself (imports, classes, functions across files) is the project model's
(`graph.Project`), so both agree; the view never imports libcst or torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..precision_names import LIGHTNING_FSDP_POLICY, lightning_precision
from . import configs
from .scale import COMPILERS, FSDP1

Summary = Dict[str, Any]
Place = Tuple[str, int, int, int, int]  # (path, row, column, end row, end column)

_MAX_DEPTH = 6
#: how many functions `never_trains` reads from one function before it answers "may train"
_MAX_TRAIN_REACH = 64
#: the most config files the code does not name that one project pass reads (`shipped_configs`)
MAX_SHIPPED_CONFIGS = 256
#: a file of a project that imports one of these may launch with a DeepSpeed JSON the code never names
#: (`deepspeed --deepspeed_config ds.json`, `accelerate launch` with a YAML pointing at it,
#: the HF Trainer's `--deepspeed ds.json`, Lightning's `DeepSpeedStrategy`)
_DEEPSPEED_CONSUMERS = frozenset(("deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning", "lightning_fabric"))
#: a DeepSpeed JSON names one of these (a file holding none is not parsed)
_DEEPSPEED_NEEDLES = (b'"fp16"', b'"bf16"', b'"bfloat16"', b'"zero_optimization"')
#: the sharding strategies whose FSDP1 parameters are the rank's shards
_SHARDED_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
#: constructors whose instance holds each keyword argument as the attribute of its name
_NAMESPACES = frozenset(("types.SimpleNamespace", "argparse.Namespace", "easydict.EasyDict"))
#: a call whose name says it trains (its body may be outside what the model reads)
_TRAINING_CALL = re.compile(r"^(?:backward|manual_backward|step|optimizer_step|setup_optimizers)$|(?:^|_)(?:train|training|fit)(?:_|$)")


@dataclass(frozen=True)
class Policy:
    """A mixed-precision policy: `MixedPrecision(...)` (FSDP1), `MixedPrecisionPolicy(...)`
    (FSDP2), or the one Lightning's FSDP plugin derives from `precision=`. dtypes are
    "fp16" | "bf16" | "fp32" | "?" (decided at run time) | None (not set)."""

    cls: str  # "fsdp1" | "fsdp2" | "lightning"
    param: Optional[str]
    reduce: Optional[str]
    place: Place
    reduce_place: Optional[Place] = None
    runtime: bool = False  # `**kwargs`/`*args`: more than the call shows

    @property
    def effective_reduce(self) -> Optional[str]:
        """The dtype gradients are reduced in: `reduce_dtype`, else `param_dtype` (both FSDPs)."""
        return self.reduce if self.reduce is not None else self.param


@dataclass
class Config:
    """A DeepSpeed (or accelerate) configuration: a dict literal in the code or a file it names."""

    values: Dict[str, Any]
    path: str  # the file holding it (the .py of a dict literal, or the .json/.yaml)
    lines: Dict[Tuple[str, ...], Tuple[int, int]]
    literal: bool  # a dict literal in Python code (values "?" are decided at run time)
    named_at: Optional[Place] = None  # where the code names it
    #: the literal values a "?" key may take (`"loss_scale": 1 if args.no_scaler else 0` -> [1, 0])
    choices: Dict[Tuple[str, ...], List[Any]] = field(default_factory=dict)

    def get(self, *keys: str) -> Any:
        return configs.lookup(self.values, keys)[1]

    def where(self, *keys: str) -> Tuple[int, int]:
        return configs.written_at(self.lines, keys, self.lines.get((), (1, 1)))

    def enabled(self, block: str) -> Optional[bool]:
        """`fp16.enabled` / `bf16.enabled` (or DeepSpeed's older `bfloat16` block): True/False,
        None for "auto", absent or decided at run time."""
        names = (block, "bfloat16") if block == "bf16" else (block,)
        for name in names:
            node = self.get(name)
            if isinstance(node, dict) and "enabled" in node:
                return configs.enabled(node["enabled"])
        return None


@dataclass
class Wrapper:
    """A model object's wrapper, where it is made, and what sets its precision."""

    kind: str  # "ddp" | "fsdp1" | "fsdp2" | "deepspeed" | "accelerate" | "fabric"
    path: str
    event: Dict[str, Any]
    element: int = 0  # which element of the wrapper's result the name holds (deepspeed: 1 = optimizer)
    policy: Optional[Policy] = None
    strategy: Optional[str] = None  # fabric: "fsdp" | "deepspeed" | "ddp" | "fsdp2" | None (default) | "?"
    precision: Optional[str] = None  # fabric: "16-mixed", ...; "?" decided at run time
    framework: Optional[Tuple[str, Dict[str, Any]]] = None  # the Fabric/Accelerator constructor (path, event)
    config: Optional[Config] = None  # deepspeed
    notes: Dict[str, Any] = field(default_factory=dict)

    @property
    def place(self) -> Place:
        e = self.event
        return (self.path, e["r"], e["c"], e["er"], e["ec"])

    @property
    def sharded_fsdp1(self) -> bool:
        """An FSDP1 module whose parameters are shards: `FullyShardedDataParallel(...)` with a
        sharding strategy other than NO_SHARD, or a Fabric setup under `FSDPStrategy`."""
        if self.kind == "fsdp1":
            shard = self.event.get("shard") or ""
            return not shard.endswith("NO_SHARD") and not self.notes.get("no_shard")
        return self.kind == "fabric" and self.strategy == "fsdp"

    @property
    def deepspeed_engine(self) -> bool:
        return (self.kind == "deepspeed" and self.element == 0) or (self.kind == "fabric" and self.strategy == "deepspeed")


class ScaleView:
    """The wrapper facts of a project (or of one file): `project` resolves names and knows
    who calls whom; `scale(path)` gives a file's scale summary (None: nothing relevant);
    `read_configs`: whether config files the code names may be read (only the project pass
    does: a per-file result must not depend on another file's bytes)."""

    def __init__(self, project: Any, scale: Callable[[str], Optional[Summary]], read_configs: bool, active: bool = True) -> None:
        self.project = project
        self.active = active  # False: no file of the project may use a distributed API (nothing is read)
        self._scale = scale
        self._scales: Dict[str, Optional[Summary]] = {}
        self.read_configs = read_configs
        self.configs_read: Set[str] = set()  # config files read (their bytes decide findings)
        self._at: Dict[str, Dict[Tuple[int, int], Dict[str, Any]]] = {}
        self._memo: Dict[Any, Any] = {}
        self._active: Set[Any] = set()
        #: whether the project may launch with a DeepSpeed JSON its code does not name (the
        #: project pass then reads those the walk met: `shipped_configs`; the engine's cache
        #: records which ones, `crossfile._Store.remember`)
        self.wants_configs = False

    # ------------------------------------------------------------------ files

    def summary(self, path: str) -> Optional[Summary]:
        if path not in self._scales:
            self._scales[path] = self._scale(path)
        return self._scales[path]

    def files(self) -> List[str]:
        """The files of the project model that hold a scale summary, sorted."""
        if not self.active:
            return []
        listed = getattr(self.project, "scale_files", None)  # the engine's: files with a distributed API or a step
        candidates = listed if listed is not None else list(self.project.summaries)
        return sorted(p for p in candidates if self.summary(p) is not None)

    def events(self, kind: Optional[str] = None) -> Iterator[Tuple[str, Dict[str, Any]]]:
        for path in self.files():
            for e in self.summary(path)["events"]:  # type: ignore[index]
                if kind is None or e["e"] == kind:
                    yield path, e

    def event_at(self, path: str, row: int, col: int) -> Optional[Dict[str, Any]]:
        index = self._at.get(path)
        if index is None:
            s = self.summary(path)
            index = self._at[path] = {(e["r"], e["c"]): e for e in (s["events"] if s else ())}
        return index.get((row, col))

    def policy_wraps(self, path: str, func: Optional[str] = None) -> List[Dict[str, Any]]:
        """The FSDP1/FSDP2 wrapper calls of `path` (of `func` only, when given) that pass a
        mixed-precision policy on every path: `mixed_precision=`/`mp_policy=` given, neither a
        literal None nor a choice with None among its alternatives (whatever policy it is)."""
        s = self.summary(path)
        return [
            e for e in (s["events"] if s else ())
            if e["e"] == "wrap" and e["k"] in ("fsdp1", "fsdp2") and e.get("mpr") and not e.get("mpn") and (func is None or e["f"] == func)
        ]

    def function(self, path: str, func: str) -> Optional[Dict[str, Any]]:
        s = self.summary(path)
        return s["functions"].get(func) if s else None

    # ------------------------------------------------------------------ values

    def values(self, path: str, func: str, name: str, depth: int = 0, this: Optional[Tuple[str, str]] = None) -> List[Tuple[str, str, Dict[str, Any]]]:
        """(path, function, vref) of every value the dotted `name` read in `func` may hold.
        `this`: the class `self` is known to be an instance of (a subclass of `func`'s own class,
        when `func` was reached through a `self.` call an override of it receives: its
        `self.build()` calls run that class's overrides, its `self.x` may be bound there)."""
        name = uncompiled(name)
        key = ("values", path, func, name, this)
        if key in self._memo:
            return self._memo[key]
        if key in self._active or depth > _MAX_DEPTH:
            return []
        self._active.add(key)
        try:
            found = self._values(path, func, name, depth, this)
            if this is not None:
                found = self._dispatched(found, this)
        finally:
            self._active.discard(key)
        self._memo[key] = found
        return found

    def _values(self, path: str, func: str, name: str, depth: int, this: Optional[Tuple[str, str]] = None) -> List[Tuple[str, str, Dict[str, Any]]]:
        s = self.summary(path)
        if s is None:
            return []
        out: List[Tuple[str, str, Dict[str, Any]]] = []
        if name.startswith("self.") and name.count(".") >= 1:
            attr = name
            cls = self._class_of(path, func)
            if cls is None:
                return []
            classes = self._mro(path, cls)
            if this is not None and (path, cls) in self._mro(*this):
                classes = self._mro(*this)  # `self` is an instance of the subclass: its methods bind too
            elif this is None and func.count(".") == 1:
                # a subclass that inherits this method runs it on its own instances: the
                # attributes its methods bind are the ones `self.` reads there too
                method = func.rsplit(".", 1)[-1]
                for sub in self._subclasses(path, cls):
                    if self._override(sub, method) == (path, func):
                        classes = classes + [k for k in self._mro(*sub) if k not in classes]
            for p, c in classes:
                ps = self.summary(p)
                if ps is None:
                    continue
                for qual, refs in ps["binds"].items():
                    if qual.startswith(f"{c}.") and attr in refs:
                        out.extend((p, qual, r) for r in refs[attr])
            if not out and name.count(".") >= 2:
                out = self._fields(path, func, name, depth, this)  # `self.models.generator`
            return out
        scope: Optional[str] = func
        while scope is not None:
            refs = s["binds"].get(scope, {}).get(name)
            if refs:
                return [(path, scope, r) for r in refs]
            info = s["functions"].get(scope)
            head = name.split(".", 1)[0]
            if info is not None and scope != "<module>" and head in info["params"] and head == name:
                return self._arguments(path, scope, name, depth, this)
            if scope == "<module>":
                break
            scope = scope.rsplit(".", 1)[0] if "." in scope else "<module>"
        imported = self._imported(path, name) if depth < _MAX_DEPTH else None
        if imported is not None and imported[0] != path:
            return self.values(imported[0], "<module>", imported[1], depth + 1)
        if not out and "." in name:
            out = self._fields(path, func, name, depth, this)  # `models.generator`, `models` a container
        return out

    # ------------------------------------------------------------------ container attributes

    def _fields(self, path: str, func: str, name: str, depth: int, this: Optional[Tuple[str, str]]) -> List[Tuple[str, str, Dict[str, Any]]]:
        """The values of `holder.attr` when `holder` is a container the code builds with the
        attribute as a keyword (`Models(generator=generator)`: a `@dataclass` or `NamedTuple`,
        nested in a class too, `SimpleNamespace(...)`), or binds it on (`models.generator = m`),
        through the builders that return it (`models = self.setup_models()`) and the arguments
        call sites pass (`def step(self, models)`). Anything else (an object whose own
        `__init__` decides its attributes, a dict) gives nothing."""
        base, _, attr = name.rpartition(".")
        if not base or base == "self" or attr.startswith("__") or depth >= _MAX_DEPTH:
            return []
        out: List[Tuple[str, str, Dict[str, Any]]] = []
        for p, f, ref in self.values(path, func, base, depth + 1, this):
            for found in self._field_of_ref(p, f, ref, attr, depth + 1, this):
                if found not in out:
                    out.append(found)
        return out

    def _field_of_ref(self, path: str, func: str, ref: Any, attr: str, depth: int,
                      this: Optional[Tuple[str, str]]) -> List[Tuple[str, str, Dict[str, Any]]]:
        if depth > _MAX_DEPTH or not isinstance(ref, dict):
            return []
        if "n" in ref:
            if ref.get("x"):
                return []
            return self.values(path, func, f"{ref['n']}.{attr}", depth + 1, this)
        if "c" not in ref or ref.get("m"):
            return []
        fields = self._holder_fields(path, func, ref["c"])
        if fields is not None:
            value = (ref.get("k") or {}).get(attr)
            if value is None and attr in fields:
                args = ref.get("a") or []
                i = fields.index(attr)
                value = args[i] if i < len(args) else None
            if isinstance(value, str):
                return [(path, func, {"n": value})]
            return [(path, func, value)] if isinstance(value, dict) else []
        out: List[Tuple[str, str, Dict[str, Any]]] = []
        for p, q in self._callees_of(path, func, ref["c"], this):  # a builder that returns the container
            ps = self.summary(p)
            for r in (ps["returns"].get(q, []) if ps else []):
                out.extend(self._field_of_ref(p, q, r, attr, depth + 1, this))
        return out

    def _holder_fields(self, path: str, func: str, spelled: str) -> Optional[List[str]]:
        """The fields of the container class a call spelled `spelled` constructs (positional
        order; a namespace: []), or None when it is not known to be one (scale `holders`)."""
        if self._qualname(path, spelled) in _NAMESPACES:
            return []
        head, _, rest = spelled.partition(".")
        classes: List[Tuple[str, str]] = []
        if head == "self" and rest and "." not in rest:
            cls = self._class_of(path, func)
            if cls is None:
                return None
            classes = [(p, f"{c}.{rest}") for p, c in self._mro(path, cls)]  # `self.Models(...)`: a nested class
        else:
            if not self._ensure(path):
                return None
            try:
                types = self.project.name_types(path, func, head)
            except Exception:  # pragma: no cover - the project model's own limits
                types = frozenset()
            classes = [(t[1], f"{t[2]}.{rest}" if rest else t[2]) for t in sorted(types, key=repr) if t[0] == "C"]
        for p, qual in classes:
            ps = self.summary(p)
            held = (ps.get("holders") or {}) if ps else {}
            if qual in held:
                return list(held[qual])
        return None

    def _callees_of(self, path: str, func: str, spelled: str, this: Optional[Tuple[str, str]]) -> List[Tuple[str, str]]:
        """`callees`, where a `self.method(...)` call of an instance known to be of class `this`
        runs the override `this` inherits (`BaseCore.__call__`'s `self.setup_models()` on a
        `GeneratorCore` runs `GeneratorCore.setup_models`)."""
        if this is not None and spelled.startswith("self.") and spelled.count(".") == 1:
            found = self._override(this, spelled[len("self."):])
            if found is not None:
                return [found]
        return self.callees(path, func, spelled)

    def _subclasses(self, path: str, cls: str) -> List[Tuple[str, str]]:
        """The project classes (of the files the project model holds) that derive from `cls` of
        `path`, directly or through other project classes: those whose bases' last names reach
        `cls`'s name, kept when the project model's MRO confirms it. A few (16)."""
        key = ("subclasses", path, cls)
        if key in self._memo:
            return self._memo[key]
        named = self._memo.get(("class-bases",))
        if named is None:
            named = []
            held = getattr(self.project, "summaries", None) or {}  # the project model's files: the glue between scale files too
            for p in sorted(set(self.files()) | set(held)):
                for c, info in ((held.get(p) or self.summary(p)) or {}).get("classes", {}).items():
                    lasts = {b.rsplit(".", 1)[-1] for b in info.get("bases", ()) if b}
                    if lasts:
                        named.append((p, c, lasts))
            self._memo[("class-bases",)] = named
        names, found = {cls.rsplit(".", 1)[-1]}, []  # type: Set[str], List[Tuple[str, str]]
        for _ in range(4):
            grew = False
            for p, c, lasts in named:
                if (p, c) != (path, cls) and (p, c) not in found and lasts & names and len(found) < 16:
                    found.append((p, c))
                    names.add(c.rsplit(".", 1)[-1])
                    grew = True
            if not grew:
                break
        out = [sub for sub in found if (path, cls) in self._mro(*sub)]
        self._memo[key] = out
        return out

    def _override(self, this: Tuple[str, str], method: str) -> Optional[Tuple[str, str]]:
        """The function `method` of class `this` resolves to (its own, else its bases' in MRO order)."""
        if not self._ensure(this[0]):
            return None
        try:
            chain = self.project.mro(*this)
        except Exception:  # pragma: no cover - the project model's own limits
            return None
        for p, c in chain:
            if self._ensure(p) and f"{c}.{method}" in self.project.summaries[p]["functions"]:
                return (p, f"{c}.{method}")
        return None

    def _dispatched(self, found: List[Tuple[str, str, Dict[str, Any]]], this: Tuple[str, str]) -> List[Tuple[str, str, Dict[str, Any]]]:
        """`values` of a function whose `self` is a `this`: a value a `self.method(...)` call
        returns is what `this`'s override of the method returns (the template method: the base
        class's loop calls `self.setup_models()`, each experiment's subclass defines it)."""
        out: List[Tuple[str, str, Dict[str, Any]]] = []
        for p, f, ref in found:
            spelled = ref.get("c", "") if isinstance(ref, dict) and not ref.get("m") else ""
            target = self._override(this, spelled[len("self."):]) if spelled.startswith("self.") and spelled.count(".") == 1 else None
            ps = self.summary(target[0]) if target is not None else None
            returned = ps["returns"].get(target[1], []) if ps is not None and target is not None else []
            if returned and (target[0], target[1]) != (p, f):
                out.extend((target[0], target[1], r) for r in returned)
            else:
                out.append((p, f, ref))
        return out

    def latest(self, path: str, func: str, name: str, before: Tuple[int, int]) -> List[Tuple[str, str, Dict[str, Any]]]:
        """The value `name` holds at `before` in `func` when its bindings there are calls (the
        latest one before it, in source order); otherwise every value it may hold."""
        s = self.summary(path)
        refs = s["binds"].get(func, {}).get(name) if s else None
        if not refs:
            return self.values(path, func, name)
        placed = []
        for r in refs:
            inner = r.get("u", r)
            if "r" not in inner:
                return self.values(path, func, name)
            placed.append(((inner["r"], inner["cc"]), r))
        earlier = [pr for pr in placed if pr[0] < before]
        if not earlier:
            return self.values(path, func, name)
        return [(path, func, max(earlier, key=lambda pr: pr[0])[1])]

    def wrappers_at(self, path: str, func: str, name: str, before: Tuple[int, int]) -> List[Wrapper]:
        """`wrappers`, reading `name`'s latest binding before `before` in `func`."""
        out: List[Wrapper] = []
        for p, f, ref in self.latest(path, func, name, before):
            for w in self._wrappers_of_ref(p, f, ref, 0):
                if all(w.place != o.place or w.element != o.element for o in out):
                    out.append(w)
        return out

    def mutated(self, path: str, func: str, name: str) -> bool:
        """Whether the dict `name` is changed in place in `func` (`cfg["fp16"]["enabled"] = ...`)."""
        s = self.summary(path)
        return bool(s) and name in s.get("mutated", {}).get(func, ())

    def _arguments(self, path: str, func: str, param: str, depth: int, this: Optional[Tuple[str, str]] = None) -> List[Tuple[str, str, Dict[str, Any]]]:
        """The values call sites pass to a parameter (the project model's call graph), and, for
        a method, the `self.method(...)` calls of the methods of its class's lineage that run it
        (`self` an instance of this class, `this`, or its own: a base class's training loop
        calling the `backward_pass` each experiment's subclass defines); their `self` is then an
        instance of that class (`this`, for the caller's own `self.` calls)."""
        info = self.function(path, func)
        if info is None:
            return []
        params = list(info["params"])
        method = info["cls"] and func.count(".") == 1
        if method and params:
            params = params[1:]  # self
        try:
            calls = [(c, this) for c in self.project.callers((path, func))[:12]]
        except Exception:  # pragma: no cover - the project model's own limits
            calls = []
        if method:
            calls.extend((c, this or (path, info["cls"])) for c in self._self_calls(path, func, this or (path, info["cls"])) if all(c.record is not o.record for o, _ in calls))
        out: List[Tuple[str, str, Dict[str, Any]]] = []
        for call, known in calls:
            record = call.record
            ref = None
            if param in params:
                i = params.index(param)
                if i < len(record["a"]):
                    ref = record["a"][i]
            if ref is None:
                ref = record["k"].get(param)
            ref = self._compiled_subject(call.path, ref)
            if ref and "n" in ref:
                out.extend(self.values(call.path, call.func, ref["n"], depth + 1, known) or [(call.path, call.func, {"n": ref["n"], "x": 1})])
        return out

    def _self_calls(self, path: str, func: str, this: Tuple[str, str]) -> List[Any]:
        """The `self.method(...)` calls in the methods of `this`'s classes (its MRO, read from
        the project summaries) that run `func` of `path` on an instance of `this` (the method
        `this` resolves `method` to is that one), a few."""
        from .graph import Call

        method = func.rsplit(".", 1)[-1]
        if self._override(this, method) != (path, func):
            return []
        try:
            chain = self.project.mro(*this)
        except Exception:  # pragma: no cover - the project model's own limits
            return []
        out: List[Any] = []
        for p, c in chain:
            if not self._ensure(p):
                continue
            for qual, finfo in self.project.summaries[p]["functions"].items():
                if not qual.startswith(f"{c}.") or qual.count(".") != 1:
                    continue
                for record in finfo["calls"]:
                    if record.get("f") == f"self.{method}" and len(out) < 12:
                        out.append(Call(p, qual, record))
        return out

    def _compiled_subject(self, path: str, ref: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        """The module a call site's argument `torch.compile(model)` compiles (a project-model
        call record's value; the scale summary's own values unwrap it when they are read):
        `Trainer(torch.compile(model))` hands the trainer `model`'s parameters and wrapper."""
        for _ in range(3):
            if not isinstance(ref, dict) or "c" not in ref or ref.get("m") or self._qualname(path, ref["c"]) not in COMPILERS:
                return ref
            args = ref.get("a") or []
            subject = args[0] if args else (ref.get("k") or {}).get("model")
            if not isinstance(subject, dict):
                return ref
            ref = subject
        return ref

    def _qualname(self, path: str, spelled: str) -> Optional[str]:
        """`torch.compile` for a spelling in `path` that reads it through the file's imports."""
        s = self.summary(path)
        head, _, rest = spelled.partition(".")
        imported = s["imports"].get(head) if s else None
        if imported is None or imported[0]:
            return None
        base = f"{imported[1]}.{imported[2]}" if imported[2] else imported[1]
        return f"{base}.{rest}" if rest else base

    def _class_of(self, path: str, func: str) -> Optional[str]:
        info = self.function(path, func)
        if info is not None and info["cls"]:
            return info["cls"]
        head = func.split(".", 1)[0]
        s = self.summary(path)
        return head if s is not None and head in s["classes"] else None

    def _ensure(self, path: str) -> bool:
        """The project model holds `path`'s summary (loaded now for a file the view read lazily)."""
        loader = getattr(self.project, "load_file", None)
        return path in self.project.summaries or (loader is not None and loader(path))

    def _mro(self, path: str, cls: str) -> List[Tuple[str, str]]:
        if not self._ensure(path):
            return [(path, cls)]
        try:
            found = self.project.mro(path, cls)
        except (KeyError, Exception):
            found = [(path, cls)]
        return [(p, c) for p, c in found if self.summary(p) is not None]

    def callees(self, path: str, func: str, spelled: str) -> List[Tuple[str, str]]:
        """The project functions a callee spelled in `func` may be (project model resolution)."""
        key = ("callees", path, func, spelled)
        if key in self._memo:
            return self._memo[key]
        out: List[Tuple[str, str]] = []
        if not self._ensure(path):
            self._memo[key] = out
            return out
        try:
            types = self.project.name_types(path, func, spelled)
        except Exception:  # pragma: no cover
            types = frozenset()
        for t in sorted(types, key=repr):
            if t[0] == "F":
                out.append((t[1], t[2]))
        self._memo[key] = out
        return out

    # ------------------------------------------------------------------ wrappers

    def wrappers(self, path: str, func: str, name: str) -> List[Wrapper]:
        """The wrappers the dotted `name` read in `func` of `path` may hold (empty: plain, or
        not known). In-place wrappers (`fully_shard(model)`) of the name count too."""
        name = uncompiled(name)
        key = ("wrappers", path, func, name)
        if key in self._memo:
            return self._memo[key]
        out: List[Wrapper] = []
        seen: Set[Tuple[str, int, int, int]] = set()

        def add(w: Optional[Wrapper]) -> None:
            if w is not None and (w.path, w.event["r"], w.event["c"], w.element) not in seen:
                seen.add((w.path, w.event["r"], w.event["c"], w.element))
                out.append(w)

        for p, f, ref in self.values(path, func, name):
            for w in self._wrappers_of_ref(p, f, ref, 0):
                add(w)
        for w in self._in_place(path, func, name):
            add(w)
        self._memo[key] = out
        return out

    def _in_place(self, path: str, func: str, name: str) -> List[Wrapper]:
        """`fully_shard(model)` as a statement: the module itself becomes an FSDP2 module."""
        s = self.summary(path)
        if s is None:
            return []
        out = []
        funcs = {func}
        if name.startswith("self."):
            cls = self._class_of(path, func)
            funcs = {q for q in s["functions"] if cls and q.startswith(f"{cls}.")}
        for e in s["events"]:
            if e["e"] == "wrap" and e["k"] == "fsdp2" and e.get("s") == name and e["f"] in funcs and not e.get("t"):
                out.append(self._wrapper(path, e, 0))
        return [w for w in out if w is not None]

    def _wrappers_of_ref(self, path: str, func: str, ref: Dict[str, Any], depth: int) -> List[Wrapper]:
        if depth > _MAX_DEPTH or not ref:
            return []
        if "u" in ref:
            inner = ref["u"]
            if "c" in inner:
                e = self.event_at(path, inner["r"], inner["cc"])
                if e is not None and e["e"] == "wrap":
                    w = self._wrapper(path, e, ref["i"])
                    return [w] if w is not None else []
                # `engine, optimizer = build_engine(...)`: element i of what the builder returns
                out = []
                for p, q in self.callees(path, func, inner["c"]):
                    ps = self.summary(p)
                    for r in (ps["returns"].get(q, []) if ps else []):
                        if "tu" in r and ref["i"] < len(r["tu"]):
                            element = r["tu"][ref["i"]]
                            if isinstance(element, str):
                                out.extend(self._wrappers_of_ref(p, q, {"n": element}, depth + 1))
                            elif isinstance(element, dict):
                                out.extend(self._wrappers_of_ref(p, q, element, depth + 1))
                        elif "u" not in r:
                            out.extend(w for w in self._wrappers_of_ref(p, q, {"u": r, "i": ref["i"]}, depth + 1) if "c" in r)
                return out
            return []
        if "n" in ref:
            if ref.get("x"):
                return []
            found = [w for p, f, r in self.values(path, func, ref["n"], depth + 1) for w in self._wrappers_of_ref(p, f, r, depth + 1)]
            # `fully_shard(model); compiled = torch.compile(model)`: the name's own in-place wrapper
            return found + self._in_place(path, func, uncompiled(ref["n"]))
        if "c" in ref:
            e = self.event_at(path, ref["r"], ref["cc"])
            if e is not None and e["e"] == "wrap":
                w = self._wrapper(path, e, 0)
                return [w] if w is not None else []
            out: List[Wrapper] = []
            for p, q in self.callees(path, func, ref["c"]):
                ps = self.summary(p)
                for r in (ps["returns"].get(q, []) if ps else []):
                    out.extend(self._wrappers_of_ref(p, q, r, depth + 1))
            return out
        return []

    def _wrapper(self, path: str, e: Dict[str, Any], element: int) -> Optional[Wrapper]:
        if e["k"] == "ctxwrap":
            e = self._context_wrap(e)  # type: ignore[assignment]
            if e is None:
                return None
        kind = e["k"]
        w = Wrapper(kind, path, e, element)
        if kind in ("fsdp1", "fsdp2"):
            w.policy = self.policy(path, e["f"], e.get("mp"))
            if kind == "fsdp1" and e.get("kwd") and not e.get("shard") and self._spread_no_shard(path, e):
                w.notes["no_shard"] = True
        elif kind == "deepspeed":
            w.config = self.config(path, e["f"], e.get("cfg"))
        elif kind == "fabric":
            fabric = self._framework(path, e["f"], e.get("recv"), "fabric")
            if fabric is None:
                return None  # `.setup(...)` of something not known to be a Fabric
            fpath, fe = fabric
            w.framework = fabric
            w.precision = fe.get("prec")
            w.strategy = self._strategy_kind(fpath, fe["f"], fe.get("strategy"))
            if w.strategy == "fsdp" and w.precision in LIGHTNING_FSDP_POLICY:
                param, reduce = LIGHTNING_FSDP_POLICY[w.precision]
                w.policy = Policy("lightning", param, reduce, (fpath, fe["r"], fe["c"], fe["er"], fe["ec"]))
            if w.strategy == "deepspeed":
                strategy = self._strategy_event(fpath, fe["f"], fe.get("strategy"))
                if strategy is not None and strategy[1].get("cfg") is not None:
                    w.config = self.config(strategy[0], strategy[1]["f"], strategy[1]["cfg"])
        elif kind == "accelerate":
            accelerator = self._framework(path, e["f"], e.get("recv"), "accelerator")
            if accelerator is None:
                return None
            w.framework = accelerator
        return w

    def _context_wrap(self, e: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """`wrap(module)` (`torch.distributed.fsdp.wrap`) as the FSDP1 wrap it makes: it wraps with
        the `wrapper_cls` of the `enable_wrap(...)` context it runs in (and is a no-op outside one,
        a run that shards nothing). Known only when the project enters `enable_wrap` somewhere and
        every such call names FSDP1 with sharding strategies the code shows (`**fsdp_args` bound
        to a `dict(...)` of the function); the wrap then holds the first sharding strategy, or
        NO_SHARD when any of them is. None otherwise: another wrapper class, or not known."""
        key = ("context-wrap",)
        if key not in self._memo:
            contexts = [c for _, c in self.events("ctor") if c.get("k") == "enable_wrap"]
            strategies: Optional[List[str]] = []
            for c in contexts:
                if c.get("wc") not in FSDP1 or c.get("shards") is None:
                    strategies = None
                    break
                strategies.extend(c["shards"])  # type: ignore[union-attr]
            if not contexts:
                strategies = None
            self._memo[key] = strategies
        strategies = self._memo[key]
        if strategies is None or e.get("kwd"):
            return None
        if e.get("shard"):
            strategies = [e["shard"]]
        shard = next((x for x in strategies if not x.endswith(_SHARDED_STRATEGIES)), strategies[0] if strategies else None)
        return {**e, "k": "fsdp1", "shard": shard, "ctx": 1}

    def _spread_no_shard(self, path: str, e: Dict[str, Any]) -> bool:
        """Whether the options dict an FSDP1 wrap spreads (`FSDP(m, **self.fsdp_defaults)`)
        may have its sharding strategy set to `NO_SHARD` (`shardset` events of the project: a
        script's `core.fsdp_defaults["sharding_strategy"] = ShardingStrategy.NO_SHARD` before it
        runs; any value but a sharding one counts, `NO_SHARD` or decided at run time): a dict
        spelled with the same last name, set on the wrap's own dict -- an instance
        of the wrapping method's class or a subclass of it, or an owner whose type is not known.
        An instance of an unrelated class (another script's experiment) does not count."""
        wrap_cls = self._class_of(path, e["f"])
        for spread in e["kwd"]:
            last = spread.rsplit(".", 1)[-1]
            for p, s in self.events("shardset"):
                held = s["d"]
                if held.rsplit(".", 1)[-1] != last or (s.get("v") or "?").endswith(_SHARDED_STRATEGIES):
                    continue
                owner = held.rsplit(".", 1)[0] if "." in held else None
                if owner is None or not spread.startswith("self.") or wrap_cls is None:
                    if owner is None and spread != held:
                        continue
                    return True
                if owner == "self":
                    if (p, self._class_of(p, s["f"]) or "") in self._lineage(path, wrap_cls):
                        return True
                    continue
                types = self._types(p, s["f"], owner)
                instances = [t for t in types if t[0] == "I"]
                if not instances or any((path, wrap_cls) in self._lineage(t[1], t[2]) for t in instances):
                    return True
        return False

    def _lineage(self, path: str, cls: str) -> Set[Tuple[str, str]]:
        if not self._ensure(path):
            return {(path, cls)}
        try:
            return {(p, c) for p, c in self.project.mro(path, cls)}
        except Exception:  # pragma: no cover - the project model's own limits
            return {(path, cls)}

    def _types(self, path: str, func: str, name: str) -> Any:
        if not self._ensure(path):
            return frozenset()
        try:
            return self.project.name_types(path, func, name)
        except Exception:  # pragma: no cover - the project model's own limits
            return frozenset()

    def _framework(self, path: str, func: str, receiver: Optional[str], kind: str) -> Optional[Tuple[str, Dict[str, Any]]]:
        """The `Fabric(...)` / `Accelerator(...)` constructor a receiver certainly holds."""
        if not receiver:
            return None
        found = self.constructors(path, func, receiver, kind)
        return found[0] if len(found) == 1 else None

    def constructors(self, path: str, func: str, name: str, kind: str) -> List[Tuple[str, Dict[str, Any]]]:
        """The `ctor` events of `kind` the name may hold; empty unless every binding is one."""
        out: List[Tuple[str, Dict[str, Any]]] = []
        refs = self.values(path, func, name)
        if not refs:
            return []
        for p, f, ref in refs:
            found = self._ctor_of_ref(p, f, ref, kind, 0)
            if found is None:
                return []
            if found not in out:
                out.append(found)
        return out

    def _ctor_of_ref(self, path: str, func: str, ref: Dict[str, Any], kind: str, depth: int) -> Optional[Tuple[str, Dict[str, Any]]]:
        if depth > _MAX_DEPTH or not ref:
            return None
        if "c" in ref:
            e = self.event_at(path, ref["r"], ref["cc"])
            if e is not None and e["e"] == "ctor" and e["k"] == kind:
                return (path, e)
            for p, q in self.callees(path, func, ref["c"]):
                ps = self.summary(p)
                for r in (ps["returns"].get(q, []) if ps else []):
                    found = self._ctor_of_ref(p, q, r, kind, depth + 1)
                    if found is not None:
                        return found
            return None
        if "n" in ref and not ref.get("x"):
            found = self.constructors(path, func, ref["n"], kind) if depth < _MAX_DEPTH else []
            return found[0] if len(found) == 1 else None
        return None

    def _strategy_event(self, path: str, func: str, strategy: Any) -> Optional[Tuple[str, Dict[str, Any]]]:
        if isinstance(strategy, dict) and "c" in strategy:
            e = self.event_at(path, strategy["r"], strategy["cc"])
            return (path, e) if e is not None and e["e"] == "ctor" and e["k"] == "strategy" else None
        if isinstance(strategy, str):
            found = self.constructors(path, func, strategy, "strategy")
            return found[0] if len(found) == 1 else None
        return None

    def _strategy_kind(self, path: str, func: str, strategy: Any) -> Optional[str]:
        """Lightning's `strategy=`: "fsdp" | "deepspeed" | "ddp" | "fsdp2" | None (the default) | "?"."""
        if strategy is None:
            return None
        if isinstance(strategy, dict) and "s" in strategy:
            text = strategy["s"].lower()
            if text.startswith("fsdp"):
                return "fsdp"
            if text.startswith("deepspeed"):
                return "deepspeed"
            if text in ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "auto", "dp", "single_device"):
                return "ddp" if text.startswith("ddp") else None
            return "?"
        found = self._strategy_event(path, func, strategy)
        return found[1].get("sk") if found is not None else "?"

    # ------------------------------------------------------------------ policies and configs

    def policy(self, path: str, func: str, spelled: Any) -> Optional[Policy]:
        """The `MixedPrecision(...)` / `MixedPrecisionPolicy(...)` a wrapper's argument holds
        (inline, a name in scope, a module-level name of another file); None when absent or
        not known. A name bound two ways (`fpSixteen if use_fp16 else bfSixteen`) gives None."""
        if spelled is None:
            return None
        found: List[Tuple[str, Dict[str, Any]]] = []
        if isinstance(spelled, dict) and "c" in spelled:
            e = self.event_at(path, spelled["r"], spelled["cc"])
            if e is not None and e["e"] == "ctor" and e["k"] == "policy":
                found = [(path, e)]
        elif isinstance(spelled, str):
            found = self.constructors(path, func, spelled, "policy")
            if not found:
                found = self._imported_policy(path, spelled)
        if len(found) != 1:
            return None
        p, e = found[0]
        rpos = e.get("rpos")
        return Policy(
            e["cls"], e.get("param"), e.get("reduce"), (p, e["r"], e["c"], e["er"], e["ec"]),
            (p, rpos["r"], rpos["c"], rpos["er"], rpos["ec"]) if rpos else None, bool(e.get("star")),
        )

    def policy_choices(self, path: str, func: str, spelled: Any) -> Tuple[List[Policy], List[Tuple[str, str]]]:
        """Every `MixedPrecision(...)` / `MixedPrecisionPolicy(...)` a wrapper's argument may hold
        -- through names bound more than one way (`policy = fpSixteen` in one branch, `bfSixteen`
        in the other), project helpers' returns and the elements of a tuple one returns
        (`mp, wrap, shard = get_policies(cfg)`) -- and the functions that bind a name more than
        one way (where the choice is made). Empty when a value is not known to be a policy."""
        if spelled is None:
            return [], []
        ref = spelled if isinstance(spelled, dict) else {"n": spelled}
        found: List[Tuple[str, Dict[str, Any]]] = []
        choosers: List[Tuple[str, str]] = []
        if not self._policy_refs(path, func, ref, 0, found, choosers):
            return [], []
        out: List[Policy] = []
        for p, e in found:
            rpos = e.get("rpos")
            out.append(Policy(
                e["cls"], e.get("param"), e.get("reduce"), (p, e["r"], e["c"], e["er"], e["ec"]),
                (p, rpos["r"], rpos["c"], rpos["er"], rpos["ec"]) if rpos else None, bool(e.get("star")),
            ))
        return out, choosers

    def _policy_refs(self, path: str, func: str, ref: Any, depth: int, found: List[Tuple[str, Dict[str, Any]]],
                     choosers: List[Tuple[str, str]]) -> bool:
        """Adds the policy constructors `ref` may hold to `found`; False when some value of it is
        not known to be one (None: `mixed_precision=None` is no policy, and is left out)."""
        if depth > _MAX_DEPTH or not ref:
            return False
        if "u" in ref:
            inner = ref["u"]
            if "c" not in inner:
                return False
            known = False
            for p, q in self.callees(path, func, inner["c"]):
                ps = self.summary(p)
                for r in (ps["returns"].get(q, []) if ps else []):
                    if "tu" not in r or ref["i"] >= len(r["tu"]):
                        return False
                    element = r["tu"][ref["i"]]
                    element = {"n": element} if isinstance(element, str) else element
                    if not self._policy_refs(p, q, element, depth + 1, found, choosers):
                        return False
                    known = True
            return known
        if "n" in ref:
            if ref.get("x"):
                return False
            values = self.values(path, func, ref["n"], depth + 1)
            if not values:
                imported = self._imported_policy(path, ref["n"]) or self._star_policy(path, ref["n"], 0)
                for item in imported:
                    if item not in found:
                        found.append(item)
                return bool(imported)
            if len(values) > 1 and (values[0][0], values[0][1]) not in choosers:
                choosers.append((values[0][0], values[0][1]))
            return all(self._policy_refs(p, f, r, depth + 1, found, choosers) for p, f, r in values)
        if "c" in ref:
            e = self.event_at(path, ref["r"], ref["cc"]) if "r" in ref else None
            if e is not None and e["e"] == "ctor" and e["k"] == "policy":
                if (path, e) not in found:
                    found.append((path, e))
                return True
            known = False
            for p, q in self.callees(path, func, ref["c"]):
                ps = self.summary(p)
                for r in (ps["returns"].get(q, []) if ps else []):
                    if not self._policy_refs(p, q, r, depth + 1, found, choosers):
                        return False
                    known = True
            return known
        return False

    def _star_policy(self, path: str, name: str, depth: int) -> List[Tuple[str, Dict[str, Any]]]:
        """A module-level policy a file has only from star imports (`from pkg.policies import *`,
        whose `__init__` does `from .mixed_precision import *`): the last star import whose
        module binds `name` (or star-imports a module that does), as Python resolves it."""
        if depth > 3 or "." in name:
            return []
        summary = self.project.summaries.get(path)
        if summary is None and not self._ensure(path):
            return []
        summary = self.project.summaries.get(path)
        for level, module in reversed((summary or {}).get("stars", ())):
            target = self.project.module_path(module, path, level) if (module or level) else None
            if target is None:
                continue
            found = self.constructors(target, "<module>", name, "policy")
            if found:
                return found
            found = self._star_policy(target, name, depth + 1)
            if found:
                return found
        return []

    def _imported_policy(self, path: str, spelled: str) -> List[Tuple[str, Dict[str, Any]]]:
        """`from policies import fpSixteen`: a module-level policy of another project file."""
        found = self._imported(path, spelled)
        return self.constructors(found[0], "<module>", found[1], "policy") if found is not None else []

    def _imported(self, path: str, spelled: str) -> Optional[Tuple[str, str]]:
        """(file, name) of a module-level name of another project file that `spelled`
        (an imported name, or `module.name`) reads."""
        s = self.summary(path)
        head, _, rest = spelled.partition(".")
        imported = s["imports"].get(head) if s else None
        if imported is None:
            return None
        level, module, attr = imported
        if attr:
            name = attr if not rest else None
            if name is None:  # `from pkg import mod` then `mod.name`
                target = self.project.module_path(f"{module}.{attr}" if module else attr, path, level)
                return (target, rest) if target is not None and "." not in rest else None
            target = self.project.module_path(module, path, level) if (module or level) else None
            return (target, name) if target is not None else None
        if not rest or "." in rest:
            return None
        target = self.project.module_path(module, path, level)
        return (target, rest) if target is not None else None

    def config(self, path: str, func: str, spelled: Any, depth: int = 0) -> Optional[Config]:
        """The DeepSpeed configuration an argument holds: a dict literal (in scope, or returned
        by a project function), or a JSON file a string literal names (only with `read_configs`)."""
        if spelled is None or depth > _MAX_DEPTH:
            return None
        if isinstance(spelled, dict):
            return self._config_of_ref(path, func, spelled, depth)
        if isinstance(spelled, str):
            if self.mutated(path, func, spelled):
                return None  # changed in place after it was built: decided at run time
            refs = self.values(path, func, spelled)
            if any(self.mutated(p, f, spelled) for p, f, _ in refs):
                return None
            found = [c for p, f, r in refs for c in [self._config_of_ref(p, f, r, depth + 1)] if c is not None]
            if len(found) == 1 and len(refs) == 1:
                return found[0]
        return None

    def _config_of_ref(self, path: str, func: str, ref: Dict[str, Any], depth: int) -> Optional[Config]:
        if depth > _MAX_DEPTH:
            return None
        if "dl" in ref:
            s = self.summary(path)
            if s is None or ref["dl"] >= len(s["dicts"]):
                return None
            d = s["dicts"][ref["dl"]]
            lines = {tuple(k.split(".")): (v[0], v[1]) for k, v in d["l"].items()}
            lines[()] = (d["r"], d["c"])
            choices = {tuple(k.split(".")): v for k, v in (d.get("ch") or {}).items()}
            return Config(d["v"], path, lines, literal=True, choices=choices)
        if "s" in ref:
            return self.config_file(ref["s"], path, None)
        if "j" in ref:
            inner = ref["j"]
            if inner and "o" in inner:
                return self.config_file(inner["o"], path, None)
            if inner and "n" in inner:
                for p, f, r in self.values(path, func, inner["n"]):
                    if "o" in r:
                        return self.config_file(r["o"], p, None)
            return None
        if "n" in ref and not ref.get("x"):
            return self.config(path, func, ref["n"], depth + 1)
        if "c" in ref:
            for p, q in self.callees(path, func, ref["c"]):
                ps = self.summary(p)
                for r in (ps["returns"].get(q, []) if ps else []):
                    found = self._config_of_ref(p, q, r, depth + 1)
                    if found is not None:
                        return found
        return None

    def config_file(self, literal: str, naming_file: str, place: Optional[Place]) -> Optional[Config]:
        """A config file a string literal names, parsed (None when configs may not be read,
        it is outside the project, not a regular file, or does not parse)."""
        if not self.read_configs:
            return None
        key = ("file", literal, os.path.dirname(naming_file))
        if key in self._memo:
            return self._memo[key]
        found: Optional[Config] = None
        target = configs.resolve(literal, naming_file, self.project.root)
        if target is not None:
            parsed = configs.load(target)
            self.configs_read.add(target)
            if parsed is not None:
                found = Config(parsed.values, target, parsed.lines, literal=False, named_at=place)
        self._memo[key] = found
        return found

    def deepspeed_configs(self) -> List[Config]:
        """Every DeepSpeed configuration the project shows: DeepSpeed-shaped dict literals not
        changed in place afterwards, and (with `read_configs`) the DeepSpeed-shaped JSON files
        string literals of the code name. Each once, in a stable order."""
        out: List[Config] = []
        seen: Set[Tuple[str, int]] = set()
        for path in self.files():
            s = self.summary(path)
            assert s is not None
            changed = {(q, n) for q, names in s.get("mutated", {}).items() for n in names}
            bound = {}
            for q, names in s["binds"].items():
                for n, refs in names.items():
                    for r in refs:
                        if "dl" in r:
                            bound.setdefault(r["dl"], []).append((q, n))
            for i, d in enumerate(s["dicts"]):
                if any(b in changed for b in bound.get(i, ())) or not configs.deepspeed_shaped(d["v"]):
                    continue
                if (path, i) not in seen:
                    seen.add((path, i))
                    found = self._config_of_ref(path, "<module>", {"dl": i}, 0)
                    if found is not None:
                        out.append(found)
            if not self.read_configs:
                continue
            for literal in s["paths"]:
                if not literal["s"].lower().endswith(".json"):
                    continue
                found = self.config_file(literal["s"], path, (path, literal["r"], literal["c"], literal["r"], literal["c"]))
                if found is not None and configs.deepspeed_shaped(found.values) and (found.path, 0) not in seen:
                    seen.add((found.path, 0))
                    out.append(found)
        for found in self.shipped_configs():
            if (found.path, 0) not in seen:
                seen.add((found.path, 0))
                out.append(found)
        return out

    def shipped_configs(self) -> List[Config]:
        """The DeepSpeed-shaped JSON files the project ships without its code naming them
        (`ds_config_zero1.json` launched by `deepspeed train.py --deepspeed_config ...`, a shell
        script, or an accelerate YAML's `deepspeed_config_file`): those the run's walk met
        (`project.config_candidates`, set by the engine; None: not known), read only with
        `read_configs`, in a project some file of which imports DeepSpeed, accelerate,
        transformers or Lightning, inside the project root, at most `MAX_SHIPPED_CONFIGS`,
        and parsed only when their bytes name a precision or ZeRO block. Each is a `Config`
        with no `named_at`; a rule reports on it only in the file itself."""
        key = ("shipped",)
        if key in self._memo:
            return self._memo[key]
        out: List[Config] = []
        self._memo[key] = out
        candidates = getattr(self.project, "config_candidates", None)
        root = getattr(self.project, "root", None)
        if not self.read_configs or not root or not self._consumes_deepspeed():
            return out
        self.wants_configs = True
        fence = os.path.realpath(root).rstrip(os.sep) + os.sep
        for path in [p for p in candidates or () if p.lower().endswith(".json")][:MAX_SHIPPED_CONFIGS]:
            real = os.path.realpath(path)
            if not real.startswith(fence) or not os.path.isfile(real):
                continue
            self.configs_read.add(real)  # its bytes decide whether it is one
            parsed = configs.load(real, _DEEPSPEED_NEEDLES)
            if parsed is not None and configs.deepspeed_shaped(parsed.values):
                out.append(Config(parsed.values, real, parsed.lines, literal=False))
        return out

    def shipped_accelerate_configs(self) -> List[Config]:
        """The accelerate config YAML files the project ships that point to a DeepSpeed JSON
        (`deepspeed_config: {deepspeed_config_file: ...}`) next to a `mixed_precision` of their
        own, named or not by the code (`accelerate launch --config_file` is how they are used):
        those the run's walk met, read as `shipped_configs` reads JSON (a project consuming
        DeepSpeed, inside its root, at most `MAX_SHIPPED_CONFIGS`, parsed only when their bytes
        name both keys)."""
        key = ("shipped-accelerate",)
        if key in self._memo:
            return self._memo[key]
        out: List[Config] = []
        self._memo[key] = out
        candidates = getattr(self.project, "config_candidates", None)
        root = getattr(self.project, "root", None)
        if not self.read_configs or not root or not (self._consumes_deepspeed() or self._imports_accelerate()):
            return out
        self.wants_configs = True
        fence = os.path.realpath(root).rstrip(os.sep) + os.sep
        yamls = [p for p in candidates or () if p.lower().endswith((".yaml", ".yml"))][:MAX_SHIPPED_CONFIGS]
        for path in yamls:
            real = os.path.realpath(path)
            if not real.startswith(fence) or not os.path.isfile(real):
                continue
            self.configs_read.add(real)  # its bytes decide whether it is one
            parsed = configs.load(real, (b"deepspeed_config_file",))
            if parsed is None or not isinstance(parsed.values, dict) or "mixed_precision" not in parsed.values:
                continue
            if "distributed_type" in parsed.values:
                out.append(Config(parsed.values, real, parsed.lines, literal=False))
        return out

    def launches(self) -> List[Any]:
        """The launch commands the project ships (`launchers.Launch`: `accelerate launch
        --mixed_precision bf16 train.py` in a shell script, a README command block, a
        Makefile), read from the launcher files the run's walk met (`project.config_candidates`;
        None: not known, and none are read), only with `read_configs` (a command that launches
        no project script is no launch). Each launcher file
        read is recorded (`configs_read`: its bytes decide findings), and the model then
        depends on which launcher files there are (`wants_configs`)."""
        key = ("launches",)
        if key in self._memo:
            return self._memo[key]
        from . import launchers

        out: List[Any] = []
        self._memo[key] = out
        candidates = getattr(self.project, "config_candidates", None)
        root = getattr(self.project, "root", None)
        if not self.read_configs or not root or candidates is None:
            return out
        self.wants_configs = True
        found, read = launchers.launches_of(candidates, root)
        self.configs_read.update(read)
        out.extend(self._with_config(launch) for launch in found)
        return out

    def _with_config(self, launch: Any) -> Any:
        """`launch` with what the accelerate config YAML its `--config_file` names sets
        (`launchers.LaunchConfig`), when that names exactly one project file that reads as
        accelerate's config (its bytes then decide findings); else `launch` as it is."""
        import dataclasses

        from . import launchers

        named = launch.option("config_file") if launch.kind == "accelerate" else None
        if named is None or not named[0]:
            return launch
        config = self.launcher_config(launch, named[0])
        facts = launchers.launch_config(config.path, config.values, config.lines) if config is not None else None
        return dataclasses.replace(launch, config=facts) if facts is not None else launch

    def launches_of(self, path: str) -> List[Any]:
        """The launches that start the script `path` (its real path)."""
        real = os.path.realpath(path)
        return [launch for launch in self.launches() if launch.script == real]

    def project_text(self, path: str) -> Optional[str]:
        """The text of a project file a launcher names (its bytes then decide findings:
        `configs_read`); None when it cannot be read or is larger than a config may be."""
        from ...core.safe_read import read_bytes

        try:
            if os.stat(path).st_size > configs.MAX_BYTES * 4:
                return None
            data = read_bytes(path)
        except OSError:
            return None
        self.configs_read.add(path)
        return data.decode("utf-8", "replace")

    def launcher_config(self, launch: Any, literal: str) -> Optional[Config]:
        """A config file a launch command names (`--config_file acc.yaml`, `--deepspeed ds.json`),
        resolved as its script is (`launchers.resolve_config`), parsed."""
        from . import launchers

        root = getattr(self.project, "root", None)
        if not self.read_configs or not root:
            return None
        target = launchers.resolve_config(literal, launch.path, root)
        if target is None:
            return None
        key = ("launched", target)
        if key in self._memo:
            return self._memo[key]
        parsed = configs.load(target)
        self.configs_read.add(target)
        found = Config(parsed.values, target, parsed.lines, literal=False) if parsed is not None else None
        self._memo[key] = found
        return found

    def _imports_accelerate(self) -> bool:
        """Some project file (its project summary) imports accelerate or transformers: the
        project may launch with an accelerate config YAML while no file names DeepSpeed."""
        for summary in (getattr(self.project, "summaries", None) or {}).values():
            imports = summary.get("imports", {}) if isinstance(summary, dict) else {}
            if any(entry[1] and entry[1].split(".")[0] in ("accelerate", "transformers") for entry in imports.values() if not entry[0]):
                return True
        return False

    def _consumes_deepspeed(self) -> bool:
        for path in self.files():
            s = self.summary(path)
            if s is not None and any(entry[1].split(".")[0] in _DEEPSPEED_CONSUMERS for entry in s["imports"].values() if not entry[0]):
                return True
        return False

    def named_configs(self, shaped: Callable[[Dict[str, Any]], bool]) -> List[Tuple[Config, Place]]:
        """The config files string literals of the code name (`read_configs` only) that pass
        `shaped` (`configs.accelerate_shaped`), each once, with where the code names it."""
        out: List[Tuple[Config, Place]] = []
        seen: Set[str] = set()
        if not self.read_configs:
            return out
        for path in self.files():
            s = self.summary(path)
            assert s is not None
            for literal in s["paths"]:
                place = (path, literal["r"], literal["c"], literal["r"], literal["c"])
                found = self.config_file(literal["s"], path, place)
                if found is not None and found.path not in seen and shaped(found.values):
                    seen.add(found.path)
                    out.append((found, place))
        return out

    # ------------------------------------------------------------------ helpers for rules

    def never_trains(self, path: str, func: str, held: str) -> bool:
        """Whether no training step can run from the function `func` that makes `held` (a
        `Fabric`, say): neither it, nor the functions defined in it, nor the project functions
        they call or hand on (`fabric.launch(main)`), transitively, calls a backward, an
        optimizer step or anything named like training (`fit`, `train_one_epoch`,
        `training_step`), and `held` does not leave the function (returned, bound on `self`,
        made at module level, or passed bare to a call the project model cannot follow).
        Conservative: anything not known answers False (it may train)."""
        key = ("never_trains", path, func, held)
        if key in self._memo:
            return self._memo[key]
        found = self._never_trains(path, func, held)
        self._memo[key] = found
        return found

    def _never_trains(self, path: str, func: str, held: str) -> bool:
        from .graph import Call

        project = self.project
        if func == "<module>" or not self._ensure(path):
            return False
        info = project.function((path, func))
        if info is None or info.get("cls") or info.get("returns"):
            return False  # a method shares `self` with the class's others; a builder's caller trains
        nested = sorted(q for q in project.summaries[path]["functions"] if q.startswith(func + "."))
        frontier = [(path, func), *((path, q) for q in nested)]
        seen = set(frontier)
        budget = _MAX_TRAIN_REACH
        while frontier:
            following = []
            for k in frontier:
                budget -= 1
                if budget < 0:
                    return False
                if not self._ensure(k[0]):
                    return False
                s = self.summary(k[0])
                if s is not None and any(e["f"] == k[1] and e["e"] in ("back", "step") for e in s["events"]):
                    return False
                finfo = project.function(k)
                if finfo is None:
                    return False
                for record in finfo["calls"]:
                    spelled = record["f"] or ""
                    method = spelled.rsplit(".", 1)[-1] if spelled else (record.get("fv") or {}).get("at", "")
                    if _TRAINING_CALL.search(method or ""):
                        return False
                    call = Call(k[0], k[1], record)
                    try:
                        callees = project.callees(call)
                    except Exception:  # pragma: no cover - the project model's own limits
                        return False
                    args = [*record["a"], *record["k"].values()]
                    if not callees and k == (path, func) and any(isinstance(a, dict) and a.get("n") == held for a in args):
                        if not spelled.startswith(held + "."):
                            return False  # the object itself handed to code the model cannot read
                    handed = []
                    for a in args:
                        if isinstance(a, dict) and "n" in a:
                            try:
                                types = project.name_types(k[0], k[1], a["n"])
                            except Exception:  # pragma: no cover
                                types = frozenset()
                            handed.extend((t[1], t[2]) for t in types if t[0] == "F")
                    for c in (*callees, *handed):
                        if c not in seen:
                            seen.add(c)
                            following.append(c)
            frontier = following
        return True


    def option_values(self, path: str, spelled: str) -> Optional[Tuple[List[Tuple[Any, bool]], Optional[Place]]]:
        """The values a command-line option read as `spelled` (`args.precision`) in `path` may
        take, as the code shows them: its argparse default (True: the default run), its
        choices, and the literals the file compares it to (`args.precision in ["16-mixed",
        "bf16"]`: values the code expects), less those a guard refuses along with DeepSpeed
        (`if args.precision == "16" and args.deepspeed_config_path: raise`); with where the
        option is declared (this file, else the one project file declaring it). None when no
        file declares the option."""
        s = self.summary(path)
        if s is None or "." not in spelled:
            return None
        dest = spelled.rsplit(".", 1)[-1]
        declared = [(path, s.get("options", {}).get(dest))] if dest in s.get("options", {}) else [
            (p, self.summary(p).get("options", {}).get(dest)) for p in self.files() if dest in (self.summary(p) or {}).get("options", {})  # type: ignore[union-attr]
        ]
        if len(declared) != 1:
            return None
        where, option = declared[0]
        refused = {str(v) for v in s.get("refused", {}).get(spelled, ())}
        out: List[Tuple[Any, bool]] = []
        if "d" in option:
            out.append((option["d"], True))
        for v in [*option.get("ch", ()), *s.get("compared", {}).get(spelled, ())]:
            if str(v) not in refused and all(str(v) != str(o) for o, _ in out):
                out.append((v, False))
        if out and out[0][1] and str(out[0][0]) in refused:
            out = out[1:]
        place = (where, option["r"], option["c"], option["er"], option["ec"])
        return out, place

    def deps(self, path: str, func: str, name: str, depth: int = 4) -> Tuple[Set[str], Set[str]]:
        """The names and callees the value of `name` in `func` reads, transitively (a few levels)."""
        s = self.summary(path)
        table = s["deps"].get(func, {}) if s else {}
        names: Set[str] = set()
        callees: Set[str] = set()
        frontier = [name]
        for _ in range(depth):
            following = []
            for n in frontier:
                entry = table.get(n)
                if entry is None:
                    continue
                for m in entry[0]:
                    if m not in names:
                        names.add(m)
                        following.append(m)
                callees.update(entry[1])
            frontier = following
        return names, callees

    def place(self, path: str, e: Dict[str, Any]) -> Place:
        return (path, e["r"], e["c"], e["er"], e["ec"])


def uncompiled(name: str) -> str:
    """The module a dotted name reads through `torch.compile`'s `OptimizedModule`:
    `compiled._orig_mod` is the module that was compiled (its parameters, its wrapper), so
    `model._orig_mod.parameters()` are `model`'s. `self._orig_mod` (a class's own) is kept."""
    if "._orig_mod" not in name:
        return name
    parts = name.split(".")
    kept = [p for i, p in enumerate(parts) if p != "_orig_mod" or i == 0 or (i == 1 and parts[0] == "self")]
    return ".".join(kept)


def exclusive(a: Optional[List[List[int]]], b: Optional[List[List[int]]]) -> bool:
    """Two events on different branches of one `if` (never both in one pass)."""
    frames = {frame: branch for frame, branch in (a or ())}
    return any(frame in frames and frames[frame] != branch for frame, branch in (b or ()))


# --------------------------------------------------------------------------- findings


@dataclass
class Finding:
    """A wrapper rule's finding before it is a Diagnostic: where, what, and the other sites
    (the wrapper, its policy, the config key) as (place, note). `fix`: (title, [(place, text)])."""

    place: Place
    message: str
    help: str
    related: List[Tuple[Place, str]] = field(default_factory=list)
    data: Dict[str, Any] = field(default_factory=dict)
    fix: Optional[Tuple[str, List[Tuple[Place, str]]]] = None
    config_file: bool = False  # reported in a config file (a DeepSpeed JSON, an accelerate YAML)
    severity: Optional[Any] = None  # the rule's own unless set (a conflict on a non-default choice: a warning)


def config_place(config: Config, *keys: str) -> Place:
    row, col = config.where(*keys)
    return (config.path, row, col, row, col + max(1, len(keys[-1]) + 2 if keys else 1))


def lightning_dtype(value: Any) -> Optional[str]:
    """The dtype a Lightning `precision=` value trains in ("fp16" for "16-mixed", "16", 16,
    "16-true"; "bf16" for the bf16 ones); None for 32/64 and anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    normal = lightning_precision(value)
    if normal in ("16-mixed", "16-true"):
        return "fp16"
    if normal in ("bf16-mixed", "bf16-true"):
        return "bf16"
    return None


def _shown(path: str) -> str:
    shown = os.path.relpath(path)
    return path if shown.startswith("..") else shown


def to_diagnostic(rule: Any, finding: Finding) -> Any:
    from ...core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Related

    path, row, col, erow, ecol = finding.place
    related = tuple(
        Related(Location(p[1], p[2]), Location(p[3], p[4]), note, filename=None if p[0] == path else _shown(p[0]))
        for p, note in finding.related
    )
    fix = None
    if finding.fix is not None:
        title, edits = finding.fix
        fix = Fix(Applicability.UNSAFE, title, tuple(Edit(Location(p[1], p[2]), Location(p[3], p[4]), text) for p, text in edits))
    data = dict(finding.data)
    data["supersedes_local"] = True
    if finding.config_file:
        data["config_file"] = True
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=finding.message,
        severity=finding.severity or rule.severity,
        filename=path,
        location=Location(row, col),
        end_location=Location(erow, ecol),
        fix=fix,
        noqa_row=row,
        url=rule.url(),
        data=data,
        related=related,
        help=finding.help,
    )


_LAST_FILE_VIEW: List[Any] = []


def file_view(source: str, path: str) -> ScaleView:
    """The view of one file alone (the per-file pass): no other file, no config file read.
    The last one is kept, so the several wrapper rules of one file build it once. Its two
    summaries come from one parse, and are kept as the project pass would cache them
    (`made_for`): the cross-file pass of the same run reads both again for such a file, and
    computed them a second time (on transformers, 70 files, a third of its CPU time)."""
    if _LAST_FILE_VIEW and _LAST_FILE_VIEW[0] == (path, source):
        return _LAST_FILE_VIEW[1]
    import marshal

    from .graph import Project
    from .scale import summarize_both

    summary, scale = summarize_both(source)
    try:
        made: Optional[bytes] = marshal.dumps((summary, scale))  # before a view reads them
    except ValueError:
        made = None
    project = Project(None, {path: summary} if summary is not None else {})
    view = ScaleView(project, lambda p: scale if p == path else None, read_configs=False)
    _LAST_FILE_VIEW[:] = [(path, source), view, made]
    return view


def made_for(path: str, source: str) -> Optional[bytes]:
    """The summary and scale summary (`summary.summarize`, `scale.summarize`; marshalled) that
    the per-file pass computed for this text of `path`, if it did; the engine hands them to the
    cross-file pass (`FileResult.summaries`)."""
    if _LAST_FILE_VIEW and _LAST_FILE_VIEW[0] == (path, source):
        return _LAST_FILE_VIEW[2]
    return None


def project_view(project: Any) -> ScaleView:
    """The view of a project model (the cross-file pass), built once per project."""
    view = getattr(project, "_scale_view", None)
    if view is None:
        source = getattr(project, "scale_source", None)
        if source is None:
            from ...core.safe_read import read_text
            from .scale import summarize as scale_summary

            def source(path: str) -> Optional[Summary]:
                try:
                    return scale_summary(read_text(path))
                except OSError:
                    return None

        anchors = getattr(project, "scale_anchors", None)  # set by the engine; None: not known, read all
        view = project._scale_view = ScaleView(project, source, read_configs=True, active=anchors is None or bool(anchors))
    return view


def file_diagnostics(rule: Any, source: str, path: str, findings: Callable[[ScaleView], Iterator[Finding]]) -> Iterator[Any]:
    """A wrapper rule's per-file findings: those in the file itself."""
    view = file_view(source, path)
    if view.summary(path) is None:
        return
    for f in findings(view):
        if f.place[0] == path and not f.config_file:
            yield to_diagnostic(rule, f)


def project_diagnostics(rule: Any, project: Any, findings: Callable[[ScaleView], Iterator[Finding]]) -> Iterator[Any]:
    view = project_view(project)
    for f in findings(view):
        yield to_diagnostic(rule, f)


def clip_owner_of(view: ScaleView, path: str, clip: Dict[str, Any]) -> Optional[str]:
    """The module whose parameters a torch clip gets: `model` in `clip(model.parameters(), ...)`,
    also through `params = model.parameters()` / `list(model.parameters())` bound before."""
    if clip.get("o"):
        return clip["o"]
    name = clip.get("pn")
    if not name:
        return None
    owners: List[str] = []
    for _, _, ref in view.values(path, clip["f"], name):
        spelled = ref.get("c", "")
        if spelled.endswith(".parameters"):
            owners.append(spelled[: -len(".parameters")])
        elif spelled in ("list", "filter", "tuple") and ref.get("a"):
            inner = ref["a"][-1]
            if isinstance(inner, dict) and inner.get("c", "").endswith(".parameters"):
                owners.append(inner["c"][: -len(".parameters")])
    return owners[0] if len(set(owners)) == 1 else None


def engine_calls(view: ScaleView, path: str, at: Dict[str, Any], names: Sequence[str] = ()) -> Tuple[bool, bool]:
    """Whether a DeepSpeed engine's own `backward(loss)` / `step()` runs in the function of the
    event `at`: (on a pass through `at`, only on branches exclusive with it). The receiver is
    one of `names` or may hold a DeepSpeed engine where it is called; `engine.scale(loss).backward()`
    counts too."""
    s = view.summary(path)
    on = off = False
    for e in s["events"] if s else ():
        if e["f"] != at["f"] or e is at or e["e"] not in ("back", "step"):
            continue
        if e["e"] == "back":
            recv = e.get("recv") if e.get("n", 0) >= 1 else e.get("scaled")
        else:
            recv = e.get("recv") if e.get("n", 0) == 0 else None
        if not recv or not _may_be_engine(view, path, e, recv, names):
            continue
        if exclusive(e.get("p"), at.get("p")):
            off = True
        else:
            on = True
    return on, off


def scaler_pass(view: ScaleView, path: str, at: Dict[str, Any], names: Sequence[str] = ()) -> bool:
    """A torch GradScaler's backward (`scaler.scale(loss).backward()`) runs before the event
    `at` in its function, on a pass through it: torch AMP's step, which a DeepSpeed engine
    (scaling the loss in its own `backward`) does not take."""
    s = view.summary(path)
    for e in s["events"] if s else ():
        if e["f"] != at["f"] or e["e"] != "back" or not e.get("scaled") or (e["r"], e["c"]) >= (at["r"], at["c"]):
            continue
        if exclusive(e.get("p"), at.get("p")) or _may_be_engine(view, path, e, e["scaled"], names):
            continue
        return True
    return False


def run_time_engine(view: ScaleView, path: str, at: Dict[str, Any], name: str, engine: Wrapper) -> bool:
    """Whether `name` holds the DeepSpeed `engine` only as a run-time choice: the engine is made
    on a branch taken only with DeepSpeed (`if config.deepspeed.enable:`), or `name` may hold
    another wrapper there too (a setup function returning the engine or the DDP model)."""
    if engine.event.get("dso"):
        return True
    return any(not w.deepspeed_engine for w in view.wrappers_at(path, at["f"], name, (at["r"], at["c"])))


def _may_be_engine(view: ScaleView, path: str, e: Dict[str, Any], recv: str, names: Sequence[str]) -> bool:
    if recv in names:
        return True
    return any(w.deepspeed_engine for w in view.wrappers_at(path, e["f"], recv, (e["r"], e["c"])))


#: the names `amplint.model` exports these under
ScaleConfig = Config
ScaleFinding = Finding
lightning_precision_dtype = lightning_dtype
WrapperPolicy = Policy
exclusive_branches = exclusive
deepspeed_engine_calls = engine_calls
deepspeed_run_time_engine = run_time_engine
torch_scaler_pass = scaler_pass
scale_file_diagnostics = file_diagnostics
scale_project_diagnostics = project_diagnostics
scale_file_view = file_view
scale_project_view = project_view
