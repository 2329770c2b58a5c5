"""An evaluation helper that casts the trained module it is given in place (AMP201's project half).

`evaluate(model, ...)` called from the training loop, whose body runs `model.half()` on its
parameter (behind a flag, `if args.fp16_eval:`) and never casts it back: `Module.half()` changes
the caller's module, so the loop's next pass trains fp16 parameters with an optimizer that keeps
no fp32 master copy. One file often holds the loop and another the helper; the per-file check
sees neither half. Over summaries only (no libcst):

* the loop: a function calling, in one loop (the same outermost loop: its calls repeat
  together), the helper on a name `X` and a training step on the same `X`: a project function
  given `X` and a torch optimizer the function builds, which calls or passes on what it gets
  for `X` and steps what it gets for the optimizer (`optimizer.step()`, `scaler.step(optimizer)`),
  or the optimizer, built on `X.parameters()`, stepped in that loop itself;
* the helper: a project function (not one that steps an optimizer) whose parameter for `X` is
  cast in place to the dtype (`model.half()`, `model.to(torch.float16)`, through a helper of
  its own) and not cast back later in it, nor rebound to something else in it (`model =
  copy.deepcopy(model)`).

Silent when the loop's function casts `X` back to fp32 anywhere, or hands its optimizer to a
master-weight wrapper (apex, DeepSpeed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from .. import torchapi

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Call, FuncKey, Project

#: how deep a training step's call of a helper that steps the optimizer is followed
_MAX_DEPTH = 2


@dataclass(frozen=True)
class EvaluatedCast:
    """`cast` (in the helper) makes `name` `dtype`; `helper` is the loop's call of the helper,
    `train` the loop's training call (or the optimizer's step), `optimizer` its class."""

    cast: "Call"
    helper: "Call"
    train: "Call"
    optimizer: str
    name: str
    helper_name: str


def evaluated_casts(project: "Project", dtype: str) -> Iterator[EvaluatedCast]:
    """Each in-place cast to `dtype` of a module a helper is given by a training loop that goes
    on training it (see the module's docstring); once per cast site."""
    from .graph import Call

    seen = set()
    for path, qual, info in list(project.functions()):
        loops: Dict[int, List[Dict[str, Any]]] = {}
        for r in info["calls"]:
            if r.get("l") and r["f"]:
                loops.setdefault(r["l"], []).append(r)
        if not any(len(rs) > 1 for rs in loops.values()):
            continue
        optimizers = _optimizer_locals(project, path, qual, info)
        optimizers = {n: v for n, v in optimizers.items() if not _master_passed(info, n)}
        if not optimizers:
            continue
        for records in loops.values():
            for train, name, opt in _trainings(project, path, qual, info, records, optimizers):
                if any(d == "fp32" for _, d, _ in project.casts_in((path, qual), name)):
                    continue  # `model.float()` in the loop's function: put back
                for record in records:
                    if record is train.record:
                        continue
                    found = _helper_cast(project, Call(path, qual, record), name, dtype, train)
                    if found is None or (found[0].path, found[0].row) in seen:
                        continue
                    seen.add((found[0].path, found[0].row))
                    yield EvaluatedCast(found[0], Call(path, qual, record), train, opt, name, found[1])


def _optimizer_locals(project: "Project", path: str, qual: str, info: Dict[str, Any]) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """The locals of the function bound to a torch optimizer it constructs: name -> (class, the
    constructor's record)."""
    from .graph import Call

    ctors = {}
    for r in info["calls"]:
        if r["f"] and r["f"].rsplit(".", 1)[-1][:1].isupper():
            q = project.optimizer_class(Call(path, qual, r))
            if q is not None:
                ctors.setdefault(r["f"], (q, r))
    out = {}
    for name, refs in info["locals"].items():
        for ref in refs:
            if ref and "c" in ref and ref["c"] in ctors and not ref.get("m"):
                out[name] = ctors[ref["c"]]
    return out


def _master_passed(info: Dict[str, Any], name: str) -> bool:
    """The function hands the optimizer `name` to something keeping fp32 master weights (apex
    `amp.initialize(model, optimizer)`, `FP16_Optimizer(optimizer)`, `deepspeed.initialize(...,
    optimizer=optimizer)`), or calls DeepSpeed at all."""
    for r in info["calls"]:
        f = r["f"] or ""
        if "deepspeed" in f.lower():
            return True
        if torchapi.MASTER_WRAPPER.search(f) and any(n == name for _, n in _passed(r)):
            return True
    return False


def _passed(record: Dict[str, Any]) -> List[Tuple[Any, str]]:
    """(position or keyword, spelled name) of the plain names a call passes."""
    out: List[Tuple[Any, str]] = [(i, a["n"]) for i, a in enumerate(record["a"]) if a and "n" in a and not a.get("m")]
    out += [(k, a["n"]) for k, a in record["k"].items() if a and "n" in a and not a.get("m")]
    return out


def _parameter(project: "Project", key: "FuncKey", where: Any) -> Optional[str]:
    """The parameter of function `key` an argument at `where` (a position or a keyword) binds."""
    callee = project.function(key)
    if callee is None:
        return None
    params = list(callee["params"])
    if callee["cls"] and key[1].count(".") == 1 and params:
        params = params[1:]  # self
    if isinstance(where, int):
        return params[where] if where < len(params) else None
    return where if where in params else None


def _trainings(
    project: "Project", path: str, qual: str, info: Dict[str, Any], records: List[Dict[str, Any]],
    optimizers: Dict[str, Tuple[str, Dict[str, Any]]],
) -> Iterator[Tuple["Call", str, str]]:
    """(the training call, the module's name, the optimizer class) for each call of one loop that
    trains a module with one of `optimizers`: a project function given both, or the optimizer's
    own step there (the module: the owner of the parameters it was built on)."""
    from .graph import Call

    for r in records:
        passed = _passed(r)
        f = r["f"]
        stepped = f[: -len(".step")] if f.endswith(".step") else None
        if stepped is not None and stepped not in optimizers and r["a"] and r["a"][0] and r["a"][0].get("n") in optimizers:
            stepped = r["a"][0]["n"]  # `scaler.step(optimizer)`
        if stepped in optimizers:
            q, ctor = optimizers[stepped]
            for owner in _parameter_owners(ctor):
                yield Call(path, qual, r), owner, q
            continue
        opts = [(w, n) for w, n in passed if n in optimizers]
        modules = [(w, n) for w, n in passed if n not in optimizers]
        if not opts or not modules:
            continue
        call = Call(path, qual, r)
        for key in project.callees(call):
            for ow, on in opts:
                oparam = _parameter(project, key, ow)
                if oparam is None:
                    continue
                owners = _parameter_owners(optimizers[on][1])
                for mw, mn in modules:
                    if owners and not any(_holds(o, mn) for o in owners):
                        continue  # `AdamW(student.parameters())`: `teacher` is run, not trained
                    if any(r2["f"] == f"{mn}.requires_grad_" for r2 in info["calls"]):
                        continue  # frozen (in part, maybe): its trained parts may be fp32
                    mparam = _parameter(project, key, mw)
                    if mparam is not None and _trains(project, key, mparam, oparam, 0):
                        yield call, mn, optimizers[on][0]


def _holds(owner: str, name: str) -> bool:
    """The module `owner` is `name`, holds it, or is part of it (`model.head` of `model`)."""
    return owner == name or owner.startswith(name + ".") or name.startswith(owner + ".")


def _parameter_owners(ctor: Dict[str, Any]) -> List[str]:
    """The names whose `.parameters()` an optimizer constructor is given (`Adam(model.parameters())`,
    through `filter(...)` / `list(...)`)."""
    ref = ctor["a"][0] if ctor["a"] else ctor["k"].get("params")
    for _ in range(3):
        if not ref or "c" not in ref:
            return []
        owner, _, method = ref["c"].rpartition(".")
        if method in ("parameters", "named_parameters") and owner:
            return [owner]
        if ref["c"] in ("filter", "list") and ref["a"]:
            ref = ref["a"][-1]
            continue
        return []
    return []


def _trains(project: "Project", key: "FuncKey", module: str, optimizer: str, depth: int) -> bool:
    """Function `key` runs what it gets as `module` (calls it, or hands it on) and steps what it
    gets as `optimizer` (`optimizer.step()`, `scaler.step(optimizer)`), itself or through a
    project function it passes both to."""
    from .graph import Call

    info = project.function(key)
    if info is None or module == optimizer:
        return False
    runs = steps = False
    for r in info["calls"]:
        f = r["f"]
        if f in (module, f"{module}.forward"):
            runs = True  # the forward pass of the module the optimizer steps
        if f == f"{optimizer}.step" or (f.endswith(".step") and r["a"] and r["a"][0] and r["a"][0].get("n") == optimizer):
            steps = True
    if runs and steps:
        return True
    if depth >= _MAX_DEPTH:
        return False
    for r in info["calls"]:
        passed = _passed(r)
        mods = [w for w, n in passed if n == module]
        opts = [w for w, n in passed if n == optimizer]
        if not mods or not opts:
            continue
        for callee in project.callees(Call(key[0], key[1], r)):
            m, o = _parameter(project, callee, mods[0]), _parameter(project, callee, opts[0])
            if m and o and _trains(project, callee, m, o, depth + 1):
                return True
    return False


def _helper_cast(project: "Project", call: "Call", name: str, dtype: str, train: "Call") -> Optional[Tuple["Call", str]]:
    """(the cast, the helper's name) when `call` passes `name` to a project function (not the
    training call's) that casts that parameter in place to `dtype`, keeps it so to its end and
    steps no optimizer."""
    from .graph import Call

    passed = [w for w, n in _passed(call.record) if n == name]
    if not passed:
        return None
    trained = set(project.callees(train)) if train.record["f"] and not train.record["f"].endswith(".step") else set()
    for key in project.callees(call):
        if key in trained:
            continue
        param = _parameter(project, key, passed[0])
        info = project.function(key)
        if param is None or info is None:
            continue
        if any(r["f"].endswith(".step") for r in info["calls"] if r["f"]):
            continue  # it trains (or schedules) itself: not an evaluation of the caller's module
        if any(not ref or ref.get("n") != param for ref in info["locals"].get(param, ())):
            continue  # `model = copy.deepcopy(model)`: a module of its own
        casts = sorted(project.casts_in(key, param), key=lambda c: c[2][1])
        if not casts or casts[-1][1] != dtype:
            continue  # never cast, or put back to fp32 (or another dtype) before it returns
        row = casts[-1][2][1]
        record = next((r for r in info["calls"] if r["r"] == row), None)
        if record is None:
            continue
        return Call(key[0], key[1], record), key[1].rsplit(".", 1)[-1]
    return None
