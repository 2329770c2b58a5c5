"""AMP401 fp16-checkpoint: round-trip error and overflow of fp16 weights.

Converts a tiny fp32 model's weights to the finding's dtype (fp16 by default),
saves and loads the state_dict in memory, loads it into an fp32 model and
measures what was lost; a probe tensor with values around and above 65504
(large BatchNorm statistics, embeddings) shows the overflow to inf and the
underflow of tiny values.
"""
from __future__ import annotations

import io
from typing import Any, Dict

from ._training import fmt

PROBE = [1.0e5, 7.0e4, 65504.0, 1.0, 1.0e-4, 1.0e-8]


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
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
    if changed or ev["probe_overflowed_to_inf"]:
        return lab.confirmed(
            f"a {name} checkpoint loaded back into fp32 differs in {changed}/{total} weights (max relative error {fmt(max_rel)}); "
            f"values {PROBE[0]:g} and {PROBE[1]:g} became {ev['probe_after_round_trip'][0]} and {ev['probe_after_round_trip'][1]}, "
            f"{PROBE[-1]:g} became {ev['probe_after_round_trip'][-1]}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(f"the {name} checkpoint round-tripped exactly ({total} weights)", ev, dtype=dtype)
