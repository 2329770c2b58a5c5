"""Experiments for AMP108, AMP202, AMP205, AMP502, AMP601 and AMP602, through one CPU worker.

CPU verdicts: AMP108/AMP202/AMP502 confirm and (for 202/502) do not reproduce
without a low-precision dtype; AMP205 needs two CUDA devices and AMP601/AMP602
need CUDA, so on CPU they are inconclusive with the evidence they can gather.
No timing assertions.
"""
from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("torch") is None:  # the worker needs torch; this process never imports it
    pytest.skip("torch is not installed", allow_module_level=True)

from amplint.verify import experiment_codes  # noqa: E402

from .verify_helpers import runner  # noqa: E402,F401  (the module's CPU worker fixture)

# (id, code, data, CPU verdict, CPU reason)
CASES = [
    ("108-bf16", "AMP108", {}, "confirmed", None),
    ("202-default", "AMP202", {"region_line": 3, "device": "cpu", "dtype": None}, "confirmed", None),
    ("202-fp16-cuda", "AMP202", {"region_line": 3, "device": "cuda", "dtype": "torch.float16"}, "confirmed", None),
    ("202-fp32", "AMP202", {"dtype": "torch.float32"}, "not-reproduced", None),
    ("205-cpu", "AMP205", {"region_line": 2}, "inconclusive", "needs 2 CUDA devices"),
    ("502-cuda-finding", "AMP502", {"op": "mylib::fused_gelu", "kind": "custom_op", "device": "cuda", "dtype": "torch.bfloat16"}, "confirmed", None),
    ("502-default", "AMP502", {"op": "mylib::f"}, "confirmed", None),
    ("502-fp32", "AMP502", {"op": "mylib::f", "dtype": "torch.float32"}, "not-reproduced", None),
    ("601-cpu", "AMP601", {"regions": 1, "bare_is_bf16_supported": False}, "inconclusive", "needs CUDA"),
    ("602-cpu", "AMP602", {"regions": 2}, "inconclusive", "needs CUDA"),
]
CODES = {c[1] for c in CASES}


@pytest.fixture(scope="module")
def verdicts(runner):
    return {case_id: runner.run(code, data) for case_id, code, data, _, _ in CASES}


def test_experiments_exist():
    assert CODES <= set(experiment_codes())


@pytest.mark.parametrize("case_id,code,data,verdict,reason", CASES, ids=[c[0] for c in CASES])
def test_cpu_verdict(verdicts, case_id, code, data, verdict, reason):
    v = verdicts[case_id]
    assert v["device"] == "cpu" and v["experiment"] == code and v["method"] == "experiment"
    if verdict in ("confirmed", "not-reproduced"):
        # no user code runs here: the reference experiment's result, never a claim about the code
        assert v["verdict"] == "inconclusive" and v["reason"].startswith("could not run this code"), v
        assert v["reference"]["verdict"] == verdict and v["reference"]["evidence"], v
    else:
        assert (v["verdict"], v["reason"]) == (verdict, reason), v
        assert isinstance(v["evidence"], dict) and v["evidence"]


def _ev(v: dict) -> dict:
    """The numbers an experiment measured (the reference's, when the user's code did not run)."""
    return (v.get("reference") or v)["evidence"]


def test_amp108_same_params_extra_work(verdicts):
    ev = _ev(verdicts["108-bf16"])
    assert ev["params_identical"] is True and ev["max_param_diff"] == 0.0 and ev["skipped_steps_with_scaler"] == 0
    extra = ev["extra_work_per_step"]
    assert extra["_amp_foreach_non_finite_check_and_unscale_"] == 1  # one pass over the grads
    assert extra["gradient_elements_checked_and_unscaled"] == ev["gradient_elements"] == 8 * 16 + 16 + 16 * 4 + 4
    assert extra["host_syncs_item"] >= 1  # found_inf.item() in step(): a host sync
    assert extra["_amp_update_scale_"] == 1
    assert ev["median_step_s_plain"] > 0 and ev["median_step_s_with_scaler"] > 0  # reported, never compared


def test_amp202_evidence_never_overclaims(verdicts):
    v = verdicts["202-default"]
    ev = _ev(v)
    # E23: the plain gradients are identical; the summary says so
    assert ev["plain_max_grad_diff"] == 0.0 and "identical" in v["reference"]["summary"]
    assert ev["activation_grad_dtype_inside"] == ev["activation_grad_dtype_outside"] == "bf16"
    # what the region does change
    assert (ev["after_backward_mm_dtype_inside"], ev["after_backward_mm_dtype_outside"]) == ("bf16", "fp32")
    # a forward kept fp32 with autocast(enabled=False) gets a low-precision backward inside the region
    assert ev["fp32_layer_max_grad_diff"] > 0
    assert ev["fp32_layer_grad_rel_error_vs_fp64_inside"] > 100 * ev["fp32_layer_grad_rel_error_vs_fp64_outside"]
    assert verdicts["202-fp16-cuda"]["evidence"]["ran_on"] == "cpu (the flagged code targets cuda)"
    ev = _ev(verdicts["202-fp32"])
    assert ev["plain_max_grad_diff"] == 0.0 and ev["fp32_layer_max_grad_diff"] == 0.0


def test_amp205_mechanism_on_cpu(verdicts):
    v = verdicts["205-cpu"]
    ev = v["evidence"]
    assert ev["cuda_devices"] == 0 and ev["parallel_apply_forwards_dtype"] is False
    mech = ev["thread_mechanism"]
    assert mech["main_thread_asked"] == mech["main_thread_linear_dtype"] == "fp16"
    assert mech["thread_autocast_enabled_before_reentry"] is False  # thread-local state
    assert mech["thread_linear_dtype"] == mech["device_default_dtype"] == "bf16"
    assert v["summary"]


def test_amp502_kernel_dtypes(verdicts):
    ev = _ev(verdicts["502-cuda-finding"])
    assert ev["unregistered"] == {"kernel_saw": ["bf16", "fp32"], "autocast_on_in_kernel": True, "output_dtype": "bf16"}
    assert ev["registered_fp32"] == {"kernel_saw": ["fp32", "fp32"], "autocast_on_in_kernel": False, "output_dtype": "fp32"}
    assert verdicts["502-cuda-finding"]["evidence"]["ran_on"] == "cpu (the flagged code targets cuda)"
    ev = _ev(verdicts["502-fp32"])
    assert ev["unregistered"]["kernel_saw"] == ["fp32", "fp32"]


def test_capability_on_cpu(verdicts):
    for case in ("601-cpu", "602-cpu"):
        ev = verdicts[case]["evidence"]
        assert ev["cuda_available"] is False and ev["is_bf16_supported"] is False
        assert ev["is_bf16_supported_without_emulation"] is False
