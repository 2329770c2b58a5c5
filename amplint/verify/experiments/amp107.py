"""AMP107 scaler-recreated-per-epoch: the learned scale resets, overflowing steps are skipped again.

Two short "epochs" of a tiny model under autocast (the finding's dtype, fp16 by
default) with a loss whose gradients overflow fp16 at scale 65536: once with
one GradScaler for both epochs, once with a fresh GradScaler per epoch; reports
the optimizer steps skipped in the second epoch.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import fmt
from .amp402 import _train

STEPS = 10


CALLS = 2


def _users_epochs(lab: Any, data: Dict[str, Any], x: Any, dtype: Any) -> Dict[str, Any]:
    """The user's function that builds the GradScaler (`epoch_function`), called twice as its
    caller calls it once per epoch, on the tiny model with a loader of STEPS batches whose
    gradients overflow fp16 at 65536: every GradScaler it builds is recorded (its scale after
    each `update()`). A new scaler per call that starts again at 65536 after the first had
    backed off is the finding; one scaler across the calls is not. Raises LookupError with
    the reason when the function cannot run."""
    import ast

    from ..snippet import (
        Batch, Refused, TrainingSpec, Unbindable, _tiny_model_wrapper, bind_by_role, by_role, prepare_training,
        run_slice, slice_globals,
    )

    torch = lab.torch
    epoch = data["epoch_function"]
    func = str(epoch.get("function") or "")
    try:
        tree = ast.parse(epoch.get("source") or "")
    except SyntaxError:
        raise LookupError("the function does not parse") from None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    if not defs:
        raise LookupError("no function to run")
    args = defs[0].args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    required = positional[: len(positional) - len(args.defaults)]
    if required[:1] in (["self"], ["cls"]):
        raise LookupError(f"`{func}` is a method; only functions are run")
    switch = data.get("switch")  # `if amp:` around the constructor: the function is called with its AMP switch on
    keywords = [a.arg for a in args.kwonlyargs]
    on = [f"{switch}=True"] if isinstance(switch, str) and switch in [*positional, *keywords] and switch not in required else []
    call = f"{func}({', '.join([*required, *on])})"
    source = ast.unparse(tree) + "\n" + "\n".join([call] * CALLS)
    try:
        spec_data = {"names": {}, "prelude": epoch.get("prelude"), "prelude_names": epoch.get("prelude_names") or []}
        prepared = prepare_training(TrainingSpec(source=source, data=spec_data))
    except Refused as exc:
        raise LookupError(f"not run: {exc}") from None
    scalers: list = []
    base = torch.amp.GradScaler

    class Recorded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.history = [lab.num(self.get_scale())]
            scalers.append(self)

        def update(self, *a: Any, **k: Any) -> None:
            super().update(*a, **k)
            self.history.append(lab.num(self.get_scale()))

    net = lab.model()
    criterion = lambda out, y: out.float().pow(2).sum()  # noqa: E731 - a loss whose gradients overflow at 65536
    model = _tiny_model_wrapper(torch)(net, criterion)
    opt = lab.optimizer(net.parameters(), "SGD", lr=1e-5)
    y = torch.zeros(x.shape[0], lab.OUT, device=lab.device)
    loader = [Batch((x, y)) for _ in range(STEPS)]
    values = {"model": model, "optimizer": opt, "loader": loader, "criterion": criterion, "device": lab.device, "flag": True,
              "index": 0, "dtype": dtype}
    values["scaler"] = Recorded(lab.device_type)  # a scaler handed in by the caller: one for every call
    globs = slice_globals(lab, bind_by_role(prepared.roles, by_role(values)))
    saved = [(mod, getattr(mod, "GradScaler")) for mod in (torch.amp, torch, torch.cuda.amp, torch.cpu.amp) if hasattr(mod, "GradScaler")]
    try:
        for mod, _ in saved:
            mod.GradScaler = Recorded
        error = run_slice(prepared, globs)
    except Unbindable as exc:
        raise LookupError(f"could not bind {', '.join(exc.names)}") from None
    finally:
        for mod, original in saved:
            mod.GradScaler = original
    if error is not None:
        raise LookupError(f"`{func}` raised {type(error).__name__}: {str(error)[:120]}")
    scalers = [s for s in scalers if len(s.history) > 1]  # the scalers the calls stepped
    if not scalers:
        raise LookupError(f"`{func}` updated no GradScaler")
    return {"ran": f"{call} x{CALLS}", "site": epoch.get("site"), "scalers_built": len(scalers),
            "scale_histories": [s.history for s in scalers[:4]], "device": scalers[0]._device}


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    g = torch.Generator().manual_seed(lab.seed)
    x = (torch.randn(64, lab.IN, generator=g) * 4.0).to(lab.device)
    users, skipped = None, None
    if isinstance(data.get("epoch_function"), dict):
        try:
            users = _users_epochs(lab, data, x, dtype)
        except LookupError as exc:
            skipped = str(exc)

    def two_epochs(fresh: bool):
        model = lab.model()
        opt = lab.optimizer(model.parameters(), "SGD", lr=1e-5)
        scaler = lab.scaler()
        first, _ = _train(lab, model, opt, scaler, x, dtype, STEPS)
        if fresh:
            scaler = lab.scaler()
        second, history = _train(lab, model, opt, scaler, x, dtype, STEPS)
        return first, second, history

    _, kept, kept_history = two_epochs(False)
    first, fresh, fresh_history = two_epochs(True)
    name = lab.dtype_name(dtype)
    ev = {
        "steps_per_epoch": STEPS,
        "skipped_epoch1": first,
        "skipped_epoch2_fresh_scaler": fresh,
        "skipped_epoch2_one_scaler": kept,
        "scale_history_epoch2_fresh": fresh_history,
        "scale_history_epoch2_one_scaler": kept_history,
    }
    if skipped:
        ev["snippet_skipped"] = skipped
    if users is not None:
        ev.update(users_code=users)
        histories = users["scale_histories"]
        where = f"`{users['ran'].split('(')[0]}`" + (f" ({users['site']})" if users.get("site") else "")
        if users["scalers_built"] >= CALLS:
            second = histories[1]
            backed = [h for h in histories[:1] if h and min(h) < h[0]]
            skips = sum(1 for a, b in zip(second, second[1:]) if b < a)
            return lab.confirmed(
                f"{where}, called once per epoch, stepped {users['scalers_built']} GradScalers: the second started at "
                f"{fmt(second[0])} again{' after the first had backed off to ' + fmt(min(backed[0])) if backed else ''}, "
                f"and skipped {skips} of its {STEPS} steps re-learning the scale (one scaler kept across epochs: {kept})",
                ev, method="snippet", dtype=dtype,
            )
        return lab.not_reproduced(
            f"{where}, called {CALLS} times, stepped one GradScaler: its scale carries over between epochs",
            ev, method="snippet", dtype=dtype,
        )
    if fresh > kept:
        return lab.confirmed(
            f"{name}: a GradScaler recreated for epoch 2 restarted at 65536 and skipped {fresh} of {STEPS} steps "
            f"(settling at {fmt(fresh_history[-1])}); one scaler kept across epochs skipped {kept}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"{name}: epoch 2 skipped {fresh} steps with a fresh scaler and {kept} with one scaler (no overflow at 65536 here)", ev, dtype=dtype
    )
