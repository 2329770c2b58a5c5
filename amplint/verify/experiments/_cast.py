"""The user's own cast: the statement that made the model fp16 (bf16), run on the lab's tiny model.

`data["cast"]` (added by the parent, `prelude.py`) holds the source of the statement at the
cast site: the finding's own row for AMP201, the rule's `cast_row` for AMP106/AMP401, or the
"made fp16 here" site of a cross-file finding (`model.half()` in a factory,
`convert_weights(model)` in a loader), with the definitions of that file it calls (its
`prelude`: `convert_weights` and the function it applies). The statement runs with its
model-role names (`model`, `net`, `self.model`) bound to one fresh lab model (fp32,
`Linear(8,16) -> ReLU -> Linear(16,4)`); `.cuda()` runs on the lab's device. What the
statement does to that model's parameters is the user's code acting: `convert_weights`
casts only what it casts. A name no role binds (`clip.load`, `Net()`) ends the run as
`CastSkipped("could not bind ...")`: no stand-in ever plays the cast itself.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, List, Tuple

from ..snippet import (
    by_role,
    Missing,
    Refused,
    TrainingSpec,
    Unbindable,
    bind_by_role,
    prepare_training,
    resolve_qualname,
    run_slice,
    slice_globals,
)


class CastSkipped(Exception):
    """The cast statement could not run; the message says why (it becomes the reason)."""


def _target_name(source: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last.targets[0].id
    return ""


def run_cast(lab: Any, data: Dict[str, Any]) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """(the model after the user's cast statement, its fp32 state before it, evidence);
    raises CastSkipped when there is no statement or it could not run (the reason names
    the statement's place)."""
    cast = data.get("cast")
    if not isinstance(cast, dict) or not isinstance(cast.get("source"), str) or not cast["source"].strip():
        raise CastSkipped("no cast statement for this finding")
    try:
        return _run_cast(lab, data, cast)
    except CastSkipped as exc:
        where = f" ({cast['site']})" if cast.get("site") else ""
        low = "bf16" if lab.dtype(data.get("dtype"), default=lab.torch.float16) == lab.torch.bfloat16 else "fp16"
        raise CastSkipped(f"the {low} cast `{cast['source'].strip()[:60]}`{where}: {exc}") from None


def _run_cast(lab: Any, data: Dict[str, Any], cast: Dict[str, Any]) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    torch = lab.torch
    source = cast["source"]
    spec_data = {"names": {}, "prelude": cast.get("prelude"), "prelude_names": cast.get("prelude_names") or []}
    if isinstance(data.get("model"), str):  # the name the finding calls the model (`ema`) is the model
        spec_data["model"] = data["model"]
    try:
        prepared = prepare_training(TrainingSpec(source=source, data=spec_data))
    except Refused as exc:
        raise CastSkipped(f"not run: {exc}") from None
    except (SyntaxError, ValueError) as exc:
        raise CastSkipped(f"the cast statement does not parse: {exc}") from None
    model = lab.model()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    low = lab.dtype(data.get("dtype"), default=torch.float16)
    assumed: Dict[str, Any] = dict(prepared.assumed)

    def value_for(role: str, path: str) -> Any:
        if role == "model":
            return model
        if role.startswith(("module:", "api:")):
            return resolve_qualname(role.split(":", 1)[1])
        if role == "device":
            return lab.device
        if role == "flag":
            assumed[path] = True
            return True
        if role == "dtype":
            assumed[path] = lab.dtype_name(low)
            return low
        return Missing(path)

    env = bind_by_role(prepared.roles, value_for)
    globs = slice_globals(lab, env)
    try:
        error = run_slice(prepared, globs)
    except Unbindable as exc:
        raise CastSkipped(f"could not bind {', '.join(exc.names)}") from None
    if error is not None:
        raise CastSkipped(f"the cast statement raised {type(error).__name__}: {str(error)[:120]}")
    target = _target_name(source)
    result = globs.get(target) if target else None
    if isinstance(result, torch.nn.Module):
        model = result
    if result is not model and not _holds(env, model):
        raise CastSkipped("the cast statement does not use the model")
    params = list(model.parameters())
    dtypes: Dict[str, int] = {}
    for p in params:
        name = lab.dtype_name(p.dtype)
        dtypes[name] = dtypes.get(name, 0) + 1
    ev: Dict[str, Any] = {
        "cast_ran": source.strip()[:200],
        "cast_site": cast.get("site"),
        "parameter_dtypes_after_cast": dtypes,
    }
    if cast.get("prelude_names"):
        ev["ran_the_files_own"] = list(cast["prelude_names"])
    if assumed:
        ev["assumed"] = assumed
    return model, before, ev


def _holds(env: Dict[str, Any], model: Any, depth: int = 0) -> bool:
    """Whether the model was bound somewhere in `env` (also as `self.model`)."""
    for value in env.values():
        if value is model:
            return True
        inner = getattr(value, "__dict__", None)
        if depth < 3 and isinstance(inner, dict) and not isinstance(value, Missing) and _holds(inner, model, depth + 1):
            return True
    return False


def low_precision(lab: Any, model: Any) -> List[Any]:
    torch = lab.torch
    return [p for p in model.parameters() if p.dtype in (torch.float16, torch.bfloat16)]


def _literal_arguments(source: str) -> Tuple[Dict[str, Any], List[str]]:
    """(keyword arguments of the constructor call that are literals, the others' names);
    a literal second positional argument is `lr`."""
    try:
        call = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return {}, []
    if not isinstance(call, ast.Call):
        return {}, []
    out: Dict[str, Any] = {}
    other: List[str] = []
    pairs = [("lr", a) for a in call.args[1:2]] + [(k.arg, k.value) for k in call.keywords if k.arg]
    for name, node in pairs:
        try:
            out[name] = ast.literal_eval(node)
        except ValueError:
            other.append(f"{name}={ast.unparse(node)}")
    return out, other


def users_optimizer(lab: Any, data: Dict[str, Any], model: Any) -> Tuple[Any, Dict[str, Any]]:
    """The finding's optimizer over the cast model: the user's constructor call (`snippet`)
    run as written when every name it uses binds (`model.parameters()`, `filter(...)`), else
    the class it names with the call's literal arguments (the rest at the class defaults,
    said under `assumed`). Raises CastSkipped when neither can be built."""
    import inspect

    torch = lab.torch
    source = data.get("snippet")
    ev: Dict[str, Any] = {}
    if isinstance(source, str) and source.strip():
        try:
            spec_data = {"names": {}, "prelude": data.get("prelude"), "prelude_names": data.get("prelude_names") or []}
            prepared = prepare_training(TrainingSpec(source=f"__amplint_optimizer__ = (\n{source.strip()}\n)", data=spec_data))
            values = {"model": model, "params": list(model.parameters()), "device": lab.device}
            globs = slice_globals(lab, bind_by_role(prepared.roles, by_role(values)))
            error = run_slice(prepared, globs)
            opt = globs.get("__amplint_optimizer__")
            if error is None and isinstance(opt, torch.optim.Optimizer):
                ev["optimizer_ran"] = source.strip()[:200]
                return opt, ev
            ev["constructor_skipped"] = f"raised {type(error).__name__}: {str(error)[:100]}" if error else "not an optimizer"
        except Unbindable as exc:
            ev["constructor_skipped"] = f"could not bind {', '.join(exc.names)}"
        except (Refused, SyntaxError, ValueError) as exc:
            ev["constructor_skipped"] = f"not run: {exc}"
    try:
        cls = lab.optimizer_class(data.get("optimizer_class"))
    except LookupError as exc:
        raise CastSkipped(str(exc)) from None
    kwargs, other = _literal_arguments(source) if isinstance(source, str) else ({}, [])
    accepted = set(inspect.signature(cls.__init__).parameters)
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    opt = cls(model.parameters(), **kwargs)
    ev["optimizer_ran"] = f"{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items()) or 'defaults'})"
    if other:
        ev.setdefault("assumed", {})["optimizer arguments at the class default"] = other
    return opt, ev


def fp32_twin(lab: Any, model: Any, opt: Any) -> Tuple[Any, Any]:
    """A copy of the cast model in fp32 (the same values) and the same optimizer over it
    (same class, same param groups and hyperparameters): the master weights autocast keeps."""
    import copy

    twin = copy.deepcopy(model).float()
    index = {id(p): i for i, p in enumerate(model.parameters())}
    mirror = list(twin.parameters())
    groups = []
    for group in opt.param_groups:
        hyper = {k: v for k, v in group.items() if k != "params"}
        groups.append({**hyper, "params": [mirror[index[id(p)]] for p in group["params"]]})
    return twin, type(opt)(groups)
