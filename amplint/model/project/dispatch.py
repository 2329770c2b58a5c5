"""The dispatch view of the project model: calls through registries and configs, followed.

Training code often builds its model by name: `MODELS.build(cfg)` (mmengine),
`META_ARCH_REGISTRY.get(name)(cfg)` (detectron2, BasicSR), `MODELS[args.arch](...)`
(a dict of name -> class), `getattr(models, cfg.name)(...)`, a `register_model("unet")`
decorator filling a dict, or an attribute declared with a project base class
(`pipeline: VanillaPipeline`, `def module_wrapper(m) -> Model`) and set from a
config. `graph.Project` does not follow such values: which class a name picks
is decided at run time, and most facts (fp16 parameters, checkpoints) must not
be guessed. Where the consequence is certain whatever is picked -- a BCE loss
raises under CUDA autocast on every call -- any one class the call can reach is
enough, so this view follows all of them:

* a registry: a module-level name bound to a dict (`{}`, `dict()`, a dict of
  classes) or to a `...Registry(...)`, or an external name classes are registered
  to (`from mmdet.registry import MODELS`);
* what is registered to it: classes and functions decorated `@MODELS.register_module()`
  / `@REG.register()` / `@register_model("x")` (a project function whose body stores
  into a registry, `REG[name] = cls`, or calls `REG.register(cls)`, also when the
  decorator is made by a factory given the registry: `register_loss =
  make_register(LOSSES)`), registration calls at module level, the values of a dict;
* a call through it: `R.build(...)` / `R.create(...)` (an instance of any of them),
  `R.get(name)` / `R[name]` (any of them), `build_from_cfg(cfg, R)`;
* `getattr(module, name)`: any class or function the project module exports;
* a declared project class (an attribute's or a return's annotation: `pipeline: Pipeline`,
  `-> Model`): an instance of it or of any project class deriving from it (a parameter's
  annotation is not read: its call sites say what it takes, and widening every annotated
  signature loads modules all over annotated code); a property: what its getter returns;
* `super().__init__(LOSSES)`: the base class's `__init__`; an inherited method read on an
  instance of a subclass sees `self` as that instance, and a base attribute set from an
  `__init__` parameter takes what that subclass's `super().__init__(...)` passes;
* the call sites of modules loaded after the parameters were settled (`reached` runs again
  while it loads modules).

It is a `Project` of its own -- own memos, own summaries, the registering files among
the files it starts from -- so the questions other rules ask the project model are
answered as before. Each class or function a dispatch produced is recorded with how
(`origin`), for the finding's related sites. Nothing here imports libcst or torch.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from .graph import Call, FuncKey, Project, Type, TypeSet

_EMPTY: TypeSet = frozenset()
#: a registry's methods that build an instance, and those that give what is registered
_BUILDS = frozenset(("build", "build_from_cfg", "build_module", "create", "instantiate"))
_GETS = frozenset(("get", "get_module", "lookup", "__getitem__"))
#: what a registry object is made of
_DICTS = frozenset(("dict", "OrderedDict", "defaultdict"))
_PROPERTIES = frozenset(("property", "cached_property", "functools.cached_property"))
#: a registry's methods for one kind of what it holds: `register_loss` / `get_loss_class`
_REGISTER_KIND = re.compile(r"register_([a-z][a-z0-9]*(?:_[a-z0-9]+)*?)")
_GET_KIND = re.compile(r"get_([a-z][a-z0-9]*(?:_[a-z0-9]+)*?)(?:_class|_cls)?")
#: how many times `reached` runs again at most while it loads modules (once was enough for every
#: shape met; each run costs as much as the first)
_ROUNDS = 1
#: how many project modules an `import_module` of a computed name under a package may give at most
_MAX_LOOKED_UP = 400
#: how a class or function was reached -- ("registry", the registry's name), ("getattr", the module
#: as spelled), ("declared", the declared class) -- and the file and row that say so (its
#: registration, its definition)
Origin = Tuple[str, str, str, int]


class DispatchView(Project):
    """`project` with calls through registries, `getattr` on project modules and declared
    classes followed (see the module docstring). Built by `dispatch_view`."""

    def __init__(self, project: Project, summaries: Dict[str, Dict[str, Any]]) -> None:
        #: type -> how a dispatch produced it (first seen)
        self.origins: Dict[Type, Origin] = {}
        self._base = project
        self._given_set = set(summaries)
        self._late_seen: Set[str] = set()
        self._late_index: Dict[str, List[Call]] = {}
        self._reached_at = len(summaries)
        #: (method path, qual, receiver path, class) -> receiver: `self` of the methods being read for a subclass
        self._contexts: Dict[Tuple[str, str, str, str], Tuple[str, str]] = {}
        self._context_memos: Dict[Any, Tuple[Dict[Any, Any], Dict[Any, Any]]] = {}
        super().__init__(
            project.root, summaries, files=sorted(project._index.files), load=project._load, registering=project.registering
        )

    def reached(self) -> Set[FuncKey]:
        """`Project.reached`, again while it loads modules (a few rounds): what a module loaded
        late binds (its call sites' arguments, its registrations) is then seen by the values
        asked before it came."""
        found = super().reached()
        for _ in range(_ROUNDS):
            loaded = len(self.summaries)
            if loaded == self._reached_at:
                break
            self._reached_at = loaded
            self._reached, self._reached_callers, self._witnesses = None, {}, {}
            for memo in (self._memos[True], self._resolveds[True]):
                memo.clear()
            self._context_memos.clear()
            self._casts.clear()
            found = super().reached()
        return found

    def module_path(self, module: str, importer: str, level: int = 0) -> Optional[str]:
        path = super().module_path(module, importer, level)
        if path is not None and path not in self._base.summaries:
            self._base.viewed.add(path)  # what the findings depend on, for the engine's record
        return path

    # ------------------------------------------------------------------ names and values

    def _symbol(self, path: str, name: str, _depth: int) -> TypeSet:
        found = super()._symbol(path, name, _depth)
        s = self.summaries.get(path)
        if s is None:
            return found
        module = s["functions"]["<module>"]
        refs = module["locals"].get(name) or ()
        if any(_is_registry(r) for r in refs):
            found = found | {("G", (path, name))}
        wide = module.get("wl", {}).get(name)
        if wide:
            found = found | self._values(path, "<module>", wide)
        return found

    def _head_uncast(self, path: str, func: str, head: str) -> TypeSet:
        for (p, qual, rp, rc) in self._contexts:
            if p == path and (func == qual or func.startswith(qual + ".")):
                info = self.function((p, qual))
                if info is not None and info["params"] and head == info["params"][0]:
                    return frozenset({("I", rp, rc, "", ())})
        found = super()._head_uncast(path, func, head)
        s = self.summaries[path]
        scope: Optional[str] = func
        while scope is not None and scope != "<module>":
            info = s["functions"].get(scope)
            if info is not None:
                wide = info.get("wl", {}).get(head)
                if wide:
                    found = found | self._values(path, scope, wide)
                if wide or head in info["params"] or head in info["locals"]:
                    break
            scope = scope.rsplit(".", 1)[0] if "." in scope else None
        return found

    def resolve_call(self, call: Call) -> TypeSet:
        found = super().resolve_call(call)
        attr = call.record.get("sp")
        info = self.function((call.path, call.func)) if attr else None
        if info is None or not info["cls"]:
            return found
        for p, c in self.mro(call.path, info["cls"])[1:]:  # `super().__init__(LOSSES)`: the next definition
            if f"{c}.{attr}" in self.summaries[p]["functions"]:
                return found | {("F", p, f"{c}.{attr}")}
        return found

    def _param_values(self, key: Tuple[str, str, str]) -> TypeSet:
        """Also what the call sites in modules loaded later pass (`super().__init__(LOSSES)` in a
        factory module a name led to): those were not there when parameters were settled."""
        found = super()._param_values(key)
        if not self._may_load:
            return found
        return found | self._memoized(("late", key, len(self.summaries)), lambda: self._late_arguments(key))

    def _late_arguments(self, key: Tuple[str, str, str]) -> TypeSet:
        path, func, param = key
        info = self.function((path, func))
        if info is None or param not in info["params"]:
            return _EMPTY
        params = list(info["params"])
        if info["cls"] and func.count(".") == 1 and params:
            params = params[1:]  # called on an instance: `self` is bound
        last = func.rsplit(".", 1)[-1]
        name = func.split(".", 1)[0] if last == "__init__" else last  # `Factory(...)` runs `Factory.__init__`
        out: Set[Type] = set()
        for call in self._late_calls(name) + (self._late_calls("super()." + last) if name != last else []):
            if (path, func) not in self.callees(call):
                continue
            ref = call.record["k"].get(param)
            if ref is None and param in params and params.index(param) < len(call.record["a"]):
                ref = call.record["a"][params.index(param)]
            if ref is not None:
                out |= self._value(call.path, call.func, ref)
        return frozenset(out)

    def _late_calls(self, name: str) -> List[Call]:
        """The calls of the loaded files the model did not start from, by the last name of their
        callee (`super().NAME` for `super().NAME(...)`), indexed as files load."""
        index = self._late_index
        for path in [p for p in self.summaries if p not in self._late_seen]:
            self._late_seen.add(path)
            if path in self._given_set:
                continue
            for qual, info in self.summaries[path]["functions"].items():
                for record in info["calls"]:
                    spelled = f"super().{record['sp']}" if "sp" in record else record["f"].rsplit(".", 1)[-1]
                    if spelled and (record["a"] or record["k"]):
                        index.setdefault(spelled, []).append(Call(path, qual, record))
        return index.get(name, [])

    def attribute(self, base: Type, attr: str) -> TypeSet:
        kind = base[0]
        if kind == "G":
            return self._registry_attribute(base[1], attr)
        found = super().attribute(base, attr)
        if kind == "X" and (attr in _BUILDS or attr in _GETS):
            found = found | self._registry_attribute(("X", base[1]), attr)  # `MODELS` from mmdet.registry
        if kind != "I":
            return found
        passed = self._passed_by_subclass(base[1], base[2], attr)
        if passed is not None:
            found = passed
        found = found | self._declared_attribute(base[1], base[2], attr)
        if not found and not self._binds(base[1], base[2], attr):
            found = self._mixin_attribute(base[1], base[2], attr)
        out: Set[Type] = set()
        for t in found:
            info = self.function((t[1], t[2])) if t[0] == "F" else None
            inherited = info is not None and info["cls"] and t[2].count(".") == 1 and (t[1], info["cls"]) != (base[1], base[2])
            bound = ("FS", t[1], t[2], base[1], base[2]) if inherited else t  # `LossesFactory().get`: `self` is one
            if info is not None and _PROPERTIES.intersection(info["decorators"]):
                out |= self.returns(bound)  # `self.model` read through a property
            out.add(bound)
        return frozenset(out)

    def _binds(self, path: str, cls: str, attr: str) -> bool:
        """Whether the class or a base of it binds, declares or defines `attr`."""
        for p, c in self.mro(path, cls):
            info = self.summaries[p]["classes"][c]
            if attr in info["attrs"] or attr in info.get("wa", {}) or attr in info.get("df", ()):
                return True
            if f"{c}.{attr}" in self.summaries[p]["functions"]:
                return True
        return False

    def _mixin_attribute(self, path: str, cls: str, attr: str) -> TypeSet:
        """`self.model` read in a mixin that never binds it (`TrainingLoopMixin._forward`): what
        the project classes deriving from it bind, an instance of which the method runs on."""
        out: Set[Type] = set()
        for p, c in self.subclasses(path, cls):
            if self._binds(p, c, attr):
                out |= self.attribute(("I", p, c, "", ()), attr)
        return frozenset(out)

    def callees(self, call: Call) -> List[FuncKey]:
        """Also the `__call__` a project base class defines for an instance whose own class
        defines `forward` (`BaseModel.__call__` computing the losses, then `super().__call__`):
        calling the instance runs it first."""
        out = super().callees(call)
        for t in self.resolve_call(call):
            if t[0] != "I":
                continue
            for p, c in self.mro(t[1], t[2]):
                key = (p, f"{c}.__call__")
                if key[1] in self.summaries[p]["functions"]:
                    if key not in out:
                        out.append(key)
                    break
        return out

    def _passed_by_subclass(self, path: str, cls: str, attr: str) -> Optional[TypeSet]:
        """`self.type_dict = type_dict` in a base class's `__init__`, read on an instance of a
        subclass whose `__init__` calls `super().__init__(LOSSES)`: what that call passes (None
        when the attribute is not bound that way): not every subclass's argument."""
        chain = self.mro(path, cls)
        for i, (p, c) in enumerate(chain):
            refs = self.summaries[p]["classes"][c]["attrs"].get(attr)
            if not refs:
                continue
            if i == 0:
                return None  # bound by the class itself
            out: Set[Type] = set()
            for func, ref in refs:
                info = self.function((p, func))
                name = ref.get("n") if ref else None
                if info is None or not func.endswith(".__init__") or name not in info["params"][1:]:
                    return None
                position = info["params"].index(name) - 1
                for q, d in chain[:i]:
                    init = self.function((q, f"{d}.__init__"))
                    for record in init["calls"] if init is not None else ():
                        call = Call(q, f"{d}.__init__", record)
                        if record.get("sp") == "__init__" and (p, func) in self.callees(call):
                            arg = record["k"].get(name) or (record["a"][position] if position < len(record["a"]) else None)
                            out |= self._value(q, f"{d}.__init__", arg)
            return frozenset(out) if out else None
        return None

    def runs(self, t: Type) -> Optional[FuncKey]:
        if t[0] == "FS":
            return (t[1], t[2])
        return super().runs(t)

    def _declared_attribute(self, path: str, cls: str, attr: str) -> TypeSet:
        """What the class and its bases declare or bind for `attr` beyond plain values:
        `pipeline: VanillaPipeline`, `self.model = MODELS[name](...)`."""
        out: Set[Type] = set()
        for p, c in self.mro(path, cls):
            for func, ref in self.summaries[p]["classes"][c].get("wa", {}).get(attr, ()):
                out |= self._value(p, func, ref)
        return frozenset(out)

    def returns(self, callee: Type) -> TypeSet:
        kind = callee[0]
        if kind == "GB":  # `MODELS.build(cfg)`: an instance of what is registered
            out: Set[Type] = set()
            for t, origin in self.registered(callee[1]):
                for made in super().returns(t):
                    out.add(made)
                    self.origins.setdefault(made, origin)
            return frozenset(out)
        if kind == "GG":  # `MODELS.get(name)`: what is registered
            return self._picked(callee[1])
        if kind == "FS":  # an inherited method on an instance of a subclass: `self` is that instance
            return self._in_context(callee, lambda: self.returns(("F", callee[1], callee[2])))
        found = super().returns(callee)
        if kind == "F":
            info = self.function((callee[1], callee[2]))
            if info is not None and info.get("rt"):
                found = found | self._declared(callee[1], info["rt"])
        return found

    def _value(self, path: str, func: str, ref: Optional[Dict[str, Any]]) -> TypeSet:
        if ref is None:
            return _EMPTY
        if "i" in ref or "cv" in ref or "t" in ref or "at" in ref or "el" in ref:
            return self._memoized(("wide", path, func, id(ref)), lambda: self._wide_value(path, func, ref))
        if "c" in ref and ("mn" in ref or "mp" in ref):
            return self._memoized(("modules", path, func, id(ref)), lambda: self._imported_modules(path, func, ref))
        found = super()._value(path, func, ref)
        if "c" in ref and (ref["c"] == "getattr" or "build" in ref["c"].rsplit(".", 1)[-1]):
            found = found | self._memoized(("call", path, func, id(ref)), lambda: self._dispatch_call(path, func, ref))
        return found

    def _in_context(self, bound: Type, compute: Any) -> TypeSet:
        """`compute()` with `self` of method `bound[1:3]` an instance of class `bound[3:5]`, on
        memos of its own (what a name is may differ there)."""
        key = tuple(bound[1:])
        if key in self._contexts:
            return _EMPTY  # a method returning what it is called on, again
        settled = self._param_args  # the memos hold while the parameters settled so far do
        memos = self._context_memos.setdefault((key, self._may_load, id(settled)), ({}, {}, settled))[:2]
        saved = self._memos[self._may_load], self._resolveds[self._may_load]
        self._contexts[key] = (bound[3], bound[4])
        self._memos[self._may_load], self._resolveds[self._may_load] = memos
        try:
            return compute()
        finally:
            self._memos[self._may_load], self._resolveds[self._may_load] = saved
            del self._contexts[key]

    def _memoized(self, key: Any, compute: Any) -> TypeSet:
        memo = self._memos[self._may_load]
        found = memo.get(key)
        if found is None:
            if key in self._active:
                return _EMPTY
            self._active.add(key)
            try:
                found = memo[key] = compute()
            finally:
                self._active.discard(key)
        return found

    def _wide_value(self, path: str, func: str, ref: Dict[str, Any]) -> TypeSet:
        if "t" in ref:
            return self._declared(path, ref["t"])
        if "el" in ref:  # `for loss in self.losses:`: what was appended to it
            return self._elements(path, func, ref["el"])
        if "at" in ref:  # `LossesFactory().get`: the attribute of what the value is
            return frozenset(a for t in self._value(path, func, ref["on"]) for a in self.attribute(t, ref["at"]))
        if "i" in ref:  # `MODELS[name]`: what is registered
            out: Set[Type] = set()
            for t in self.name_types(path, func, ref["i"]):
                for key in _registry_keys((t,)):
                    out |= self._picked(key)
            return frozenset(out)
        # `MODELS.get(name)(cfg)`: what calling the callee gives
        out = set()
        for t in self._value(path, func, ref["cv"]):
            made = self.returns(t)
            origin = self.origins.get(t)
            for m in made if origin is not None else ():
                self.origins.setdefault(m, origin)  # what a registered function built
            out |= made
        return frozenset(out)

    def _elements(self, path: str, func: str, name: str) -> TypeSet:
        """What was appended to the container `name` spelled in function `func` of `path`: to a
        `self.` attribute by its class or a base (`self.losses.append(MMFLoss(cfg))` in
        `__init__`), to a local by the function (or one it is nested in)."""
        head, _, attr = name.rpartition(".")
        out: Set[Type] = set()
        if not head:
            s = self.summaries[path]
            scope: Optional[str] = func
            while scope is not None:
                info = s["functions"].get(scope)
                for r in (info or {}).get("we", {}).get(name, ()):
                    out |= self._value(path, scope, r)
                scope = scope.rsplit(".", 1)[0] if "." in scope and scope != "<module>" else ("<module>" if scope != "<module>" else None)
            return frozenset(out)
        for base in self.name_types(path, func, head):
            if base[0] != "I":
                continue
            for p, c in self.mro(base[1], base[2]):
                for where, r in self.summaries[p]["classes"][c].get("we", {}).get(attr, ()):
                    out |= self._value(p, where, r)
        return frozenset(out)

    def _picked(self, key: Any) -> TypeSet:
        """What a lookup in the registry `key` may give (`MODELS.get(name)`, `MODELS[name]`)."""
        out: Set[Type] = set()
        for t, origin in self.registered(key):
            out.add(t)
            self.origins.setdefault(t, origin)
        return frozenset(out)

    def _dispatch_call(self, path: str, func: str, ref: Dict[str, Any]) -> TypeSet:
        """`getattr(models, name)`: what the project module exports; `build_from_cfg(cfg, MODELS)`
        (a builder that is not a project function, given a registry): an instance of what is
        registered."""
        if ref["c"] == "getattr":
            if self.name_types(path, func, "getattr") or not ref["a"]:
                return _EMPTY
            out: Set[Type] = set()
            for t in self._value(path, func, ref["a"][0]):
                if t[0] == "M":
                    spelled = ref["a"][0].get("n", "") if ref["a"][0] else ""
                    for member in self.exported(t[1]):
                        out.add(member)
                        self.origins.setdefault(member, ("getattr", spelled, member[1], self._line(member)))
            return frozenset(out)
        if any(t[0] == "F" for t in self.name_types(path, func, ref["c"])):
            return _EMPTY  # a project builder: its own body says what it builds
        out = set()
        for arg in [*ref["a"], *ref["k"].values()]:
            for t in self._value(path, func, arg) if arg else ():
                for key in _registry_keys((t,)):
                    out |= self.returns(("GB", key))
        return frozenset(out)

    def _imported_modules(self, path: str, func: str, ref: Dict[str, Any]) -> TypeSet:
        """`importlib.import_module(name)`: the project module a literal name names, or every
        project module of the package a computed name starts in (`".".join(["pkg.models",
        family, name])`, `f"pkg.models.{name}"`: the modules under `pkg/models/`, those whose
        name starts with a literal tail too); nothing for a name with no package spelled."""
        if not any(t == ("X", "importlib.import_module") for t in self.name_types(path, func, ref["c"])):
            return _EMPTY
        if "mn" in ref:
            target = self.module_path(ref["mn"], path) if ref["mn"] and not ref["mn"].startswith(".") else None
            return frozenset({("M", target)}) if target is not None else _EMPTY
        package, _, start = ref["mp"].rpartition(".")
        init = self._index.resolve(path, 0, package) if package and not package.startswith(".") else None
        if init is None or os.path.basename(init) != "__init__.py":
            return _EMPTY
        folder = os.path.dirname(init)
        out: Set[Type] = set()
        for f in sorted(self._index.files):
            rel = os.path.relpath(f, folder)
            if f == init or rel.startswith("..") or not rel.startswith(start) or len(out) >= _MAX_LOOKED_UP:
                continue
            if f in self.summaries or (self._may_load and self.load_file(f)):
                if f not in self._base.summaries:
                    self._base.viewed.add(f)
                out.add(("M", f))
        return frozenset(out)

    def exported(self, path: str, _depth: int = 0) -> List[Type]:
        """The project classes and functions a module binds at top level (its `__all__` when it
        has a literal one): what `getattr(module, name)` may give."""
        s = self.summaries.get(path)
        if s is None or _depth > 4:
            return []
        names: Iterable[str] = s["all"] if "all" in s else [
            *s["classes"], *(q for q in s["functions"] if "." not in q and q != "<module>"), *s["imports"]
        ]
        out: List[Type] = []
        for name in sorted(set(names)):
            if name.startswith("_") and "all" not in s:
                continue
            for t in sorted(self.symbol(path, name), key=repr):
                if t[0] in ("C", "F") and t not in out:
                    out.append(t)
        if "all" not in s:
            for level, module in s.get("stars", ()):
                target = self.module_path(module, path, level) if (module or level) else None
                if target is not None:
                    out.extend(t for t in self.exported(target, _depth + 1) if t not in out)
        return out

    def _declared(self, path: str, names: Iterable[str]) -> TypeSet:
        """Instances of the project classes an annotation names, and of the project classes
        deriving from them (the annotation says any of them)."""
        out: Set[Type] = set()
        for name in names:
            for t in self.name_types(path, "<module>", name):
                if t[0] != "C":
                    continue
                for p, c in [(t[1], t[2]), *self.subclasses(t[1], t[2])]:
                    made = ("I", p, c, "", ())
                    out.add(made)
                    self.origins.setdefault(made, ("declared", t[2], p, self.summaries[p]["classes"][c]["line"]))
        return frozenset(out)

    def subclasses(self, path: str, cls: str) -> List[Tuple[str, str]]:
        """The loaded project classes deriving from `cls` (not itself), in a stable order."""
        memo = self._memos[self._may_load]
        key = ("subclasses", path, cls, len(self.summaries))
        found = memo.get(key)
        if found is None:
            out = []
            for p in sorted(self.summaries):
                for c in self.summaries[p]["classes"]:
                    if (p, c) != (path, cls) and (path, cls) in self.mro(p, c):
                        out.append((p, c))
            found = memo[key] = tuple(out)  # type: ignore[assignment]
        return list(found)

    # ------------------------------------------------------------------ registries

    def _registry_attribute(self, key: Any, attr: str) -> TypeSet:
        if attr in _BUILDS:
            return frozenset({("GB", key)})
        if attr in _GETS:
            return frozenset({("GG", key)})
        kind = _kind(attr, _GET_KIND) if key[0] != "X" and len(key) == 2 else None
        if kind:  # `registry.get_loss_class(name)`: what `@registry.register_loss(...)` registered
            return frozenset({("GG", (*key, kind))})
        return _EMPTY

    def registered(self, key: Any) -> List[Tuple[Type, Origin]]:
        """What is registered to the registry `key` ((path, name) of a project registry,
        ("X", qualname) of an external one): project classes and functions, each with where."""
        found = [entry for entry in self._registrations().get(key, ())]
        if key[0] != "X" and len(key) == 2:  # the values of a dict literal: `MODELS = {"unet": UNet, ...}`
            path, name = key
            for ref in self.summaries[path]["functions"]["<module>"]["locals"].get(name, ()):
                for value in (ref.get("d") or {}).values() if ref else ():
                    for t in sorted(self._value(path, "<module>", value), key=repr):
                        if t[0] in ("C", "F") and all(t != e[0] for e in found):
                            found.append((t, ("registry", name, path, self._line(t))))
        return found

    def _line(self, t: Type) -> int:
        s = self.summaries.get(t[1])
        if s is None:
            return 1
        if t[0] == "C":
            return s["classes"][t[2]]["line"]
        info = s["functions"].get(t[2])
        return info["line"] if info is not None else 1

    def _registrations(self) -> Dict[Any, List[Tuple[Type, Origin]]]:
        """Every registration in the loaded files: registry key -> [(what, origin)], read once
        per loading mode (and again when the arguments call sites pass change)."""
        memo = self._memos[self._may_load]
        found = memo.get(("registrations",))
        if found is not None:
            return found  # type: ignore[return-value]
        memo[("registrations",)] = {}  # type: ignore[assignment]  # asked while it is read: none yet
        out: Dict[Any, List[Tuple[Type, Origin]]] = {}

        def add(keys: Iterable[Any], t: Type, path: str, row: int) -> None:
            for key in sorted(keys, key=repr):
                entries = out.setdefault(key, [])
                if all(e[0] != t for e in entries):
                    entries.append((t, ("registry", _key_name(key), path, row)))

        for path in sorted(self.summaries):
            s = self.summaries[path]
            for cls, info in s["classes"].items():
                for spelled, row in info.get("dec", ()):
                    if spelled:
                        add(self._decorator_registries(path, spelled), ("C", path, cls), path, row)
            for qual, info in s["functions"].items():
                if "." not in qual and qual != "<module>":
                    for spelled in info["decorators"]:
                        if spelled:
                            add(self._decorator_registries(path, spelled), ("F", path, qual), path, info["line"])
            module = s["functions"]["<module>"]
            for record in module["calls"]:
                self._registration_call(path, record, add)
            for base, stored, row in module.get("st", ()):
                keys = _registry_keys(self.name_types(path, "<module>", base))
                for t in self.name_types(path, "<module>", stored):
                    if t[0] in ("C", "F"):
                        add(keys, t, path, row)
        memo[("registrations",)] = out  # type: ignore[assignment]
        return out

    def _registration_call(self, path: str, record: Dict[str, Any], add: Any) -> None:
        """`MODELS.register_module(module=Net)`, `REG.register(Net)`, `register_loss(name=...)(Net)`."""
        f = record["f"]
        if f:
            head, _, last = f.rpartition(".")
            value = record["a"][0] if record["a"] else record["k"].get("module") or record["k"].get("obj")
            if not head or "register" not in last or not value:
                return
            keys = _registry_keys(self.name_types(path, "<module>", head))
        else:
            inner = record.get("fv") or {}
            value = record["a"][0] if record["a"] else None
            if "register" not in inner.get("c", "") or not value:
                return
            keys = self._decorator_registries(path, inner["c"])
        if keys:
            for t in self._value(path, "<module>", value):
                if t[0] in ("C", "F"):
                    add(keys, t, path, record["r"])

    def _decorator_registries(self, path: str, spelled: str) -> Set[Any]:
        """The registries a decorator spelled `spelled` at the top of `path` registers to:
        `MODELS.register_module` -> MODELS; `register_model` (a project function, or what a
        project function returned) -> the registries its body (or a function nested in it)
        stores into or registers to."""
        head, _, last = spelled.rpartition(".")
        if head and "register" in last.lower():
            keys = _registry_keys(self.name_types(path, "<module>", head))
            kind = _kind(last, _REGISTER_KIND)
            if keys and kind:  # `registry.register_loss("bce")`: also to the registry's losses alone
                keys = keys | {(*k, kind) for k in keys if k[0] != "X"}
            if keys:
                return keys
        made = self._made_for(path, spelled)
        if made:
            return made
        out: Set[Any] = set()
        for t in self.name_types(path, "<module>", spelled):
            if t[0] == "F":
                out |= self._written(t[1], t[2])
        return out

    def _made_for(self, path: str, spelled: str, _depth: int = 0) -> Set[Any]:
        """The registries a decorator was made for, read off its binding: `register_loss =
        create_register_decorator(registry=LOSSES)` -> LOSSES (what the factory's body stores
        into is every registry any call gives it)."""
        s = self.summaries.get(path)
        if s is None or "." in spelled or _depth > 4:
            return set()
        imported = s["imports"].get(spelled)
        if imported is not None:
            level, module, attr = imported
            owner = self.module_path(module, path, level) if attr and (module or level) else None
            return self._made_for(owner, attr, _depth + 1) if owner is not None else set()
        out: Set[Any] = set()
        for ref in s["functions"]["<module>"]["locals"].get(spelled, ()):
            for arg in [*ref.get("a", ()), *ref.get("k", {}).values()] if ref and "c" in ref else ():
                if arg:
                    out |= _registry_keys(t for t in self._value(path, "<module>", arg) if t[0] == "G")
        return out

    def _written(self, path: str, qual: str) -> Set[Any]:
        """The registries function `qual` of `path` and the functions nested in it store into
        (`REG[name] = cls`) or register to (`REG.register(cls)`)."""
        out: Set[Any] = set()
        prefix = f"{qual}."
        for q, info in self.summaries[path]["functions"].items():
            if q != qual and not q.startswith(prefix):
                continue
            for base, _stored, _row in info.get("st", ()):
                out |= _registry_keys(self.name_types(path, q, base))
            for record in info["calls"]:
                head, _, last = record["f"].rpartition(".")
                if head and last.startswith("register"):
                    out |= _registry_keys(self.name_types(path, q, head))
        return out

    # ------------------------------------------------------------------ reporting

    def origin(self, key: FuncKey) -> Optional[Tuple[Origin, str]]:
        """How a dispatch reached function `key` (a method of a class a dispatch produced, or of
        a base class of one; a registered function), with the name of that class or function."""
        info = self.function(key)
        if info is None:
            return None
        owner = info["cls"]
        found = sorted(self.origins.items(), key=lambda kv: repr(kv[0]))
        for t, origin in found:  # the class itself first, then one deriving from it
            if (t[0] == "F" and (t[1], t[2]) == key) or (owner and t[0] in ("I", "C") and (t[1], t[2]) == (key[0], owner)):
                return origin, t[2]
        for t, origin in found:
            if owner and t[0] in ("I", "C") and (key[0], owner) in self.mro(t[1], t[2]):
                return origin, t[2]
        return None

    def entering_call(self, region: Any, key: FuncKey) -> Optional[Any]:
        """The call inside `region` that runs function `key`."""
        for call in self.callers(key):
            if self.region_of(call) == region:
                return call
        return None

    def call_from(self, caller: FuncKey, callee: FuncKey) -> Optional[Any]:
        """A call in function `caller` that runs function `callee`."""
        for call in self.callers(callee):
            if (call.path, call.func) == caller:
                return call
        return None


def dispatch_view(project: Project) -> Optional[DispatchView]:
    """The dispatch view of `project`, starting from its files and the files registering
    something (`Project.registering`); None when none of the files the project model has read
    opens an autocast region that is not disabled, nor sets a framework's precision (nothing
    could then run under autocast through a dispatch: the registering files are not read)."""
    if not any(_may_enter(project, path, s) for path, s in list(project.summaries.items())):
        return None  # only `autocast(enabled=False)` shields, or no region at all
    summaries = {path: project.summaries[path] for path in project._given}
    for path in project.registering:
        if path not in summaries:
            s = project.summaries.get(path)
            if s is None and project._load is not None:
                s = project._load(path)
            if s is not None:
                summaries[path] = s
                if path not in project.summaries:
                    project.viewed.add(path)
    return DispatchView(project, dict(sorted(summaries.items())))


def _may_enter(project: Project, path: str, s: Dict[str, Any]) -> bool:
    """Whether a file may run something under autocast: a framework's precision setting, an
    autocast region that is not disabled, or a `with` of a project context manager that the
    project model resolves to a held autocast (`with self.amp_autocast():`)."""
    if s["frameworks"] or any("via" not in r and r["enabled"] is not False for r in s["regions"]):
        return True
    if path not in project.summaries or not any("via" in r for r in s["regions"]):
        return False
    for qual, info in s["functions"].items():
        for record in info["calls"]:
            if record["g"] >= 0 and "via" in s["regions"][record["g"]]:
                region = project.region_of(Call(path, qual, record))
                if region is not None and region.enabled is not False:
                    return True
    return False


def _is_registry(ref: Optional[Dict[str, Any]]) -> bool:
    """A value a registry is made of: a dict (`{}`, `dict()`, a dict of classes) or a
    `...Registry(...)` (mmengine, fvcore, a project's own)."""
    if not ref:
        return False
    if "d" in ref:
        return True
    last = ref.get("c", "").rsplit(".", 1)[-1]
    return last in _DICTS or last.endswith("Registry")


def _registry_keys(types: Iterable[Type]) -> Set[Any]:
    """The registries among value types: project registries, and external names (a registry
    of a library the project registers to, `mmdet.registry.MODELS`)."""
    out: Set[Any] = set()
    for t in types:
        if t[0] == "G":
            out.add(t[1])
        elif t[0] == "X":
            out.add(("X", t[1]))
    return out


def _kind(attr: str, pattern: "re.Pattern[str]") -> Optional[str]:
    """The kind a registry's own method names (`register_loss`, `get_loss_class` -> "loss"):
    one registry object holding a mapping per kind (MMF's `registry`); None for a method
    naming none (`register`, `register_module`, `get`)."""
    found = pattern.fullmatch(attr)
    kind = found.group(1) if found else None
    return None if kind in (None, "module", "modules") else kind


def _key_name(key: Any) -> str:
    return key[1].rsplit(".", 1)[-1] if key[0] == "X" else key[1]

