"""AMP802 fsdp-needs-sharded-scaler: no verdict without an accelerator, and the finding says why.

The flagged GradScaler steps an FSDP1 (`FullyShardedDataParallel`) model, and FSDP1 raises on a
machine without an accelerator ("FSDP needs a non-CPU accelerator device", torch 2.13), so the
user's step cannot run on the CPU ranks the sandbox offers (docs/verifier.md, "2 ranks"). What
the rule claims (ranks decide inf/NaN on their own shards and disagree on the skipped step) is
measured on 2 gloo processes with a stand-in for FSDP1's sharding: docs/evidence.md#amp802,
`_distributed.py` (`scaler`).
"""
from __future__ import annotations

from typing import Any, Dict

from ._distributed import fsdp1_reason


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    import torch

    return lab.inconclusive(fsdp1_reason(torch), {"wrapper": data.get("wrapper"), "scaler_class": data.get("scaler_class")})
