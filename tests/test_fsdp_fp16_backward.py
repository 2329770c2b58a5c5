"""AMP105 under an FSDP mixed-precision policy computing in fp16 (issue 23): no autocast, no scaler."""
from __future__ import annotations

import tempfile
from pathlib import Path

from amplint import Config
from amplint.engine.run import lint_paths

FSDP1 = (
    "import torch\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision\n"
    "def train(net, loader):\n"
    "    model = FSDP(net, mixed_precision=MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32))\n"
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "    for x, y in loader:\n"
    "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
    "        loss.backward()\n"
    "        optimizer.step()\n"
)
FSDP2 = (
    "import torch\n"
    "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n"
    "def train(model, loader):\n"
    "    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)\n"
    "    for block in model.blocks:\n"
    "        fully_shard(block, mp_policy=policy)\n"
    "    fully_shard(model, mp_policy=policy)\n"
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "    for x, y in loader:\n"
    "        model(x, y).backward()\n"
    "        optimizer.step()\n"
)


def codes(source, select=("AMP105",)):
    """The findings of a one-file project (AMP105's FSDP half reads the project's scale view)."""
    with tempfile.TemporaryDirectory() as root:
        Path(root, "train.py").write_text(source)
        result = lint_paths([root], Config(select=frozenset(select)))
    return [(d.code, d.location.row, d.help) for d in result.diagnostics]


def test_fsdp1_and_fsdp2_fp16_param_dtype_without_a_scaler():
    ((code, row, help),) = codes(FSDP1)
    assert (code, row) == ("AMP105", 8) and "ShardedGradScaler" in help
    ((code, row, help),) = codes(FSDP2)
    assert (code, row) == ("AMP105", 10) and "torch.amp.GradScaler" in help


def test_one_bug_one_finding_and_the_silent_twins():
    scaled = FSDP1.replace("        loss.backward()\n        optimizer.step()\n",
                           "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n").replace(
        "    optimizer =", "    scaler = torch.amp.GradScaler()\n    optimizer =")
    cases = {
        "bf16": FSDP1.replace("param_dtype=torch.float16", "param_dtype=torch.bfloat16"),
        "runtime": FSDP1.replace("param_dtype=torch.float16", "param_dtype=torch.float16 if fp16 else torch.bfloat16"),
        "reduce only": FSDP1.replace("param_dtype=torch.float16, reduce_dtype=torch.float32", "reduce_dtype=torch.float16"),
        "no policy on one path": FSDP1.replace("mixed_precision=MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)",
                                               "mixed_precision=MixedPrecision(param_dtype=torch.float16) if amp else None"),
        "imported policy": FSDP1.replace("MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)", "policies.fp16_policy"),
        "no update": FSDP1.replace("        optimizer.step()\n", "").replace("    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n", ""),
        # a plain GradScaler on an fp16 FSDP1 model scales the loss: AMP802's bug, not an underflow
        "scaled": scaled,
        "fsdp2 scaled": FSDP2.replace("        model(x, y).backward()\n        optimizer.step()\n",
                                      "        scaler.scale(model(x, y)).backward()\n        scaler.step(optimizer)\n        scaler.update()\n"),
    }
    for name, source in cases.items():
        assert codes(source) == [], name
    assert [c for c, _, _ in codes(scaled, ("AMP105", "AMP802"))] == ["AMP802"]
