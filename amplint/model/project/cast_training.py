"""Across files: optimizers that update modules another file made low precision (AMP201 fp16,
AMP206 bf16). The project half of `model/trained_casts.py`; reads only summaries (no libcst).

Two shapes one file cannot see:

* `cast_modules`: an optimizer constructor of a torch optimizer class whose parameters come from
  a module a builder, loader or `convert_weights(model)`-style helper of another file cast to the
  dtype (in place, through `model.apply(...)`, by returning `model.half()`, or a
  `from_pretrained(..., torch_dtype=...)` whose dtype may be it);
* `chosen_casts`: `unet.to(weight_dtype)` where `weight_dtype` comes from a project function
  that picks it among dtype literals, or the optimizer from a project helper that constructs a
  torch optimizer on the parameters it is given (`train_util.get_optimizer(args, params)`).

Each yields what the rule needs to word its finding; the silences are the rules' shared ones
(a master-weight wrapper in the optimizer's function, a frozen base loaded `from_pretrained`,
a rebind or a cast back between the cast and the optimizer, no `step()` after a late cast).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Pattern, Tuple

from .. import torchapi
from .choices import Build, optimizer_builds, project_dtype_choices

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Call, Project


@dataclass(frozen=True)
class CastModule:
    """An optimizer constructor (`call`, of class `optimizer`) updating a `name` module cast at `site`."""

    call: "Call"
    optimizer: str
    name: str
    site: Tuple[str, int]
    #: the test of the `if` the cast sits under in its function (`precision == "fp16"`), if any
    condition: Optional[str] = None


@dataclass(frozen=True)
class ChosenCast:
    """`subject.to(name)` (the summary's call `record`, in function `qual` of `path`), `name`
    picked by a project function (`choice`: its dtype candidates and sites), and the optimizer
    `build` updating the subject's parameters; `more`: other such casts of the function."""

    path: str
    qual: str
    record: Dict[str, Any]
    name: str
    choice: Tuple[FrozenSet[str], List[Tuple[str, int]]]
    build: Build
    more: Tuple[Dict[str, Any], ...]


def cast_modules(
    project: "Project", dtype: str, optimizer: Optional[Callable[[str], bool]] = None, wrapper: Optional[Pattern[str]] = None,
    project_optimizers: bool = False,
) -> Iterator[CastModule]:
    """Each optimizer constructor (a torch optimizer class; `optimizer(qualname)` filters
    further; with `project_optimizers` also a project class deriving from
    `torch.optim.Optimizer` that keeps no master copy, `project_optimizer`) whose parameters
    belong to a module another file made `dtype`, once per constructor; same-file casts and
    same-file `from_pretrained` loads are the per-file check's. Silent where the constructor's
    function calls a master-weight wrapper (apex, DeepSpeed), or anything `wrapper` matches, and
    where the constructor is given `master_weights=` (TransformerEngine's `FusedAdam`; the
    record keeps no boolean literal, so a spelled `False` counts too: precision first)."""
    for call in project.calls():
        q, own = project.optimizer_class(call), False
        if q is None and project_optimizers:
            q = project_optimizer(project, call)
            own = q is not None
        if q is None or (optimizer is not None and not optimizer(q)):
            continue
        if project.master_weights(call, itself=not own) or (wrapper is not None and _calls_matching(project, call, wrapper)):
            continue  # apex / DeepSpeed / FP16_Optimizer keep fp32 master weights
        if "master_weights" in call.record.get("k", {}):
            continue  # `FusedAdam(..., master_weights=True)`: the optimizer keeps fp32 copies itself
        for name, site in project.low_precision_modules(_grouped_modules(project, call), dtype, pretrained=True):
            pretrained = (project.loaded_at(site) or "").endswith("from_pretrained(...)") if site else False
            if not site or (site[0] == call.path and (pretrained or not project.loaded_at(site))):
                continue  # same-file casts and `from_pretrained` loads are `check`'s
            if pretrained and _freezes_around(project, call, site):
                continue  # a frozen base whose trainable part may be fp32 (adapters, a new head)
            yield CastModule(call, q, name, site, cast_condition(project, site))
            break


#: the longest `if` test a message quotes
_CONDITION_CHARS = 60


def cast_condition(project: "Project", site: Tuple[str, int]) -> Optional[str]:
    """The test of the innermost `if` whose branch holds row `site[1]` of `site[0]`, within the
    function holding that row (`precision == "fp16"`, `not args.amp` for an `else:`): the cast
    happens on one path only, a run-time choice the message names. None when the row is under
    no `if` there, or the file cannot be read or parsed."""
    from ...core.pyast import parse
    from .wrappers import project_view

    path, row = site
    text = project_view(project).project_text(path)
    tree = parse(text) if text is not None else None
    if tree is None or not row:
        return None
    scope: ast.AST = tree
    while True:  # the innermost function holding the row
        inner = next((
            n for n in ast.walk(scope) if n is not scope and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.lineno <= row <= (n.end_lineno or n.lineno)
        ), None)
        if inner is None:
            break
        scope = inner
    found: Optional[str] = None
    for node in ast.walk(scope):
        if not isinstance(node, ast.If) or _not_a_choice(node.test):
            continue
        for branch, negated in ((node.body, False), (node.orelse, True)):
            if branch and branch[0].lineno <= row <= (branch[-1].end_lineno or branch[-1].lineno):
                test = ast.get_source_segment(text, node.test) or ""  # type: ignore[arg-type]
                test = " ".join(test.split())
                if negated and not (isinstance(branch[0], ast.If) and len(branch) == 1):
                    test = f"not ({test})"
                elif negated:
                    continue  # an `elif`: its own test is the innermost
                if test and len(test) <= _CONDITION_CHARS:
                    found = test  # ast.walk goes outside in: the last one is the innermost
    return found


#: tests that pick which object is cast, not whether the run casts: a layer's type, the entry point
_TYPE_TESTS = frozenset({"isinstance", "issubclass", "hasattr", "callable"})


def _not_a_choice(test: ast.AST) -> bool:
    """`isinstance(layer, nn.Linear)`, `hasattr(m, "weight")`, `__name__ == "__main__"`: the test
    says which module a loop casts, or that the file runs as a script, not a run-time precision."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _TYPE_TESTS:
            return True
        if isinstance(node, ast.Name) and node.id in ("__name__", "TYPE_CHECKING"):
            return True
    return False


#: the torch base class a project optimizer derives from
_OPTIMIZER_BASES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})
#: a call in the class's methods that may make or keep a copy of the parameters (a master copy)
_COPIES = re.compile(r"\.(?:clone|copy_|detach|float|double|to|new_tensor)$|_flatten_dense_tensors|master|fp32|float32", re.IGNORECASE)


def project_optimizer(project: "Project", call: "Call") -> Optional[str]:
    """`pkg.utils.fp16.FP16Adam` when `call` constructs a project class deriving from
    `torch.optim.Optimizer` (it steps the parameters it is handed, `self.param_groups`) whose
    methods, its project bases' included, make no copy a master weight could be: no
    `.clone()`, `.copy_()`, `.detach()`, `.float()`, `.to(...)` on any name but a subscript of
    its state (`state["exp_avg"].float()`, the moments), nothing spelled `master` or `fp32`."""
    last = call.record["f"].rsplit(".", 1)[-1] if call.record["f"] else ""
    if not last[:1].isupper():
        return None
    for t in project.resolve_call(call):
        if t[0] != "C" or not (project.external_bases(t[1], t[2]) & _OPTIMIZER_BASES):
            continue
        for path, cls in project.mro(t[1], t[2]):
            for qual, info in project.summaries[path]["functions"].items():
                if not qual.startswith(cls + "."):
                    continue
                if any(r["f"] and _COPIES.search(r["f"]) for r in info["calls"]) or any(_COPIES.search(n) for n in info["locals"]):
                    return None  # may keep fp32 copies of the parameters: what apex's FP16_Optimizer does
                if info["casts"]:
                    return None
        module = project.where(t[1], 0).rsplit(":", 1)[0]  # `songgen/utils/fp16.py`, from the project's root
        module = module[: -len(".py")] if module.endswith(".py") else module
        return f"{module.replace('/', '.')}.{t[2]}"
    return None


def chosen_casts(
    project: "Project",
    choice: Callable[[FrozenSet[str]], bool],
    optimizer: Optional[Callable[[str], bool]] = None,
    wrapper: Pattern[str] = torchapi.MASTER_WRAPPER,
) -> Iterator[ChosenCast]:
    """`unet.to(weight_dtype)` where `weight_dtype` comes from a project function picking it
    among dtype literals that `choice` takes, or the optimizer from a project helper
    constructing a torch optimizer (`optimizer(qualname)` filters further) on the parameters it
    is given: one per function, the function's first such cast (the others in `more`); silent
    when the function hands that optimizer to a callee `wrapper` matches (fp32 master weights)."""
    for path, qual, info in list(project.functions()):
        if "dc" not in info or qual == "<module>":
            continue
        builds = None
        found = []  # (cast record, dtype name, choice, build)
        for subject, name, row in info["dc"]:
            picked = project_dtype_choices(project, path, qual, name)
            if picked is None or not choice(picked[0]):
                continue
            if builds is None:
                builds = [b for b in optimizer_builds(project, path, qual) if optimizer is None or optimizer(b.optimizer)]
            cast = {subject, *info.get("lv", {}).get(subject, ())}  # `for te in text_encoders: te.to(d)`
            build = next((b for b in builds if any(m == c or m.startswith(c + ".") for m in b.modules for c in cast)), None)
            if build is None or (not picked[1] and build.helper is None):
                continue  # nothing picked in another file: the per-file check's
            if subject in info.get("fz", ()) or _cast_back(info, subject, row):
                continue
            low, high = sorted((row, build.call.row))
            if any(low < r < high for r in info.get("rb", {}).get(subject, ())):
                continue  # `del unet; unet = unet_lllite` between the cast and the optimizer
            if subject in info.get("fv", ()) and row < build.call.row:
                continue  # `m.requires_grad_(train_m)`: before the optimizer, maybe the frozen path's cast
            if row > build.call.row and not _steps_after(info, row):
                continue
            if _master_passed(info, build, wrapper):
                continue
            record = next((r for r in info["calls"] if r["r"] == row and r["f"] == f"{subject}.to"), None)
            if record is not None:
                found.append((record, name, picked, build))
        if found:
            record, name, picked, build = found[0]
            yield ChosenCast(path, qual, record, name, picked, build, tuple(f[0] for f in found[1:]))


def _freezes_around(project: "Project", call: "Call", site: Tuple[str, int]) -> bool:
    """`requires_grad_(...)` called in the function building the optimizer or in the one loading
    the model (the summaries keep calls, not `p.requires_grad = False` assignments: a call is
    what they can tell)."""
    functions = [project.function((call.path, call.func))]
    loader = next(
        (info for path, _, info in project.functions() if path == site[0] and any(r["r"] == site[1] for r in info["calls"])),
        None,
    )
    functions.append(loader)
    return any(r["f"].endswith("requires_grad_") for info in functions if info for r in info["calls"])


def _cast_back(info: Dict[str, Any], subject: str, row: int) -> bool:
    """`subject.float()` / `.to(torch.float32)` later in the function (the summary's casts)."""
    return any(name == subject and dtype == "fp32" and r > row for name, dtype, r in info["casts"])


def _steps_after(info: Dict[str, Any], row: int) -> bool:
    """An optimizer `step()` after the cast in the same function (the training loop)."""
    return any(r["r"] > row and r["f"].endswith(".step") and "optim" in r["f"].lower() for r in info["calls"])


def _calls_matching(project: "Project", call: "Call", wrapper: Pattern[str]) -> bool:
    """The function holding `call` calls something `wrapper` matches (by its spelling)."""
    info = project.function((call.path, call.func))
    return info is not None and any(wrapper.search(r["f"]) for r in info["calls"] if r["f"])


def _master_passed(info: Dict[str, Any], build: Build, wrapper: Pattern[str]) -> bool:
    """The function hands the optimizer it built to something that keeps fp32 master weights."""
    spelled = build.call.record["f"]
    names = {n for n, refs in info["locals"].items() if any(r and r.get("c") == spelled for r in refs)}
    names |= {n for n, refs in info.get("ue", {}).items() if any(c.get("c") == spelled for _, c in refs)}
    for r in info["calls"]:
        if r["f"] and wrapper.search(r["f"]) and any(a and a.get("n") in names for a in [*r["a"], *r["k"].values()]):
            return True
    return False


@dataclass(frozen=True)
class LaunchedCast:
    """An optimizer constructor (`call`, of class `optimizer`) updating a `name` module cast at
    `site`, in a script whose only master-weight wrapper is accelerate's `prepare`, launched by
    `launch` (`launchers.Launch`) with no DeepSpeed, FSDP or Megatron-LM behind it."""

    call: "Call"
    optimizer: str
    name: str
    site: Tuple[str, int]
    launch: Any
    more: Tuple[Tuple[str, int], ...] = ()  # other casts of the module the optimizer may update


#: accelerate's `prepare` (what `accelerator.prepare(model, optimizer)` is spelled as)
_PREPARE = re.compile(r"(?:^|\.)prepare$")
#: calls a master-weight pattern matches that hold no master copy themselves when the launch puts
#: no DeepSpeed behind accelerate: its plugin (`_plain_accelerators` checks it may be left out),
#: ZeRO-3's gather (a no-op on plain tensors), a helper building a config dict
_LAUNCH_DECIDES = re.compile(r"(?:^|\.)(?:DeepSpeedPlugin|GatheredParameters|\w*config)$", re.IGNORECASE)


def _launch_decides(spelled: str) -> bool:
    return bool(_PREPARE.search(spelled) or _LAUNCH_DECIDES.search(spelled))


#: a plugin keyword of `Accelerator(...)` (in a `**kwargs` dict the scale summary does not follow)
_PLUGIN_WORDS = ("deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin", "DeepSpeedPlugin(", "FullyShardedDataParallelPlugin(")


def launched_casts(
    project: "Project", dtype: str, optimizer: Optional[Callable[[str], bool]] = None, wrapper: Optional[Pattern[str]] = None
) -> Iterator[LaunchedCast]:
    """Each optimizer constructor (a torch optimizer class) on the parameters of a module made
    `dtype` (also in the same file: the per-file check is silent there, as accelerate's
    `prepare` may hold DeepSpeed or FSDP), in a script a command of the project starts with
    the plugins ruled out: `accelerate launch` with `Launch.distributed_plugin` False (a
    process layout given, no `--use_deepspeed` / `--use_fsdp` / `--config_file`), or `torchrun`
    / `python` (no accelerate launcher: its environment, which alone hands `Accelerator()` a
    plugin from outside the code, is not set). The optimizer's file is the launched script, or
    a module it imports (every launch reaching the file then rules the plugins out). Every call
    `wrapper` matches in the optimizer's function (and, for a helper returning the optimizer,
    in the functions calling it) is a `prepare`, one at least, and the file's
    `Accelerator(...)` adds no plugin in code (none given, or a `deepspeed_plugin=` name that
    may be None: the run without it). Silent where the file freezes parameters (a trainable
    part may be fp32) or names a plugin it may hand on through `**kwargs`."""
    from .wrappers import project_view

    view = project_view(project)
    if not view.launches():
        return
    by_path: Dict[str, List[Any]] = {}
    for call in project.calls():
        launches = by_path.get(call.path)
        if launches is None:
            launches = by_path[call.path] = _plain_launches(project, view, call.path)
        if not launches:
            continue
        q = project.optimizer_class(call)
        if q is None or (optimizer is not None and not optimizer(q)):
            continue
        spelled = _wrappers_around(project, call, wrapper)
        if not any(_PREPARE.search(f) for f in spelled) or not all(_launch_decides(f) for f in spelled):
            continue
        if not _plain_accelerators(view, call.path):
            continue
        sites = [
            (name, site) for name, site in project.low_precision_modules(_grouped_modules(project, call), dtype, pretrained=True)
            if site and site[0] == call.path  # another file's cast: `cast_modules`' (it reports through any wrapper it does not match)
        ]
        if sites:
            # the launch that states a precision first (the documented mixed-precision run), then the walk's order
            launch = sorted(launches, key=lambda l: l.mixed_precision is None)[0]
            yield LaunchedCast(call, q, sites[0][0], sites[0][1], launch, tuple(site for _, site in sites[1:3]))


#: launchers that start a script with no accelerate launcher (`Accelerator()` then reads no plugin
#: from the environment `accelerate launch` sets up)
_PLAIN_KINDS = ("torchrun", "python")


def _plain_launches(project: "Project", view: Any, path: str) -> List[Any]:
    """The launches that start `path` with DeepSpeed, FSDP and Megatron-LM ruled out behind
    accelerate (`launched_casts`): those of the script itself (an `accelerate launch` with
    `distributed_plugin` False, a `torchrun` or `python` command); else those of scripts that
    import it through project imports, when every launch reaching it so rules them out."""
    from .accelerate_hooks import _imported_files

    def plain(launch: Any) -> bool:
        return (launch.kind == "accelerate" and launch.distributed_plugin is False) or launch.kind in _PLAIN_KINDS

    direct = [l for l in view.launches_of(path) if plain(l)]
    if direct:
        return direct
    real = os.path.realpath(path)
    reaching = [l for l in view.launches() if l.script != real and real in _imported_files(project, l.script)]
    return reaching if reaching and all(plain(l) for l in reaching) else []


def _wrappers_around(project: "Project", call: "Call", wrapper: Optional[Pattern[str]]) -> List[str]:
    """The calls `wrapper` (or a master-weight wrapper) matches in the optimizer's function, and,
    where that function returns the optimizer (`def build_adamw(model): return AdamW(...)`),
    in each function of the project calling it (`optimizer = build_adamw(model)`, then
    `accelerator.prepare(optimizer)`)."""
    def matching(info: Optional[Dict[str, Any]]) -> List[str]:
        return [
            r["f"] for r in (info or {}).get("calls", ())
            if r["f"] and ((wrapper is not None and wrapper.search(r["f"])) or torchapi.MASTER_WRAPPER.search(r["f"]))
        ]

    info = project.function((call.path, call.func))
    spelled = matching(info)
    record = call.record
    returned = info is not None and any(
        r and r.get("c") == record["f"] and r.get("a") == record["a"] and r.get("k") == record["k"] for r in info.get("returns", ())
    )
    if returned and call.func != "<module>":
        for caller in project.callers((call.path, call.func)):
            spelled.extend(matching(project.function((caller.path, caller.func))))
    return spelled


def _grouped_modules(project: "Project", call: "Call") -> Any:
    """`updated_modules`, also through a name bound once to a project helper's parameter groups
    (`params = get_optimizer_grouped_parameters(model, wd)`, whose body reads its first
    parameter's `named_parameters()` / `parameters()`): the modules of that first argument."""
    from .graph import Call as ProjectCall

    direct = project.updated_modules(call)
    if direct:
        return direct
    record = call.record
    ref = record["a"][0] if record["a"] else record["k"].get("params")
    info = project.function((call.path, call.func))
    if not ref or "n" not in ref or "." in ref["n"] or info is None:
        return direct
    refs = info["locals"].get(ref["n"]) or []
    if len(refs) != 1 or not refs[0] or "c" not in refs[0] or not refs[0].get("a"):
        return direct
    bound = refs[0]
    first = bound["a"][0]
    if not isinstance(first, dict) or "n" not in first or "." in first["n"]:
        return direct
    record_of = next((r for r in info["calls"] if r["f"] == bound["c"]), None)
    if record_of is None:
        return direct
    for key in project.callees(ProjectCall(call.path, call.func, record_of)):
        helper = project.function(key)
        if not helper or not helper["params"]:
            continue
        param = helper["params"][0]
        if any(r["f"] in (f"{param}.named_parameters", f"{param}.parameters") for r in helper["calls"]):
            return project.name_types(call.path, call.func, first["n"])
    return direct


#: a parameter frozen, or a freeze that may be one (`requires_grad = False`, `requires_grad_(False)`,
#: `requires_grad_(flag)`); a test reading it (`if p.requires_grad`) or setting True freezes nothing
_FREEZES = re.compile(r"requires_grad\s*=(?!=)(?!\s*True\b)|requires_grad_\((?!\s*(?:True\s*)?\))")


def _plain_accelerators(view: Any, path: str) -> bool:
    """The file builds an `Accelerator` and each one adds no DeepSpeed / FSDP / Megatron-LM plugin
    in code (a `deepspeed_plugin=` name bound to None on some path counts as the run without),
    and the file freezes no parameter (`_FREEZES`: reading `p.requires_grad` is no freeze)."""
    text = view.project_text(path)
    summary = view.summary(path)
    if text is None or summary is None or _FREEZES.search(text):
        return False
    accelerators = [e for e in summary["events"] if e["e"] == "ctor" and e.get("k") == "accelerator"]
    if not accelerators:
        return False
    for e in accelerators:
        if e.get("fsdp"):
            return False
        if e.get("star") and any(w in text for w in _PLUGIN_WORDS) and not e.get("ds"):
            return False
        ds = e.get("ds")
        if ds is not None and not (isinstance(ds, str) and ds.isidentifier() and _may_be_none(text, ds)):
            return False
    return True


def _may_be_none(text: str, name: str) -> bool:
    """`name = None` is a statement of the file (the scale summary keeps no None binding)."""
    return re.search(rf"^[ \t]*{re.escape(name)}[ \t]*(?::[^=\n]*)?=[ \t]*None[ \t]*(?:#.*)?$", text, re.M) is not None
