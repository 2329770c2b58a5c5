"""AMP402 scaler-state-not-checkpointed: skipped steps after a resume that resets the scale.

Trains a tiny model under autocast (the finding's dtype, fp16 by default) with
a loss large enough that 65536 overflows fp16 gradients, until the GradScaler
has backed off to a scale that fits; then "resumes" twice from that point, once
with a fresh GradScaler (the checkpoint lacked `scaler.state_dict()`) and once
with the saved state loaded, counting the optimizer steps skipped after the
resume.

The user's own code: for a checkpoint that is saved (`side: "save"`), the
object the flagged `torch.save(...)` writes is built by running the user's
expression (and the statements of the same file that build it, the prelude)
on the warmed-up lab model, optimizer and scaler. The verdict is about that
object: `confirmed` when it holds no GradScaler state (a resume from it is the
fresh-scaler resume measured here), `not-reproduced` when it does. A resume
(`side: "load"`) is not run: its verdict is the reference experiment's, kept
apart as `reference`.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Tuple

from ..snippet import Refused, TrainingSpec, Unbindable, Unbound, bind_by_role, by_role, check_safe, parse, prepare_training, role_of, with_prelude
from ._training import fmt

WARMUP, AFTER = 10, 10


def _train(lab: Any, model: Any, opt: Any, scaler: Any, x: Any, dtype: Any, steps: int) -> Tuple[int, List[float]]:
    skipped = 0
    history: List[float] = []
    for _ in range(steps):
        opt.zero_grad()
        with lab.autocast(dtype):
            loss = model(x).float().pow(2).sum()
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        after = scaler.get_scale()
        if after < before:
            skipped += 1
        history.append(lab.num(after))
    return skipped, history


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    g = torch.Generator().manual_seed(lab.seed)
    x = (torch.randn(64, lab.IN, generator=g) * 4.0).to(lab.device)
    model = lab.model()
    opt = lab.optimizer(model.parameters(), "SGD", lr=1e-5)
    scaler = lab.scaler()
    warm_skipped, warm_history = _train(lab, model, opt, scaler, x, dtype, WARMUP)
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = opt.state_dict()
    scaler_state = scaler.state_dict()

    def resume(load_scaler: bool) -> Tuple[int, List[float]]:
        m = lab.model()
        m.load_state_dict(model_state)
        o = lab.optimizer(m.parameters(), "SGD", lr=1e-5)
        o.load_state_dict(opt_state)
        s = lab.scaler()
        if load_scaler:
            s.load_state_dict(scaler_state)
        return _train(lab, m, o, s, x, dtype, AFTER)

    fresh_skipped, fresh_history = resume(False)
    kept_skipped, kept_history = resume(True)
    name = lab.dtype_name(dtype)
    checkpoint, why = _users_checkpoint(lab, data, model, opt, scaler)
    ev = {
        "warmup_steps": WARMUP,
        "warmup_skipped": warm_skipped,
        "scale_at_checkpoint": lab.num(scaler_state.get("scale")),
        "steps_after_resume": AFTER,
        "skipped_after_resume_fresh_scaler": fresh_skipped,
        "skipped_after_resume_restored_scaler": kept_skipped,
        "scale_history_fresh": fresh_history,
        "scale_history_restored": kept_history,
    }
    if checkpoint is not None:
        return _judge_checkpoint(lab, checkpoint, scaler, ev, name, dtype)
    if data.get("side") == "load" and isinstance(data.get("resume"), dict):
        state = {"model": model_state, "optimizer": opt_state, "scaler": scaler_state}
        judged, why_not = _users_resume(lab, data["resume"], state, ev, name, dtype)
        if judged is not None:
            return judged
        why = why_not or why
    if why:
        ev["snippet_skipped"] = why
    if fresh_skipped > kept_skipped:
        return lab.confirmed(
            f"{name}: resuming with a fresh GradScaler (scale 65536) skipped {fresh_skipped} of the next {AFTER} optimizer steps "
            f"re-learning the scale the checkpoint had ({fmt(ev['scale_at_checkpoint'])}); restoring scaler.state_dict() skipped {kept_skipped}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"{name}: a fresh GradScaler after the resume skipped {fresh_skipped} steps, the restored one {kept_skipped} "
        f"(no overflow at scale 65536 here)",
        ev,
        dtype=dtype,
    )


def _saved_expression(source: Any) -> Optional[ast.Module]:
    """The object a `torch.save(obj, path)` call writes, as an expression statement."""
    tree = parse(source)
    call = tree.body[0].value if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Attribute, ast.Name)):
        return None
    func = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
    if func != "save":
        return None
    obj = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "obj"), None)
    return ast.Module(body=[ast.Expr(obj)], type_ignores=[]) if obj is not None else None


def _users_checkpoint(lab: Any, data: Dict[str, Any], model: Any, opt: Any, scaler: Any) -> Tuple[Any, Optional[str]]:
    """(the object the user's save call writes, None) or (None, why it could not be built)."""
    if data.get("side") != "save":
        return None, "the flagged code resumes a checkpoint; only the saving side is run" if data.get("side") == "load" else None
    return saved_object(lab, data, model, opt, scaler)


def _per_key(expr: ast.Module) -> ast.Module:
    """A saved dict literal whose values are computed one by one: a value the code refuses to
    run (`vars(args)`) or that fails or uses an unbound name becomes `Missing` under its key,
    and the rest of the dict is still built (AMP401 reads the tensors' dtypes)."""
    value = expr.body[0].value if expr.body and isinstance(expr.body[0], ast.Expr) else None
    if not isinstance(value, ast.Dict):
        return expr
    values = []
    for key, v in zip(value.keys, value.values):
        label = ast.Constant(ast.unparse(key) if key is not None else "**")
        try:
            check_safe(v)
        except Refused:
            values.append(ast.Call(func=ast.Name("__amplint_missing__", ast.Load()), args=[label], keywords=[]))
            continue
        thunk = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), body=v)
        values.append(ast.Call(func=ast.Name("__amplint_try__", ast.Load()), args=[thunk, label], keywords=[]))
    out = ast.Dict(keys=value.keys, values=values)
    return ast.fix_missing_locations(ast.Module(body=[ast.Expr(out)], type_ignores=[]))


def _try(thunk: Any, label: str) -> Any:
    from ..snippet import Missing

    try:
        return thunk()
    except (Exception, Unbound):  # noqa: BLE001 - a value the code could not compute: Missing, not a verdict
        return Missing(label)


def saved_object(lab: Any, data: Dict[str, Any], model: Any, opt: Any, scaler: Any, per_key: bool = False) -> Tuple[Any, Optional[str]]:
    """(the object the flagged `torch.save(obj, ...)` writes, built by the user's expression and
    its prelude on these objects, None) or (None, why it could not be built). Also AMP401's
    (`per_key`: a dict literal's values computed one by one, see `_per_key`)."""
    if not isinstance(data.get("snippet"), str) or not data["snippet"].strip():
        return None, None  # no flagged call to run (e.g. the save is in a helper)
    try:
        expr = _saved_expression(data.get("snippet"))
        if expr is None:
            return None, "the flagged call is not a save of one object"
        if per_key:
            expr = _per_key(expr)
        check_safe(expr)
        tree, _ = with_prelude(expr, data)
        prepared = prepare_training(TrainingSpec(source=ast.unparse(tree), data=dict(data, names={})))
    except Refused as exc:
        return None, f"not run: {exc}"
    torch = lab.torch
    x, y = lab.batch(0)
    values = {
        "model": model, "optimizer": opt, "scaler": scaler, "index": 1, "accum": lab.ACCUM, "flag": True, "device": lab.device,
        "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0), "criterion": torch.nn.MSELoss(),
        "params": list(model.parameters()), "x": x, "y": y, "loss": _loss(torch, model, x, y),
        "threshold": 1.0, "dtype": torch.float16,
    }

    env = bind_by_role(prepared.roles, by_role(values, _Unknown))
    body = prepared.tree.body
    last = body[-1]
    if not isinstance(last, ast.Expr):
        return None, "the flagged call is not a save of one object"
    holder = ast.Assign(targets=[ast.Name("__amplint_saved__", ast.Store())], value=last.value)
    module = ast.fix_missing_locations(ast.Module(body=[*body[:-1], ast.copy_location(holder, last)], type_ignores=[]))
    from ..snippet import _SAFE_BUILTINS, RUNTIME_NAMES

    globs: Dict[str, Any] = {"__builtins__": _SAFE_BUILTINS, **RUNTIME_NAMES, "__amplint_try__": _try, **env}
    try:
        exec(compile(module, "<flagged code>", "exec"), globs)  # noqa: S102 - the user's own checkpoint expression
    except Unbound as exc:
        return None, f"could not bind {', '.join(Unbindable(exc.names).names)}"
    except Exception as exc:  # noqa: BLE001
        return None, f"the flagged code raised {type(exc).__name__}: {str(exc)[:120]}"
    return globs.get("__amplint_saved__"), None


def _loss(torch: Any, model: Any, x: Any, y: Any) -> Any:
    """The tiny model's loss on a batch, in the parameters' dtype (an fp16 model: an fp16 batch)."""
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        return torch.nn.MSELoss()(model(x.to(dtype)).float(), y)


class _LoadToCheckpoint(ast.NodeTransformer):
    """`torch.load(...)` in the user's resume -> `__amplint_checkpoint__(...)`: the checkpoint
    the lab's training wrote, in memory. No file is read; every other `.load` stays refused."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "torch":
            return ast.copy_location(ast.Call(func=ast.Name("__amplint_checkpoint__", ast.Load()), args=node.args, keywords=node.keywords), node)
        return node


class _Checkpoint(dict):
    """What the lab's run saved: model, optimizer, GradScaler and scheduler state, an epoch.
    A key the resume reads under another spelling is found by what it names."""

    def __missing__(self, key: Any) -> Any:
        k = str(key).lower()
        for words, value in ((("scal", "amp"), "scaler"), (("optim", "opt"), "optimizer"), (("sched",), "lr_scheduler"),
                             (("model", "net", "state_dict", "weights"), "model"), (("epoch", "step", "iter"), "epoch")):
            if any(w in k for w in words) and value in self:
                return dict.__getitem__(self, value)
        raise KeyError(key)


def _users_resume(lab: Any, resume: Dict[str, Any], state: Dict[str, Any], ev: Dict[str, Any], name: str, dtype: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The user's resume function called on a fresh model, optimizer and GradScaler with the
    checkpoint the warmed-up run wrote (its scaler state included): did it restore the scale?"""
    torch = lab.torch
    func = str(resume.get("function") or "")
    try:
        tree = ast.parse(resume.get("source") or "")
    except SyntaxError:
        return None, "the resume function does not parse"
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    if not defs:
        return None, "no resume function to run"
    args = defs[0].args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    required = positional[: len(positional) - len(args.defaults)]
    if required[:1] in (["self"], ["cls"]):
        return None, f"`{func}` is a method; only functions are run"
    tree = _LoadToCheckpoint().visit(tree)
    # the call as the flagged code writes it (a helper's caller), else the required parameters
    # plus the optional ones a lab object can fill (`scaler=None`): every chance to restore it
    optional = [a for a in positional[len(required):] + [k.arg for k in args.kwonlyargs]
                if role_of(a, {}) in ("model", "optimizer", "scaler", "scheduler")]
    written = resume.get("call") if isinstance(resume.get("call"), str) and resume["call"].strip() else None
    shown = written or f"{func}({', '.join(required + [f'{a}={a}' for a in optional])})"
    call = f"__amplint_result__ = {shown}"
    source = ast.unparse(ast.fix_missing_locations(tree)) + "\n" + call
    try:
        spec_data = {"names": {}, "prelude": resume.get("prelude"), "prelude_names": resume.get("prelude_names") or []}
        prepared = prepare_training(TrainingSpec(source=source, data=spec_data))
    except Refused as exc:
        return None, f"not run: {exc}"
    from ..snippet import run_slice, slice_globals

    model = lab.model(seed=lab.seed + 1)
    opt = lab.optimizer(model.parameters(), "SGD", lr=1e-5)
    scaler = lab.scaler()
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0)
    checkpoint = _Checkpoint(state, lr_scheduler=scheduler.state_dict(), epoch=3)
    values = {"model": model, "optimizer": opt, "scaler": scaler, "scheduler": scheduler, "device": lab.device, "flag": True}
    value_for = by_role(values)  # anything else (the file's path) is only handed to the checkpoint stand-in

    env = bind_by_role(prepared.roles, value_for)
    env["__amplint_checkpoint__"] = lambda *a, **k: checkpoint
    globs = slice_globals(lab, env)
    try:
        error = run_slice(prepared, globs)
    except Unbindable as exc:
        return None, f"could not bind {', '.join(exc.names)}"
    if error is not None:
        return None, f"the resume raised {type(error).__name__}: {str(error)[:120]}"
    restored = all(torch.equal(v, state["model"][k]) for k, v in model.state_dict().items())
    saved_scale, now = lab.num(state["scaler"].get("scale")), lab.num(scaler.get_scale())
    ev.update(resume_ran=shown[:200], resume_site=resume.get("site"), model_restored=restored,
              scale_in_checkpoint=saved_scale, scale_after_resume=now)
    if not restored:
        return None, f"`{func}` did not restore the model from the checkpoint either"
    skipped, kept, after = ev["skipped_after_resume_fresh_scaler"], ev["skipped_after_resume_restored_scaler"], ev["steps_after_resume"]
    where = f"`{func}`" + (f" ({resume['site']})" if resume.get("site") else "")
    if now == saved_scale:
        return lab.not_reproduced(f"the resume this code runs, {where}, restored the GradScaler's scale ({fmt(now)})", ev, method="snippet", dtype=dtype), None
    return lab.confirmed(
        f"the resume this code runs, {where}, restored the model but left the GradScaler at {fmt(now)} (the checkpoint held "
        f"{fmt(saved_scale)}): the next {after} {name} steps skipped {skipped} (restored scale: {kept})",
        ev, method="snippet", dtype=dtype,
    ), None


class _Unknown:
    """A name with a lab role that has no object here (a loader, a criterion): kept as an opaque value."""

    def __init__(self, path: str) -> None:
        self.path = path


_SCALER_WORDS = ("scal", "amp")


def _unknown_scaler_parts(obj: Any, key: str = "", depth: int = 0) -> List[str]:
    """Values the code could not compute (unbound names) that may be the scaler state."""
    from ..snippet import Missing

    if isinstance(obj, (Missing, _Unknown)):
        path = object.__getattribute__(obj, "_name") if isinstance(obj, Missing) else obj.path
        return [path] if any(w in (key + " " + path).lower() for w in _SCALER_WORDS) else []
    out: List[str] = []
    if depth < 4 and isinstance(obj, dict):
        for k, v in obj.items():
            out += _unknown_scaler_parts(v, str(k), depth + 1)
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for v in obj:
            out += _unknown_scaler_parts(v, key, depth + 1)
    return out


def _holds_scaler_state(obj: Any, scaler: Any, depth: int = 0) -> bool:
    if obj is scaler:
        return True
    if isinstance(obj, dict):
        if {"scale", "growth_factor", "backoff_factor"} <= set(obj):
            return True
        return depth < 4 and any(_holds_scaler_state(v, scaler, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return depth < 4 and any(_holds_scaler_state(v, scaler, depth + 1) for v in obj)
    return False


def _judge_checkpoint(lab: Any, checkpoint: Any, scaler: Any, ev: Dict[str, Any], name: str, dtype: Any) -> Dict[str, Any]:
    keys = sorted(str(k) for k in checkpoint) if isinstance(checkpoint, dict) else [type(checkpoint).__name__]
    ev["checkpoint_keys"] = keys[:20]
    skipped, kept, after = ev["skipped_after_resume_fresh_scaler"], ev["skipped_after_resume_restored_scaler"], ev["steps_after_resume"]
    if _holds_scaler_state(checkpoint, scaler):
        ev["checkpoint_holds_scaler_state"] = True
        return lab.not_reproduced(f"the checkpoint this code saves holds the GradScaler state (keys: {', '.join(keys[:8])})", ev, method="snippet", dtype=dtype)
    unknown = _unknown_scaler_parts(checkpoint)
    if unknown:  # e.g. `"amp": amp_state` from a helper: it may be the scaler's state
        ev["snippet_skipped"] = f"could not bind {', '.join(sorted(set(unknown)))}"
        return lab.inconclusive(f"could not run this code: {', '.join(sorted(set(unknown)))}", ev, dtype=dtype)
    ev["checkpoint_holds_scaler_state"] = False
    return lab.confirmed(
        f"the checkpoint this code saves ({', '.join(keys[:8])}) has no GradScaler state: resuming from it starts a fresh "
        f"scaler at 65536, which here skipped {skipped} of the next {after} {name} steps (restored state: {kept})",
        ev,
        method="snippet",
        dtype=dtype,
    )
