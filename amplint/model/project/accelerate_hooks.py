"""accelerate's scaling `Accelerator` followed across files, and the per-parameter gradient hooks
that run inside its backward (AMP102's and AMP104's project halves).

Training scripts often get their accelerator from a project helper (`accelerator =
train_util.prepare_accelerator(args)`), whose body builds `Accelerator(mixed_precision=
args.mixed_precision, ...)`, with the `--mixed_precision` option defined by an argparse
helper of the project (`add_training_arguments(parser)`). This module answers, over
summaries only:

* `project_scaling_accelerator(project, path, func, name)`: whether the plain name `name` (or
  `self.name`: every binding of the attribute in the method's class) read in function `func`
  of `path` holds an `Accelerator` whose `backward` scales the loss with a
  GradScaler, followed through plain assignments and into the returns of project functions
  (every binding on the way must be one; a parameter, another attribute or a call of
  anything else is unknown: None). It scales when its `mixed_precision` is the literal "fp16", or
  reads an option (`args.mixed_precision`) that an argparse call of the project defines with
  literal `choices` including "fp16" (then it scales on that choice, which `Scaling.choice`
  names; for `scaler` (AMP402, whose severity follows it), on every run when the option
  defaults to "fp16" and no shipped command passes it another value: `_fp16_by_default`), or reads a config loaded at run time (`config.mixed_precision`, `config =
  read_config(args.config)`) whose key every Python config module of the project sets to
  "fp16" (some saying otherwise: a choice, `the config's mixed_precision is fp16`;
  `config_setting`), or is not given while an `accelerate launch --mixed_precision fp16`
  command the project ships starts the file or a script importing it (`launched_fp16`; an
  empty `**accelerate_kwargs` parameter nothing passes is no `mixed_precision`). Never with
  `cpu=` not literally False, other `**kwargs` / `*args`, or a DeepSpeed / FSDP / Megatron-LM
  plugin built inline. A plugin passed by a name that a project helper
  binds and that helper may return None (`prepare_deepspeed_plugin(args)`: `if not
  args.deepspeed: return None`) is a run-time choice too: on the run without it accelerate's
  own GradScaler scales.
* `grad_hooks(project, path)`: the functions a file registers with
  `register_post_accumulate_grad_hook` inside a loop (over the parameters: a hook registered
  once runs once per backward), a `def` nested in the registering function or one of the
  module, or the nested `def` a factory returns, with the registering function: they run once
  per parameter, inside the backward, before the step.

The options are read from the files involved (the accelerator's, the reader's) and the
project modules those import directly; every definition of the destination there must have
the same literal choices (precision first: two parsers disagreeing leave the value unknown).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..precision_names import CONFIG_KEYS, precision_dtype

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Project

ACCELERATORS = frozenset(("accelerate.Accelerator", "accelerate.accelerator.Accelerator"))
#: what registers a function run once per parameter after its gradient is accumulated
HOOK_REGISTRATIONS = ("register_post_accumulate_grad_hook",)
_MAX_DEPTH = 4
_PLUGIN_NAMES = {"deepspeed_plugin": "DeepSpeed", "fsdp_plugin": "FSDP", "megatron_lm_plugin": "Megatron-LM"}


@dataclass(frozen=True)
class Scaling:
    """A scaling Accelerator: where it is built, and on which run it scales."""

    path: str
    row: int
    choice: Optional[str]  # "--mixed_precision is fp16" (None: the literal "fp16")
    option: Optional[Tuple[str, int]]  # where that option is defined
    without: Tuple[str, ...] = ()  # plugins a helper may leave out ("DeepSpeed"): it scales on runs without them

    @property
    def runtime(self) -> bool:
        """Whether it scales only on some runs (a choice, or without a plugin): findings are warnings."""
        return bool(self.choice or self.without)

    def prefix(self) -> str:
        """`when --mixed_precision is fp16: ` for a message ("" for a literal "fp16")."""
        return f"when {self.choice}: " if self.choice else ""

    def runs(self) -> str:
        """` (on runs without a DeepSpeed plugin)` for a help text."""
        return f" (on runs without a {' or '.join(self.without)} plugin)" if self.without else ""


def project_scaling_accelerator(project: "Project", path: str, func: str, name: str, _depth: int = 0, scaler: bool = False) -> Optional[Scaling]:
    """The scaling Accelerator the plain name `name` read in `func` of `path` certainly holds, else None.
    `scaler`: the question is only whether it holds a GradScaler (AMP402: what a checkpoint must
    save), not how its clipping runs, so an FSDP plugin keeps it (accelerate builds a
    `ShardedGradScaler` for fp16 under FSDP; DeepSpeed and Megatron-LM scale on their own)."""
    attribute = name.startswith("self.") and name.count(".") == 1
    if ("." in name and not attribute) or _depth > _MAX_DEPTH:
        return None
    memo = project.__dict__.setdefault("_scaling_accelerators", {})
    key = (path, func, name, scaler)
    if key in memo:
        return memo[key]
    memo[key] = None  # a cycle: unknown
    memo[key] = (_attribute_lookup if attribute else _lookup)(project, path, func, name, _depth, scaler)
    return memo[key]


def _attribute_lookup(project: "Project", path: str, func: str, name: str, depth: int, scaler: bool) -> Optional[Scaling]:
    """`self.accelerator` read in a method: every binding of the attribute in the method's class
    (`self.accelerator = Accelerator(...)` in `__init__`) must be a scaling Accelerator."""
    info = project.function((path, func))
    cls = (info or {}).get("cls")
    record = project.summaries[path]["classes"].get(cls) if cls else None
    attr = name[len("self."):]
    if record is None or attr in record.get("wa", {}):
        return None
    bindings = record["attrs"].get(attr) or []
    if not bindings:
        return None
    found: Optional[Scaling] = None
    for where, ref in bindings:
        if ref and "n" in ref and ref["n"] == name:
            continue  # `self.accelerator = self.accelerator`: no new value
        one = _ref_scaling(project, path, where, name, ref, depth, scaler)
        if one is None:
            return None
        found = found or one
    return found


def _scope_binding(project: "Project", path: str, func: str, name: str) -> Optional[Tuple[str, List[Dict[str, Any]]]]:
    """(the scope that binds `name` where `func` reads it, its bindings); None when a parameter
    binds it, nothing does, or an unpacking does."""
    scope: Optional[str] = func
    while scope is not None:
        info = project.function((path, scope))
        if info is not None:
            if scope != "<module>" and name in info["params"]:
                return None
            refs = info["locals"].get(name)
            if refs or name in info.get("ue", {}):
                return (scope, refs) if refs and name not in info.get("ue", {}) else None
        scope = (scope.rsplit(".", 1)[0] if "." in scope else "<module>") if scope != "<module>" else None
    return None


def _lookup(project: "Project", path: str, func: str, name: str, depth: int, scaler: bool) -> Optional[Scaling]:
    bound = _scope_binding(project, path, func, name)
    if bound is None:
        return None
    scope, refs = bound
    found: Optional[Scaling] = None
    for ref in refs:
        one = _ref_scaling(project, path, scope, name, ref, depth, scaler)
        if one is None:
            return None
        found = found or one
    return found


def _ref_scaling(project: "Project", path: str, scope: str, name: str, ref: Optional[Dict[str, Any]], depth: int, scaler: bool) -> Optional[Scaling]:
    if not ref or ref.get("m"):
        return None
    if "n" in ref:
        return project_scaling_accelerator(project, path, scope, ref["n"], depth + 1, scaler)
    if "c" not in ref or "e0" in ref:
        return None
    callees = project.name_types(path, scope, ref["c"])
    if any(t[0] == "X" and t[1] in ACCELERATORS for t in callees):
        entries = [e for e in project.summaries[path].get("acc", ()) if e["fn"] == scope and e["t"] == name]
        if not entries:
            return None
        found: Optional[Scaling] = None
        for entry in entries:
            one = _entry_scaling(project, path, entry, scaler)
            if one is None:
                return None
            found = found or one
        return found
    functions = [t for t in callees if t[0] == "F"]
    if len(functions) != 1 or len(callees) != 1:
        return None
    _, cpath, cqual = functions[0]
    info = project.function((cpath, cqual))
    if info is None or info.get("ro") or info.get("rn") or not info["returns"]:
        return None
    found = None
    for value in info["returns"]:
        if not value or "n" not in value or value.get("m"):
            return None
        one = project_scaling_accelerator(project, cpath, cqual, value["n"], depth + 1, scaler)
        if one is None:
            return None
        found = found or one
    return found


def _entry_scaling(project: "Project", path: str, entry: Dict[str, Any], scaler: bool = False) -> Optional[Scaling]:
    """Whether one `Accelerator(...)` record (`summary.accelerator_record`) scales, and on which run."""
    mp = entry.get("mp")
    if entry.get("x") and (mp is not None or not entry.get("sk")):
        return None
    choices: List[str] = []
    option: Optional[Tuple[str, int]] = None
    if mp is None:
        launched = launched_fp16(project, path, scaler, entry)
        if launched is None:
            return None
        choice, option = launched
        if choice:
            choices.append(choice)
    elif isinstance(mp, str):
        if precision_dtype(mp) != "fp16" or mp.strip().lower() != "fp16":
            return None  # accelerate takes "fp16" only (lower-cased)
    elif isinstance(mp, dict):
        found = project_option(project, path, mp["n"].rsplit(".", 1)[-1])
        if found is not None:
            if "fp16" not in found[2]:
                return None
            if not (scaler and _fp16_by_default(project, path, found)):
                choices.append(f"{found[1]} is fp16")
            option = (found[5], found[4])
        else:
            setting = config_setting(project, path, entry["fn"], mp["n"])
            if setting is None:
                return None
            choice, option = setting
            if choice:
                choices.append(choice)
    else:
        return None
    without: List[str] = []
    for plugin, local in sorted(entry.get("pl", {}).items()):
        if scaler and plugin == "fsdp_plugin":
            continue  # accelerate's fp16 under FSDP keeps a (sharded) GradScaler
        if not _may_be_none(project, path, entry["fn"], local):
            return None
        without.append(_PLUGIN_NAMES.get(plugin, plugin))
    return Scaling(path, entry["r"], " and ".join(choices) or None, option, tuple(without))


def _fp16_by_default(project: "Project", path: str, option: List[Any]) -> bool:
    """The option's literal default is "fp16" (`add_argument("--mixed-precision", default="fp16",
    choices=["no", "fp16", "bf16"])`) and no command the project ships that starts `path`, or a
    script importing it, passes the option another value: the run as shipped and as typed
    without the flag is fp16, no mere choice."""
    from .wrappers import project_view

    default = option[3]
    if not isinstance(default, str) or default.strip().lower() != "fp16":
        return False
    real = os.path.realpath(path)
    for launch in project_view(project).launches():
        if real != launch.script and real not in _imported_files(project, launch.script):
            continue
        given = launch.arg(option[0])
        if given is not None and given[0].strip("'\"").lower() != "fp16":
            return False
    return True


def _empty_unpacking(project: "Project", path: str, entry: Dict[str, Any], files: Sequence[str]) -> bool:
    """`Accelerator(..., **accelerate_kwargs)` whose only unknown is that dict, a parameter of the
    enclosing function defaulting to an empty dict (or None), never rebound there, and passed
    by no call in `files` (the launched script and what it imports) that may run the function:
    none spelled with its name (the class's, for `__init__`; a `super().__init__(...)`) gives
    it by keyword, by position, or through `*`/`**`."""
    name = entry.get("sk")
    if not name:
        return True
    info = project.function((path, entry["fn"]))
    if info is None or name not in info["params"] or name not in info.get("ed", ()) or info["locals"].get(name):
        return False
    method = info.get("cls") and info["params"][:1] in (["self"], ["cls"])
    position = info["params"].index(name) - (1 if method else 0)
    last = entry["fn"].rsplit(".", 1)[-1]
    spelled = entry["fn"].split(".")[0] if last == "__init__" else last
    for f in files:
        for qual, caller in (project.summaries.get(f) or {}).get("functions", {}).items():
            for record in caller["calls"]:
                f_last = record["f"].rsplit(".", 1)[-1]
                if f_last != spelled and record.get("sp") != last:
                    continue
                if record.get("u") or name in record["k"] or len(record["a"]) > position:
                    return False
    return True


#: how far a launched script's project imports are followed (modules that may build its Accelerator)
_MAX_IMPORT_FILES = 64


def launched_fp16(
    project: "Project", path: str, scaler: bool = False, entry: Optional[Dict[str, Any]] = None
) -> Optional[Tuple[Optional[str], Tuple[str, int]]]:
    """The precision an `Accelerator(...)` built in `path` without `mixed_precision` takes from the
    launch commands the project ships (`launchers.Launch`): accelerate's launcher hands its
    `--mixed_precision` to every Accelerator of the process it starts, so a command launching
    `path`, or a script importing it (through project imports), counts. (None, where) when every
    such command that states a precision says fp16 with no DeepSpeed or Megatron-LM (FSDP only
    for `scaler`: accelerate keeps a sharded GradScaler there), its `--config_file` (which may
    add either) a project YAML that adds neither (`Launch.plugins`; the YAML's own
    `mixed_precision: fp16` counts when the command states none: `where` is then that line);
    (`launched with --mixed_precision fp16`, where) when others state another; None
    when none says fp16. Commands stating no precision take the user's own accelerate config,
    outside the project: they decide nothing. `entry`: the `Accelerator(...)` record, whose
    `**kwargs` must be empty on the launched run (`_empty_unpacking`)."""
    from .wrappers import project_view

    view = project_view(project)
    launches = [l for l in view.launches() if l.kind == "accelerate" and l.mixed_precision is not None]
    if not launches:
        return None
    real = os.path.realpath(path)
    scaling, other = [], []
    for launch in launches:
        imported = _imported_files(project, launch.script)
        if real != launch.script and real not in imported:
            continue
        if entry is not None and not _empty_unpacking(project, path, entry, [launch.script, *sorted(imported.values())]):
            continue
        plugins = launch.plugins
        if plugins is None and "config_file" not in {n for n, _, _, _ in launch.options}:
            plugins = frozenset()  # accelerate's own default config decides nothing here (see above)
        if launch.mixed_precision == "fp16" and plugins is not None and (not plugins or (scaler and plugins == {"fsdp"})):
            scaling.append(launch)
        else:
            other.append(launch)
    if not scaling:
        return None
    first = scaling[0]
    if first.precision_from_config:
        assert first.config is not None
        where = (first.config.path, first.config.row("mixed_precision"))
        return ("launched with `mixed_precision: fp16`" if other else None), where
    return ("launched with --mixed_precision fp16" if other else None), (first.path, first.row)


def launched_accelerators(project: "Project", launch: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """The `Accelerator(...)` records (`summary.accelerator_record`) of the script a launch
    command starts and of the project modules it imports: every Accelerator that process may
    build, which takes the launcher's precision and plugins where its call states none."""
    if not project.load_file(launch.script):
        return []
    files = [launch.script, *sorted(_imported_files(project, launch.script).values())]
    out: List[Tuple[str, Dict[str, Any]]] = []
    for path in files:
        for record in (project.summaries.get(path) or {}).get("acc", ()):
            out.append((path, record))
    return out


def _imported_files(project: "Project", script: str) -> Dict[str, str]:
    """The project files a script imports, directly or through the modules it imports: {real
    path: the model's path of it}."""
    memo = project.__dict__.setdefault("_launched_imports", {})
    if script in memo:
        return memo[script]
    seen: Dict[str, str] = {}
    memo[script] = seen
    if not project.load_file(script):
        return seen
    frontier = [script]
    while frontier and len(seen) < _MAX_IMPORT_FILES:
        current = frontier.pop()
        for target in _option_files(project, current)[1:]:
            real = os.path.realpath(target)
            if real not in seen and real != script:
                seen[real] = target
                frontier.append(target)
    return seen


def config_setting(project: "Project", path: str, func: str, spelled: str) -> Optional[Tuple[Optional[str], Tuple[str, int]]]:
    """`config.mixed_precision` read in `func` of `path`, where `config` is a config loaded at run
    time (every binding of it a call: `read_config(args.config)`, `Config.fromfile(path)`; not a
    parameter, not `parse_args()`), and the project's config modules (`summary.config_settings`:
    mmcv / mmengine style Python configs, which the universe holds when a framework's precision
    is set somewhere) set that key to literals, "fp16" among them: (None, where) when every one
    of them says "fp16" (each shipped config runs in fp16), (`the config's mixed_precision is
    fp16`, where) when others say something else (a run-time choice); None when none says fp16,
    one sets it to something not a literal, or `config` is anything else."""
    root, _, key = spelled.partition(".")
    if key not in CONFIG_KEYS:
        return None
    bound = _scope_binding(project, path, func, root)
    if bound is None or not bound[1]:
        return None
    for ref in bound[1]:
        if not ref or "c" not in ref or ref.get("m") or "e0" in ref or ref["c"].rsplit(".", 1)[-1] in ("parse_args", "parse_known_args", "ArgumentParser"):
            return None
    values: List[Tuple[Optional[str], str, int]] = []
    for f, summary in sorted(project.summaries.items()):
        setting = (summary.get("cfg") or {}).get(key)
        if setting is not None:
            values.append((setting[0], f, setting[1]))
    if not values or any(v is None for v, _, _ in values):
        return None
    fp16 = [(f, row) for v, f, row in values if v.strip().lower() == "fp16"]
    if not fp16:
        return None
    choice = None if len(fp16) == len(values) else f"the config's {key} is fp16"
    return choice, fp16[0]


def _may_be_none(project: "Project", path: str, func: str, name: str) -> bool:
    """Whether every binding of `name` in `func` is a call of one project function that may
    return None (a plugin helper that gives nothing unless a flag asks for it)."""
    info = project.function((path, func))
    refs = info["locals"].get(name) if info is not None else None
    if not refs or name in info.get("ue", {}) or name in info["params"]:  # type: ignore[union-attr]
        return False
    for ref in refs:
        if not ref or "c" not in ref or ref.get("m"):
            return False
        functions = [t for t in project.name_types(path, func, ref["c"]) if t[0] == "F"]
        if len(functions) != 1:
            return False
        callee = project.function((functions[0][1], functions[0][2]))
        if callee is None or not callee.get("rn"):
            return False
    return True


def project_option(project: "Project", path: str, dest: str) -> Optional[List[Any]]:
    """[dest, flag, choices, default, row, file] of the argparse option `dest` as the file `path`
    and the project modules it imports directly define it (one set of literal choices), else None."""
    memo = project.__dict__.setdefault("_project_options", {})
    key = (path, dest)
    if key not in memo:
        found: List[List[Any]] = []
        for f in _option_files(project, path):
            if not project.load_file(f):
                continue  # a file with no summary (it failed to read, or is not a project file)
            for option in project.summaries[f].get("opts", ()):
                if option[0] == dest:
                    found.append([*option, f])
        memo[key] = found[0] if found and len({tuple(o[2]) for o in found}) == 1 else None
    return memo[key]


def _option_files(project: "Project", path: str) -> List[str]:
    """`path` and the project modules it imports directly (loaded as needed)."""
    memo = project.__dict__.setdefault("_option_files", {})
    if path in memo:
        return memo[path]
    out = [path]
    seen: Set[str] = {path}
    summary = project.summaries.get(path) or {}
    for level, module, attr in summary.get("imports", {}).values():
        for spelled in ((f"{module}.{attr}" if module else attr) if attr else None, module):
            if not spelled and not level:
                continue
            target = project.module_path(spelled or "", path, level)
            if target is not None:
                if target not in seen:
                    seen.add(target)
                    out.append(target)
                break
    memo[path] = out
    return out


@dataclass(frozen=True)
class Hook:
    """A function registered as a per-parameter gradient hook."""

    path: str
    hook: str  # the hook's qual
    registrar: str  # the qual of the function registering it
    row: int  # the registration's row


def hook_sites(project: "Project", hook: Hook, scaling: Scaling) -> List[Any]:
    """The related sites of a finding in a per-parameter hook (AMP102/AMP104): where the hook is
    registered, the Accelerator that scales the loss, and its precision option when one decides it."""
    sites = [(hook.path, hook.row, "the hook is registered per parameter here"),
             (scaling.path, scaling.row, "the Accelerator that scales the loss")]
    if scaling.option:
        sites.append((scaling.option[0], scaling.option[1], "the precision option"))
    return [project.related(path, row, note) for path, row, note in sites]


def grad_hooks(project: "Project", path: str) -> Iterator[Hook]:
    """The functions `path` registers with `register_post_accumulate_grad_hook`."""
    functions = project.summaries[path]["functions"]
    for qual, info in functions.items():
        for r in info["calls"]:
            if not r["f"] or r["f"].rsplit(".", 1)[-1] not in HOOK_REGISTRATIONS or not r["a"] or not r.get("l"):
                continue  # registered once (not in a loop over the parameters): it runs once per backward
            hook = _hook_function(functions, qual, r["a"][0])
            if hook is not None:
                yield Hook(path, hook, qual, r["r"])


def _hook_function(functions: Dict[str, Any], qual: str, ref: Optional[Dict[str, Any]]) -> Optional[str]:
    """The qual of the function a registration hands over: a name of a `def` nested in `qual`
    (or of the module), or the call of such a factory that returns one of its own nested
    `def`s (`create_grad_hook(group)` returning `grad_hook`)."""
    if not ref or ref.get("m"):
        return None
    spelled = ref.get("n") or ref.get("c")
    if not spelled or "." in spelled:
        return None
    found = next((q for q in ((f"{qual}.{spelled}" if qual != "<module>" else spelled), spelled)
                  if q in functions and q != "<module>"), None)
    if found is None or "n" in ref:
        return found
    factory = functions[found]
    returned = [v.get("n") for v in factory["returns"] if v]
    if factory.get("ro") or len(returned) != 1 or len(factory["returns"]) != 1 or not returned[0]:
        return None
    inner = f"{found}.{returned[0]}"
    return inner if inner in functions else None


def enclosing_calls(project: "Project", path: str, func: str) -> Iterator[Dict[str, Any]]:
    """The call records of `func` and of the functions enclosing it (a nested hook's outer scopes)."""
    scope: Optional[str] = func
    while scope is not None:
        info = project.function((path, scope))
        if info is not None:
            yield from info["calls"]
        scope = (scope.rsplit(".", 1)[0] if "." in scope else None) if scope != "<module>" else None
