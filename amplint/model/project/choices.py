"""Run-time dtype choices and optimizer builders across files (AMP201's project half).

The per-file model counts a dtype picked at run time among literals the file
spells (`literal_dtypes.dtype_choices`). Training scripts often get that choice
from a project helper in another file: `weight_dtype, save_dtype =
train_util.prepare_dtype(args)`, whose body picks `torch.float16`,
`torch.bfloat16` or `torch.float32` from `args.mixed_precision`; and they build
the optimizer through a helper too (`train_util.get_optimizer(args,
trainable_params)`, which constructs the class the arguments name on the list it
is given). This module answers, over summaries only:

* `project_dtype_choices`: the dtypes a name may hold, by literal candidates, followed
  through plain assignments, into a project function's returns (a single value,
  or element i of the tuples it returns when the name unpacks it). Precision
  first: every binding on the way must be a dtype literal (or `None`), a name so
  bound, or such a call; a parameter, an attribute, a config read or a call of
  anything else makes the answer unknown (None), never a guess;
* `optimizer_builds`: the optimizer constructions a function makes, directly
  (`torch.optim.AdamW(params)`) or through a project function that constructs a
  torch optimizer class (among the candidates it may pick) on one of its
  parameters, with the modules whose parameters the call hands over
  (`trained.py`'s parameter flows).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Set, Tuple

from .. import torchapi

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Call, Project

_MAX_DEPTH = 6
_DTYPES = ("fp16", "bf16", "fp32")
#: calls that pass the parameters of their arguments on unchanged
_PASSING = frozenset(("list", "tuple", "filter", "chain", "itertools.chain", "set"))

Choice = Tuple[FrozenSet[str], Tuple[Tuple[str, int], ...]]  # (dtypes, the helpers' sites in other files)


def project_dtype_choices(project: "Project", path: str, func: str, name: str, _depth: int = 0) -> Optional[Choice]:
    """The dtypes ('fp16' | 'bf16' | 'fp32') the plain name `name` read in function `func` of
    `path` may hold, with the sites (path, row of the `def`) of the functions in other files
    that pick them; None when a binding is not a dtype choice (or there is none)."""
    return _lookup(project, path, func, name, _depth)[1]


def _lookup(project: "Project", path: str, func: str, name: str, depth: int) -> Tuple[bool, Optional[Choice]]:
    """(whether a function scope or the module binds `name`, its choices)."""
    if depth > _MAX_DEPTH:
        return True, None
    scope: Optional[str] = func
    while scope is not None:
        info = project.function((path, scope))
        if info is not None:
            if scope != "<module>" and name in info["params"]:
                return True, None  # handed in by a caller: not followed
            refs = info["locals"].get(name, [])
            unpacked = info.get("ue", {}).get(name, [])
            if name in info.get("wl", {}):
                return True, None  # `d = DTYPES[args.precision]`-like reads this model does not follow
            if refs or unpacked:
                return True, _bindings(project, path, scope, refs, unpacked, depth)
        scope = (scope.rsplit(".", 1)[0] if "." in scope else "<module>") if scope != "<module>" else None
    return False, None


def _bindings(project: "Project", path: str, func: str, refs: List[Dict[str, Any]], unpacked: List[List[Any]], depth: int) -> Optional[Choice]:
    dtypes: Set[str] = set()
    sites: List[Tuple[str, int]] = []
    for ref in refs:
        found = _ref_choices(project, path, func, ref, depth)
        if found is None:
            return None
        dtypes |= found[0]
        sites.extend(found[1])
    for index, call in unpacked:
        found = _call_choices(project, path, func, call, index, depth)
        if found is None:
            return None
        dtypes |= found[0]
        sites.extend(found[1])
    return frozenset(dtypes), tuple(dict.fromkeys(sites))


def _ref_choices(project: "Project", path: str, func: str, ref: Optional[Dict[str, Any]], depth: int) -> Optional[Choice]:
    """One bound value: a dtype literal, `None`, a name bound so, a call of a project function
    returning such values."""
    if ref is None or "m" in ref:
        return None
    if "n" in ref:
        spelled = ref["n"]
        if spelled == "None":
            return frozenset(), ()
        if "." not in spelled:
            bound, local = _lookup(project, path, func, spelled, depth + 1)
            if bound:
                return local
        types = project.name_types(path, func, spelled)
        dtypes = {torchapi.dtype_of_qualname(t[1]) if t[0] == "X" else None for t in types}
        if not types or not dtypes <= set(_DTYPES):
            return None
        return frozenset(d for d in dtypes if d), ()
    if "c" in ref and "e0" not in ref:
        return _call_choices(project, path, func, ref, None, depth)
    return None


def _call_choices(project: "Project", path: str, func: str, call: Dict[str, Any], index: Optional[int], depth: int) -> Optional[Choice]:
    """What calling a project function returns (element `index` of its tuples, when given)."""
    callees = [t for t in project.name_types(path, func, call["c"]) if t[0] == "F"]
    if len(callees) != 1:
        return None
    _, cpath, cqual = callees[0]
    info = project.function((cpath, cqual))
    if info is None or info.get("ro"):
        return None
    if index is None:
        values = list(info["returns"])
        if not values or info.get("tr"):
            return None
    else:
        if info["returns"] or not info.get("tr") or any(len(t) <= index for t in info["tr"]):
            return None  # a return of another shape: element `index` is not certain
        values = [t[index] for t in info["tr"]]
    dtypes: Set[str] = set()
    sites: List[Tuple[str, int]] = []
    for value in values:
        found = _ref_choices(project, cpath, cqual, value, depth + 1)
        if found is None:
            return None
        dtypes |= found[0]
        sites.extend(found[1])
    if not dtypes:
        return None
    if cpath != path:
        sites.insert(0, (cpath, info["line"]))
    return frozenset(dtypes), tuple(dict.fromkeys(sites))


# ------------------------------------------------------------------ optimizers


@dataclass(frozen=True)
class Build:
    """An optimizer construction of a function: the call, the optimizer's class (or the helper
    that picks it), the modules whose parameters it gets, and the helper's site when the
    class is constructed in another function."""

    call: "Call"
    optimizer: str  # the torch class's qualified name (one candidate, for a helper that picks it)
    modules: FrozenSet[str]
    helper: Optional[Tuple[str, int]]


def optimizer_builds(project: "Project", path: str, func: str) -> List[Build]:
    from .graph import Call

    info = project.function((path, func))
    if info is None:
        return []
    out: List[Build] = []
    for record in info["calls"]:
        if not record["f"] or (not record["a"] and not record["k"]):
            continue
        call = Call(path, func, record)
        q = project.optimizer_class(call)
        if q is not None:
            params = record["a"][0] if record["a"] else record["k"].get("params")
            modules = _modules(info, params)
            if modules:
                out.append(Build(call, q, modules, None))
            continue
        for t in project.name_types(path, func, record["f"]):
            if t[0] != "F":
                continue
            built = _builder(project, (t[1], t[2]))
            if built is None:
                continue
            position, keyword, q, whole = built
            callee = project.function((t[1], t[2]))
            offset = 1 if callee and callee["cls"] and t[2].count(".") == 1 and "." in record["f"] else 0
            params = record["k"].get(keyword)
            if params is None and position is not None and 0 <= position - offset < len(record["a"]):
                params = record["a"][position - offset]
            if whole:  # `setup_optimizer(unet, args)`: the helper takes the module and builds on its `.parameters()`
                modules = frozenset({params["n"]}) if params and "n" in params and "m" not in params else frozenset()
            else:
                modules = _modules(info, params)
            if modules:
                out.append(Build(call, q, modules, (t[1], callee["line"] if callee else 0)))
            break
    return out


def _builder(project: "Project", key: Tuple[str, str]) -> Optional[Tuple[Optional[int], str, str, bool]]:
    """(position, name, a torch optimizer class it may construct, whether the parameter is a module)
    of the parameter on which function `key` constructs a torch optimizer (a class among the
    candidates it may pick: `optimizer_class = torch.optim.AdamW` in one branch): the parameter
    itself (`klass(params, lr=lr)`), or a module parameter whose own `.parameters()` it is given
    (`def setup_optimizer(unet, args): return AdamW(unet.parameters(), ...)`, the parameter never
    rebound in the helper); None when it constructs none on a parameter."""
    from .graph import Call

    memo = project.__dict__.setdefault("_optimizer_builders", {})
    if key in memo:
        return memo[key]
    memo[key] = None
    info = project.function(key)
    if info is None or key[1] == "<module>":
        return None
    params = info["params"]
    for record in info["calls"]:
        if not record["f"]:
            continue
        first = record["a"][0] if record["a"] else record["k"].get("params")
        if not first:
            continue
        whole = False
        if "n" not in first or first["n"] not in params:
            owner, _, method = first.get("c", "").rpartition(".")
            if method != "parameters" or owner not in params or "m" in first or first["a"] or first["k"] or owner in info["locals"]:
                continue
            first, whole = {"n": owner}, True
        classes = set()
        q = project.optimizer_class(Call(key[0], key[1], record))
        if q is not None:
            classes.add(q)
        elif "." not in record["f"]:  # `optimizer_class(trainable_params, lr=lr)`: a class picked at run time
            classes = {t[1] for t in project.name_types(key[0], key[1], record["f"]) if t[0] == "X" and _torch_optimizer(t[1])}
        if classes:
            name = first["n"]
            memo[key] = (params.index(name), name, min(classes), whole)
            break
    return memo[key]


def _torch_optimizer(q: str) -> bool:
    parts = q.split(".")
    return (
        len(parts) >= 3 and parts[:2] == ["torch", "optim"] and parts[-1][:1].isupper()
        and parts[-1] != "Optimizer" and "lr_scheduler" not in parts and "swa_utils" not in parts
    )


def _modules(info: Dict[str, Any], ref: Optional[Dict[str, Any]], depth: int = 0) -> FrozenSet[str]:
    """The modules whose parameters the argument `ref` holds: `m.parameters()`, `list(...)`,
    `itertools.chain(...)` of such, a local name the parameter flows bind (`trained.py`)."""
    if not ref or depth > 4:
        return frozenset()
    if "n" in ref:
        return frozenset(info.get("pf", {}).get(ref["n"], ()))
    if "c" in ref and "m" not in ref:
        owner, _, method = ref["c"].rpartition(".")
        if method in ("parameters", "named_parameters") and owner:
            return frozenset({owner})
        if ref["c"] in _PASSING:
            out: Set[str] = set()
            for a in ref["a"]:
                out |= _modules(info, a, depth + 1)
            return frozenset(out)
    return frozenset()
