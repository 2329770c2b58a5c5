"""docs/evidence.md's AMP801-AMP803 sections, measured on a real distributed engine: torch.distributed with
gloo, 2 processes on CPU (amplint/verify/experiments/_distributed.py). One process group runs all three
measurements (the fixture); each test checks what its rule claims on the numbers it returned.

FSDP1 raises on a machine without an accelerator, so its sharding is a stand-in (a flat parameter split
in two contiguous shards, torch's own scalers and clip); FSDP2 (`fully_shard`), DDP and the
fp16_compress_hook are the real ones."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("SKIPPED LOUDLY: this torch has no gloo backend", allow_module_level=True)

from amplint.verify.experiments import _distributed  # noqa: E402


@pytest.fixture(scope="module")
def measured():
    return _distributed.measure(["clip", "scaler", "reduce"])


def _ranks(result):
    return [result["rank0"], result["rank1"]]


def test_fsdp1_cannot_run_here_and_says_why(measured):
    for rank in _ranks(measured["clip"]):
        if rank["fsdp1"] is not None:  # a build where FSDP1 wraps on CPU would be measured for real instead
            assert "accelerator" in rank["fsdp1"]


def test_amp801_a_shard_clips_by_its_local_norm(measured):
    r0, r1 = _ranks(measured["clip"])
    true = r0["true_norm"]
    assert math.isclose(math.hypot(r0["local_norm"], r1["local_norm"]), true, rel_tol=1e-5)
    assert math.isclose(r0["global_norm"], true, rel_tol=1e-5)  # what FSDP1's own clip_grad_norm_ all-reduces
    assert r0["local_norm"] < true / 4  # rank 0's shard is one layer's weight only
    assert r0["applied_factor"] == 1.0 and r0["correct_factor"] < 0.5  # rank 0 never clips
    assert not math.isclose(r1["applied_factor"], r1["correct_factor"], rel_tol=1e-3)
    for rank in (r0, r1):  # FSDP2: torch's clip reduces the DTensor norms across the mesh
        assert math.isclose(rank["fsdp2_norm"], true, rel_tol=1e-5)


def test_amp802_a_plain_scaler_lets_the_ranks_disagree(measured):
    r0, r1 = _ranks(measured["scaler"])
    p0, p1 = r0["stand_in_plain"], r1["stand_in_plain"]
    assert p0["nonfinite_params"] == p1["nonfinite_params"] == ["2.weight", "2.bias"]
    assert p0["shard_nonfinite"] == 0 and p1["shard_nonfinite"] > 0  # the overflow is in rank 1's shard
    assert (p0["found_inf"], p0["stepped"], p0["scale_after"]) == (0.0, True, 65536.0)
    assert (p1["found_inf"], p1["stepped"], p1["scale_after"]) == (1.0, False, 32768.0)
    for rank in (r0, r1):
        s = rank["stand_in_sharded"]  # ShardedGradScaler all-reduces found_inf: both skip
        assert (s["found_inf"], s["stepped"], s["scale_after"]) == (1.0, False, 32768.0)
    f0, f1 = r0["fsdp2_plain"], r1["fsdp2_plain"]  # FSDP2: the plain scaler agrees across ranks
    assert f0["local_nonfinite"] == 0 and f1["local_nonfinite"] > 0
    for f in (f0, f1):
        assert (f["found_inf"], f["stepped"], f["scale_after"]) == (1.0, False, 32768.0)


def test_amp803_gradients_reduced_in_fp16(measured):
    for rank in _ranks(measured["reduce"]):
        assert rank["hook_values"]["reduced"][0] == "inf" and rank["hook_values"]["reduced"][3] == "0.0"
        assert rank["hook_values"]["reduced"][1] == "1.0"
        assert rank["ddp_scaled_fp32"]["skipped"] == 0
        assert rank["ddp_scaled_fp16_compress_hook"]["skipped"] > 0  # the hook's fp16 cast overflowed
        assert rank["ddp_scaled_fp16_compress_hook"]["scales"][-1] < 65536.0
        assert rank["ddp_unscaled_tiny"]["zeroed_by_hook"] > 0
        typical = rank["fsdp2_x1"]
        assert typical["zeroed_fp16_reduce"] == 0 and 0 < typical["rel_l1_diff"] < 1e-2
        small = rank["fsdp2_x0.0001"]
        assert small["rel_l1_diff"] > typical["rel_l1_diff"]  # worse as the gradients approach the subnormals
