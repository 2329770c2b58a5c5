"""AMP401 fp16-checkpoint: round-trip error and overflow of fp16 weights.

Converts a tiny fp32 model's weights to the finding's dtype (fp16 by default),
saves and loads the state_dict in memory, loads it into an fp32 model and
measures what was lost; a probe tensor with values around and above 65504
(large BatchNorm statistics, embeddings) shows the overflow to inf and the
underflow of tiny values.
"""
from __future__ import annotations

import io
import re
from typing import Any, Dict, List

from ._cast import CastSkipped, run_cast
from ._training import fmt

PROBE = [1.0e5, 7.0e4, 65504.0, 1.0, 1.0e-4, 1.0e-8]
#: keys under which a checkpoint keeps weights
_WEIGHTS = re.compile(r"(^|\W|_)(model|state_dict|weights?|params?|parameters|master|ema|net)(\W|_|$)", re.IGNORECASE)


def _plain(obj: Any, dropped: List[str], path: str = "", depth: int = 0) -> Any:
    """`obj` with the values the code could not compute (unbound names, opaque stand-ins)
    replaced by None, so it pickles as `torch.save` would write the rest."""
    from ..snippet import Missing
    from .amp402 import _Unknown

    if isinstance(obj, (Missing, _Unknown)):
        dropped.append(path or "the object")
        return None
    import torch

    if isinstance(obj, torch.nn.Module):  # a whole module pickled: its weights are its state_dict
        dropped.append(f"{path or 'the object'}: a module, saved as its state_dict")
        return obj.state_dict()
    if depth < 6 and isinstance(obj, dict):
        return type(obj)((k, _plain(v, dropped, f"{path}[{k!r}]", depth + 1)) for k, v in obj.items()) if not hasattr(obj, "_metadata") else obj
    if depth < 6 and isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v, dropped, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj))
    return obj


def _tensors(obj: Any, out: Dict[str, Any], path: str = "", depth: int = 0) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        out[path] = obj
    elif depth < 6 and isinstance(obj, dict):
        for k, v in obj.items():
            _tensors(v, out, f"{path}.{k}" if path else str(k), depth + 1)
    elif depth < 6 and isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors(v, out, f"{path}[{i}]", depth + 1)


def _users_checkpoint(lab: Any, data: Dict[str, Any]) -> Dict[str, Any]:
    """The user's cast on the tiny model, the object the user's `torch.save(obj, ...)` writes
    built on it (and the statements of the file that build it), saved to a file in the
    finding's own folder and loaded back with `weights_only=True`: the dtypes it holds."""
    import os

    from .amp402 import saved_object

    torch = lab.torch
    model, before, ev = run_cast(lab, data)
    opt = lab.optimizer(model.parameters(), "SGD", lr=1e-3)
    obj, why = saved_object(lab, data, model, opt, lab.scaler(), per_key=True)
    if obj is None:
        raise CastSkipped(why or "no `torch.save` call to run for this finding")
    dropped: List[str] = []
    plain = _plain(obj, dropped)
    path = os.path.abspath("amplint-checkpoint.pt")
    torch.save(plain, path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - an object weights_only refuses: no dtype read
        raise CastSkipped(f"what the save writes could not be read back with weights_only=True: {type(exc).__name__}") from None
    finally:
        size = os.path.getsize(path)
        os.remove(path)
    tensors: Dict[str, Any] = {}
    _tensors(loaded, tensors)
    floating = {k: t for k, t in tensors.items() if t.is_floating_point()}
    by_dtype: Dict[str, int] = {}
    for t in floating.values():
        name = lab.dtype_name(t.dtype)
        by_dtype[name] = by_dtype.get(name, 0) + t.numel()
    low = {k: t for k, t in floating.items() if t.dtype in (torch.float16, torch.bfloat16)}
    # each low-precision tensor against the fp32 weight of the same name before the cast
    originals = {k: v for k, v in before.items()}
    changed = compared = 0
    max_rel = 0.0
    for key, t in low.items():
        ref = next((v for name, v in originals.items() if key == name or key.endswith("." + name)), None)
        if ref is None or ref.shape != t.shape:
            continue
        diff = (t.float().to(ref.device) - ref).abs()
        changed += int((diff > 0).sum())
        compared += ref.numel()
        max_rel = max(max_rel, float((diff / ref.abs().clamp_min(1e-12)).max()))
    ev.update(
        {
            "checkpoint_bytes": size,
            "checkpoint_tensors": len(tensors),
            "floating_values_by_dtype": by_dtype,
            "low_precision_tensors": sorted(low)[:12],
            "values_compared_with_fp32_weights": compared,
            "values_changed": changed,
            "max_rel_error": lab.num(max_rel, 4),
        }
    )
    if dropped:
        ev["not_saved_as_written"] = dropped[:8]  # values the code could not compute (None), modules (their state_dict)
    made = f"`{ev['cast_ran'][:50]}`" + (f" ({ev['cast_site']})" if ev.get("cast_site") else "")
    weights = [p for p in dropped if ": a module" not in p and _WEIGHTS.search(p)]
    if weights and not low:  # a value that may be the fp32 weights could not be computed: no verdict
        raise CastSkipped(f"could not compute {', '.join(weights[:3])}, which may hold the weights")
    if low:
        dtype = next(iter(low.values())).dtype
        name = lab.dtype_name(dtype)
        lost = f"; {changed}/{compared} of them differ from the fp32 weights before the cast (max relative error {fmt(max_rel)})" if compared else ""
        return lab.confirmed(
            f"after {made}, the checkpoint this code saves, loaded back, holds {by_dtype.get(name, 0)} {name} values "
            f"in {len(low)} tensors{lost}",
            ev, method="snippet", dtype=dtype,
        )
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(by_dtype.items())) or "no floating tensors"
    return lab.not_reproduced(f"after {made}, the checkpoint this code saves holds fp32 weights only ({kinds} values)", ev, method="snippet")


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    skipped = None
    if data.get("cast"):
        try:
            return _users_checkpoint(lab, data)
        except CastSkipped as exc:
            skipped = str(exc)
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    original = lab.model()
    reference = {k: v.detach().clone() for k, v in original.state_dict().items()}
    low = lab.model()
    low.load_state_dict(reference)
    low.to(dtype)
    buffer = io.BytesIO()
    torch.save(low.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=lab.device)
    restored = lab.model(seed=lab.seed + 1)
    restored.load_state_dict(loaded)
    max_abs = max_rel = 0.0
    changed = total = 0
    for k, ref in reference.items():
        got = restored.state_dict()[k]
        diff = (got - ref).abs()
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / ref.abs().clamp_min(1e-12)).max()))
        changed += int((diff > 0).sum())
        total += ref.numel()
    probe = torch.tensor(PROBE, dtype=torch.float32)
    cast = probe.to(dtype).float()
    name = lab.dtype_name(dtype)
    ev = {
        "saved_dtype": name,
        "weights": total,
        "weights_changed": changed,
        "max_abs_error": lab.num(max_abs, 4),
        "max_rel_error": lab.num(max_rel, 4),
        "probe": PROBE,
        "probe_after_round_trip": [lab.num(v, 6) for v in cast.tolist()],
        "probe_overflowed_to_inf": int(cast.isinf().sum()),
        "probe_flushed_to_zero": int(((cast == 0) & (probe != 0)).sum()),
    }
    if skipped:
        ev["snippet_skipped"] = skipped
    if changed or ev["probe_overflowed_to_inf"]:
        return lab.confirmed(
            f"a {name} checkpoint loaded back into fp32 differs in {changed}/{total} weights (max relative error {fmt(max_rel)}); "
            f"values {PROBE[0]:g} and {PROBE[1]:g} became {ev['probe_after_round_trip'][0]} and {ev['probe_after_round_trip'][1]}, "
            f"{PROBE[-1]:g} became {ev['probe_after_round_trip'][-1]}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(f"the {name} checkpoint round-tripped exactly ({total} weights)", ev, dtype=dtype)
