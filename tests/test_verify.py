"""The verifier's experiments, run through the real worker subprocess on CPU.

Every experiment has a case that confirms and one that does not reproduce,
with the user's snippet where the experiment runs snippets. One worker serves
the whole module (torch is imported once). CUDA cases are marked `cuda` and run
only where a CUDA device exists (scripts/gpu-check.sh).
"""
from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("torch") is None:  # the worker needs torch; this process never imports it
    pytest.skip("torch is not installed", allow_module_level=True)

from amplint.verify import Runner, VerifyError, experiment_codes, has_experiment  # noqa: E402
from amplint.verify.snippet import Refused, free_names, parse, prepare_training, role_of, TrainingSpec, check_safe  # noqa: E402

DEV = "{dev}"  # replaced by the lab's device type in snippets that name it

AMP101_BAD = """\
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)"""
AMP101_GOOD = """\
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()"""
AMP101_SELF = """\
        self.scaler.scale(loss).backward()
        clip(self.model.parameters(), max_norm=self.args.max_grad_norm)
        self.scaler.step(self.optimizer)"""
AMP101_ACCUM = """\
    scaler.scale(loss).backward()
    if (step + 1) % accum == 0:
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
        scaler.step(opt)"""
AMP104_BAD = """\
scaler.scale(loss / accum).backward()
scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()"""
AMP104_SILENT = """\
scaler.scale(loss / accum).backward()
if i == 0:
    scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()"""
AMP104_GOOD = """\
scaler.scale(loss / accum).backward()
if (i + 1) % accum == 0:
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()"""
AMP501_PLAIN = """\
class MyLinear(Function):
    @staticmethod
    def forward(ctx, x, w, bias=None):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, None
"""
AMP501_DECORATED = """\
class Dec(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="{dev}")
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="{dev}")
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g.mm(b.t()), a.t().mm(g)
"""


def _fixture_class(name: str, fixture: str = "custom_ops.py") -> str:
    """The source of a class of fixtures/FIXTURE (the fixtures' own findings, verified)."""
    import ast

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", fixture)
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == name)
    return ast.get_source_segment(source, node) + "\n"


# `LinearReLU` adds an fp32 bias to its matmul: fp32 inputs give an fp32 output and an all-fp32
# backward; an input handed over in low precision (an earlier autocast op's output) meets the fp32 grad
AMP501_FP32_BIAS = _fixture_class("LinearReLU")


def _decorated(source: str) -> str:
    return source.replace("    def forward", '    @torch.amp.custom_fwd(device_type="{dev}")\n    def forward').replace(
        "    def backward", '    @torch.amp.custom_bwd(device_type="{dev}")\n    def backward'
    )


AMP501_FP32_BIAS_DECORATED = _decorated(AMP501_FP32_BIAS)

# a config dict read by key and (2, 4) masks beside (2, 4, 4) activations (transformers' YOSO shape)
AMP501_CONFIG = """\
class Cumulation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query_mask, key_mask, query, key, value, config):
        expectation = torch.matmul(query, key.transpose(-1, -2)) ** config["hash_code_len"]
        expectation = expectation * query_mask[:, :, None] * key_mask[:, None, :]
        ctx.save_for_backward(expectation, value)
        return torch.matmul(expectation, value)

    @staticmethod
    def backward(ctx, grad):
        expectation, value = ctx.saved_tensors
        return None, None, None, None, torch.matmul(expectation.transpose(-1, -2), grad), None
"""
# a backward that all-reduces through deepspeed.comm and keeps the handle in a dict (DeepSpeed's Domino)
AMP501_ALL_REDUCE = """\
class AsyncLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, weight, bias, handle_dic, h_id):
        ctx.save_for_backward(inp, weight)
        ctx.handle_dic, ctx.h_id = handle_dic, h_id
        return torch.matmul(inp, weight.t()) + bias

    @staticmethod
    def backward(ctx, grad_output):
        inp, weight = ctx.saved_tensors
        grad_input = torch.matmul(grad_output, weight)
        ctx.handle_dic[ctx.h_id] = dist.all_reduce(grad_input, async_op=True)
        g = grad_output.view(-1, grad_output.shape[-1])
        grad_weight = torch.matmul(g.t(), inp.view(-1, inp.shape[-1]))
        return grad_input, grad_weight, g.sum(0), None, None
"""



AMP202_BLOCK = """\
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = criterion(out, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()"""
AMP202_BLOCK_MM = """\
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            probe = torch.matmul(x, x.t())
            optimizer.step()"""

# (id, code, data, verdict, method)
CASES = [
    # AMP001
    ("001-autocast", "AMP001", {"api": "torch.cuda.amp.autocast"}, "confirmed", "experiment"),
    ("001-rule-data", "AMP001", {"deprecated": "torch.cpu.amp.GradScaler", "category": "FutureWarning"}, "confirmed", "experiment"),
    ("001-snippet", "AMP001", {"api": "torch.cuda.amp.GradScaler", "snippet": "torch.cuda.amp.GradScaler(enabled=True)"}, "confirmed", "snippet"),
    ("001-getter", "AMP001", {"api": "torch.get_autocast_gpu_dtype"}, "confirmed", "experiment"),
    ("001-current-api", "AMP001", {"api": "torch.amp.GradScaler", "snippet": "torch.amp.GradScaler('cpu')"}, "not-reproduced", "snippet"),
    ("001-own-names", "AMP001", {"api": "torch.cuda.amp.autocast", "snippet": "torch.cuda.amp.autocast(enabled=args.amp, dtype=amp_dtype)"}, "confirmed", "snippet"),
    ("001-own-names-current", "AMP001", {"api": "torch.amp.autocast", "snippet": "torch.amp.autocast('cpu', enabled=args.amp, dtype=amp_dtype)"}, "not-reproduced", "snippet"),
    ("001-own-helper", "AMP001", {"api": "torch.cuda.amp.autocast", "snippet": "torch.cuda.amp.autocast(dtype=pick(cfg))", "prelude": "def pick(c):\n    return torch.float16"}, "confirmed", "snippet"),
    ("001-unbound-helper", "AMP001", {"api": "torch.cuda.amp.autocast", "snippet": "torch.cuda.amp.autocast(dtype=pick(cfg))"}, "confirmed", "experiment"),
    # AMP002
    ("002-canonical", "AMP002", {}, "confirmed", "experiment"),
    ("002-snippet", "AMP002", {"snippet": "torch.cuda.amp.autocast(device_type='cuda', dtype=torch.bfloat16)"}, "confirmed", "snippet"),
    ("002-torch-autocast", "AMP002", {"snippet": "torch.autocast(device_type='cuda', dtype=torch.bfloat16)"}, "not-reproduced", "snippet"),
    # AMP101
    ("101-canonical", "AMP101", {"threshold": 1.0}, "confirmed", "experiment"),
    ("101-snippet", "AMP101", {"step_source": AMP101_BAD, "scaler": "scaler", "optimizer": "optimizer", "threshold": 1.0}, "confirmed", "snippet"),
    ("101-self-alias", "AMP101", {"step_source": AMP101_SELF, "names": {"clip": "torch.nn.utils.clip_grad_norm_"}}, "confirmed", "snippet"),
    ("101-accum-value", "AMP101", {"step_source": AMP101_ACCUM, "clip_function": "clip_grad_value_", "threshold": 0.5}, "confirmed", "snippet"),
    ("101-unscaled", "AMP101", {"step_source": AMP101_GOOD, "threshold": 1.0}, "not-reproduced", "snippet"),
    # AMP102
    ("102-canonical", "AMP102", {}, "confirmed", "experiment"),
    ("102-snippet", "AMP102", {"step_source": "scaler.scale(loss).backward()\noptimizer.step()\nscaler.update()"}, "confirmed", "snippet"),
    ("102-adam", "AMP102", {"optimizer_class": "Adam"}, "confirmed", "experiment"),
    ("102-unscaled-first", "AMP102", {"optimizer": "opt", "scaler": "scaler", "unscaled": True}, "confirmed", "experiment"),
    ("102-scaler-step", "AMP102", {"step_source": "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()"}, "not-reproduced", "snippet"),
    # AMP103
    ("103-canonical", "AMP103", {}, "confirmed", "experiment"),
    ("103-snippet", "AMP103", {"step_source": "scaler.scale(loss).backward()\nscaler.step(opt)\nopt.zero_grad()"}, "confirmed", "snippet"),
    ("103-updated", "AMP103", {"step_source": "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\nopt.zero_grad()"}, "not-reproduced", "snippet"),
    # AMP104
    ("104-canonical", "AMP104", {}, "confirmed", "experiment"),
    ("104-every-micro-batch", "AMP104", {"step_source": AMP104_BAD}, "confirmed", "snippet"),
    ("104-silent", "AMP104", {"step_source": AMP104_SILENT}, "confirmed", "snippet"),
    ("104-boundary", "AMP104", {"step_source": AMP104_GOOD}, "not-reproduced", "snippet"),
    ("104-shape-every-updated", "AMP104", {"shape": "every-updated"}, "confirmed", "experiment"),
    ("104-shape-sometimes", "AMP104", {"shape": "sometimes"}, "confirmed", "experiment"),
    ("104-shape-twice", "AMP104", {"shape": "twice"}, "confirmed", "experiment"),
    ("104-shape-update", "AMP104", {"shape": "update"}, "confirmed", "experiment"),
    # AMP105
    ("105-fp16", "AMP105", {"dtype": "fp16"}, "confirmed", "experiment"),
    ("105-bf16", "AMP105", {"dtype": "bf16"}, "not-reproduced", "experiment"),
    # AMP106
    ("106-fp16", "AMP106", {"optimizer": "opt", "module": "model"}, "confirmed", "experiment"),
    ("106-bf16", "AMP106", {"dtype": "bf16"}, "not-reproduced", "experiment"),
    # AMP107
    ("107-fp16", "AMP107", {"where": "train_one_epoch"}, "confirmed", "experiment"),
    ("107-bf16", "AMP107", {"dtype": "bf16"}, "not-reproduced", "experiment"),
    # AMP202 on the user's block: confirmed only when an op after the backward was lowered; otherwise
    # nothing is claimed (the stand-in model cannot show fp32-kept layers)
    ("202-user-block", "AMP202", {"step_source": AMP202_BLOCK, "dtype": "fp16"}, "inconclusive", "snippet"),
    ("202-user-mm-after-backward", "AMP202", {"step_source": AMP202_BLOCK_MM, "dtype": "fp16"}, "confirmed", "snippet"),
    # AMP203
    ("203-linear", "AMP203", {"op": "linear", "device": "cpu", "dtype": "bf16"}, "confirmed", "experiment"),
    ("203-conv2d", "AMP203", {"op": "conv2d", "device": None, "dtype": "fp16"}, "confirmed", "experiment"),
    ("203-cpu-unlisted", "AMP203", {"op": "addmv", "device": "cpu", "dtype": "bf16"}, "not-reproduced", "experiment"),
    # AMP204
    ("204-linear", "AMP204", {"name": "h", "source_op": "linear", "op": "linear", "device": "cpu", "dtype": "bf16"}, "confirmed", "experiment"),
    ("204-cpu-unlisted-source", "AMP204", {"source_op": "addr", "op": "linear", "device": "cpu"}, "not-reproduced", "experiment"),
    # AMP201
    ("201-sgd", "AMP201", {"optimizer_class": "SGD", "lr": 0.1}, "confirmed", "experiment"),
    ("201-no-class", "AMP201", {"optimizer": "opt", "subject": "model"}, "confirmed", "experiment"),
    ("201-adam", "AMP201", {"optimizer_class": "torch.optim.Adam", "lr": 1e-3, "eps": 1e-8}, "confirmed", "experiment"),
    ("201-large-lr", "AMP201", {"optimizer_class": "SGD", "lr": 100.0}, "not-reproduced", "experiment"),
    # AMP206: weights of 1.0 in bf16, 100 steps
    ("206-adamw-1e-4", "AMP206", {"optimizer_class": "torch.optim.AdamW", "lr": 1e-4, "dtype": "bf16"}, "confirmed", "experiment"),
    ("206-no-class", "AMP206", {"optimizer": "optimizer", "subject": "model"}, "confirmed", "experiment"),
    ("206-large-lr", "AMP206", {"optimizer_class": "torch.optim.Adam", "lr": 1e-2}, "not-reproduced", "experiment"),
    # AMP301
    ("301-masked-fill", "AMP301", {"snippet": "scores.masked_fill(mask == 0, -1e9)", "literal": -1e9, "op": "masked_fill"}, "confirmed", "snippet"),
    ("301-additive", "AMP301", {"snippet": "attn = attn + (1.0 - mask) * -1e9", "literal": -1e9}, "confirmed", "snippet"),
    ("301-where", "AMP301", {"snippet": "torch.where(mask, scores, -1e9)", "literal": -1e9, "op": "where"}, "confirmed", "snippet"),
    ("301-canonical", "AMP301", {"literal": -1e9, "op": "masked_fill", "snippet": "helper(scores, -1e9)"}, "confirmed", "experiment"),
    ("301-fp32-mask", "AMP301", {"snippet": "torch.where(mask > 0, 0.0, -1e10)", "literal": -1e10, "op": "where"}, "inconclusive", "snippet"),
    ("301-fp32-mask-cast", "AMP301", {"snippet": "torch.where(mask > 0, 0.0, -1e10).to(hidden.dtype)", "literal": -1e10, "op": "where"}, "confirmed", "snippet"),
    ("301-in-range", "AMP301", {"snippet": "scores.masked_fill(mask == 0, -1e4)", "literal": -1e4, "op": "masked_fill"}, "not-reproduced", "snippet"),
    ("301-bf16", "AMP301", {"snippet": "scores.masked_fill(mask == 0, -1e9)", "literal": -1e9, "dtype": "bf16"}, "not-reproduced", "snippet"),
    # AMP302
    ("302-expr", "AMP302", {"snippet": "x / (x.norm(dim=-1, keepdim=True) + 1e-8)", "eps": 1e-8}, "confirmed", "snippet"),
    ("302-optimizer", "AMP302", {"snippet": "torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8)", "optimizer_class": "AdamW", "eps": 1e-8}, "confirmed", "snippet"),
    ("302-optimizer-canonical", "AMP302", {"optimizer_class": "Adam", "eps": 1e-8}, "confirmed", "experiment"),
    ("302-layer-norm", "AMP302", {"snippet": "F.layer_norm(x, (4,), eps=1e-12)", "eps": 1e-12}, "not-reproduced", "snippet"),
    ("302-clamp-bound", "AMP302", {"snippet": "p.clamp(min=1e-4, max=1 - 1e-4)", "eps": 1e-4, "value": 0.9999, "rounds_to": 1.0, "bound": "max"}, "confirmed", "snippet"),
    ("302-clamp-bound-kept", "AMP302", {"snippet": "p.clamp(min=1e-3, max=1 - 1e-3)", "eps": 1e-3, "value": 0.999, "rounds_to": 1.0, "bound": "max"}, "not-reproduced", "snippet"),
    ("302-eps-1e-4", "AMP302", {"snippet": "AdamW(model.parameters(), lr=1e-3, eps=1e-4)", "optimizer_class": "AdamW", "eps": 1e-4}, "not-reproduced", "snippet"),
    # AMP303
    ("303-bce", "AMP303", {"snippet": "F.binary_cross_entropy(torch.sigmoid(logits), target)"}, "confirmed", "snippet"),
    ("303-bceloss", "AMP303", {"snippet": "nn.BCELoss()(probs, labels)"}, "confirmed", "snippet"),
    ("303-canonical", "AMP303", {}, "confirmed", "experiment"),
    ("303-with-logits", "AMP303", {"snippet": "F.binary_cross_entropy_with_logits(logits, target)"}, "not-reproduced", "snippet"),
    # AMP401
    ("401-fp16", "AMP401", {"dtype": "fp16"}, "confirmed", "experiment"),
    ("401-fp32", "AMP401", {"dtype": "fp32"}, "not-reproduced", "experiment"),
    # AMP402
    ("402-fp16", "AMP402", {}, "confirmed", "experiment"),
    ("402-bf16", "AMP402", {"dtype": "bf16"}, "not-reproduced", "experiment"),
    ("402-saved-dict", "AMP402", {"side": "save", "snippet": "torch.save({'model': self.model.state_dict(), 'optim': self.optimizer.state_dict(), 'epoch': epoch}, path)"}, "confirmed", "snippet"),
    ("402-saved-with-scaler", "AMP402", {"side": "save", "snippet": "torch.save({'model': model.state_dict(), 'scaler': scaler.state_dict()}, path)"}, "not-reproduced", "snippet"),
    ("402-saved-local", "AMP402", {"side": "save", "snippet": "torch.save(state, out / name)", "prelude": "state = {'model': model.state_dict(), 'optimizer': opt.state_dict(), 'loss': running / len(loader)}"}, "confirmed", "snippet"),
    ("402-unknown-amp-state", "AMP402", {"side": "save", "snippet": "torch.save({'model': model.state_dict(), 'amp': amp_state}, path)"}, "inconclusive", "experiment"),
    ("402-resume", "AMP402", {"side": "load", "snippet": "optimizer.load_state_dict(ckpt['optimizer'])"}, "confirmed", "experiment"),
    # AMP501
    ("501-canonical", "AMP501", {}, "confirmed", "experiment"),
    ("501-snippet", "AMP501", {"snippet": AMP501_PLAIN}, "confirmed", "snippet"),
    ("501-decorated", "AMP501", {"snippet": AMP501_DECORATED}, "not-reproduced", "snippet"),
    ("501-fp32-bias", "AMP501", {"snippet": AMP501_FP32_BIAS}, "confirmed", "snippet"),
    ("501-fp32-bias-decorated", "AMP501", {"snippet": AMP501_FP32_BIAS_DECORATED}, "not-reproduced", "snippet"),
    ("501-config-dict", "AMP501", {"snippet": AMP501_CONFIG}, "confirmed", "snippet"),
    ("501-config-dict-decorated", "AMP501", {"snippet": _decorated(AMP501_CONFIG)}, "not-reproduced", "snippet"),
    ("501-all-reduce", "AMP501", {"snippet": AMP501_ALL_REDUCE, "names": {"dist": "deepspeed.comm"}}, "confirmed", "snippet"),
    ("501-all-reduce-decorated", "AMP501", {"snippet": _decorated(AMP501_ALL_REDUCE), "names": {"dist": "deepspeed.comm"}}, "not-reproduced", "snippet"),
    # AMP503
    ("503-canonical", "AMP503", {}, "confirmed", "experiment"),
    ("503-rule-data", "AMP503", {"decorator": "torch.amp.custom_bwd"}, "confirmed", "experiment"),
    ("503-snippet", "AMP503", {"snippet": "@torch.amp.custom_fwd(cast_inputs=torch.float32)"}, "confirmed", "snippet"),
    ("503-device-type", "AMP503", {"snippet": "torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)"}, "not-reproduced", "snippet"),
]


def _with_device(data: dict, device_type: str) -> dict:
    return {k: (v.replace(DEV, device_type) if isinstance(v, str) else v) for k, v in data.items()}


@pytest.fixture(scope="module")
def cpu_runner():
    # tests/ on the path: the memory test runs an experiment from test_verify_isolation.py
    with Runner(device="cpu", timeout=120, extra_sys_path=[os.path.dirname(os.path.abspath(__file__))]) as runner:
        runner.start()
        yield runner


@pytest.mark.parametrize("case_id,code,data,verdict,method", CASES, ids=[c[0] for c in CASES])
def test_experiment(cpu_runner, case_id, code, data, verdict, method):
    v = cpu_runner.run(code, _with_device(data, "cpu"))
    assert_outcome(v, verdict, method)
    # every verdict carries the environment and its evidence
    assert v["device"] == "cpu" and v["torch"] and v["seed"] == 0 and v["experiment"] == code
    assert isinstance(v["evidence"], dict) and isinstance(v["duration_s"], float)


def test_a_function_whose_fp32_inputs_run_clean_is_run_with_a_low_precision_input(cpu_runner):
    v = cpu_runner.run("AMP501", {"snippet": AMP501_FP32_BIAS})
    assert (v["verdict"], v["method"]) == ("confirmed", "snippet"), v
    assert v["evidence"]["low_precision_input"] == "x" and v["evidence"]["error"]["phase"] == "backward", v
    assert "its input `x` in bf16, as an earlier autocast op hands it" in v["summary"], v
    v = cpu_runner.run("AMP501", {"snippet": AMP501_PLAIN})  # fails with fp32 inputs already
    assert v["verdict"] == "confirmed" and "low_precision_input" not in v["evidence"], v


def assert_outcome(v: dict, verdict: str, method: str) -> None:
    """`verdict` about the user's code (method snippet), or, where only the rule's reference
    experiment ran, `inconclusive` with that experiment's `verdict` attached as `reference`."""
    if method == "snippet" or verdict not in ("confirmed", "not-reproduced"):
        assert (v["verdict"], v["method"]) == (verdict, method), v
        assert "reference" not in v or v["verdict"] == "inconclusive", v
        if verdict in ("confirmed", "not-reproduced"):
            assert v["summary"], v
        return
    assert (v["verdict"], v["method"]) == ("inconclusive", "experiment"), v
    assert v["reason"].startswith("could not run this code: "), v
    assert v["reference"]["verdict"] == verdict and v["reference"]["summary"], v


def test_every_requested_rule_has_an_experiment():
    wanted = "AMP001 AMP002 AMP101 AMP102 AMP103 AMP104 AMP105 AMP201 AMP301 AMP302 AMP303 AMP401 AMP402 AMP501 AMP503".split()
    assert set(wanted) <= set(experiment_codes())
    from tests.test_verify_more import CODES as MORE  # their own cases (some are CUDA-only: inconclusive on CPU)
    from tests.test_verify_ranks import CASES as RANKS  # the 2-rank ones; FSDP1's are inconclusive on CPU

    tested = {c[1] for c in CASES}
    ranked = {c[1] for c in RANKS}
    for ranked_code in ("AMP803", "AMP804"):  # each with a case that confirms and a twin that does not
        assert {"confirmed", "not-reproduced"} <= {c[3] for c in RANKS if c[1] == ranked_code}, ranked_code
    for code in experiment_codes():
        if code in MORE or code in ranked:
            continue
        assert code in tested
        kinds = {c[3] for c in CASES if c[1] == code}
        assert {"confirmed", "not-reproduced"} <= kinds, code
    assert has_experiment("AMP101") and not has_experiment("AMP999") and not has_experiment("../x")


def test_numbers_in_evidence(cpu_runner):
    v = cpu_runner.run("AMP101", {"step_source": AMP101_BAD, "threshold": 1.0})
    ev = v["evidence"]
    assert ev["loss_scale"] == 65536.0 and ev["ratio"] == 65536.0
    assert ev["clip_fired"] is True and ev["update_shrink"] > 1000
    v = cpu_runner.run("AMP102", {})
    assert v["reference"]["evidence"]["update_ratio"] == 65536.0  # the reference experiment's numbers
    assert v["reference"]["evidence"]["error"]["message"] == "No inf checks were recorded prior to update."
    v = cpu_runner.run("AMP203", {"op": "addmv", "device": "cuda"})
    if v["device"] == "cpu":  # only the CUDA list lowers addmv: never claimed from a CPU run
        assert (v["verdict"], v["reason"]) == ("inconclusive", "needs CUDA")
    v = cpu_runner.run("AMP303", {"device": "cuda", "snippet": "F.binary_cross_entropy(torch.sigmoid(logits), target)"})
    assert "unsafe to autocast" in v["evidence"]["error"]["message"]
    assert v["evidence"]["ran_on"] == "cpu (the flagged code targets cuda)"
    assert "AutocastCUDA" in v["evidence"]["ran_under"]  # reached the CUDA kernel, not CPU autocast


def test_same_inputs_same_verdict(cpu_runner):
    data = {"step_source": AMP104_SILENT}
    a, b = cpu_runner.run("AMP104", data), cpu_runner.run("AMP104", data)
    for v in (a, b):
        v.pop("duration_s")
    assert a == b


def test_unbindable_snippet_falls_back(cpu_runner):
    v = cpu_runner.run("AMP101", {"step_source": "scaler.scale(loss).backward()\nmy_clip(model, 1.0)\nscaler.step(opt)"})
    assert v["method"] == "experiment" and v["verdict"] == "inconclusive"
    assert v["reason"] == "could not run this code: my_clip" and v["reference"]["verdict"] == "confirmed"
    assert "my_clip" in v["evidence"]["snippet_skipped"]


def test_unbound_names_off_the_path_that_runs_are_not_needed(cpu_runner):
    source = """\
scaler.scale(loss).backward()
if use_amp:
    scaler.step(optimizer)
else:
    my_fallback_step(optimizer, ema_model)
scaler.update()
"""
    v = cpu_runner.run("AMP102", {"step_source": source})
    assert (v["verdict"], v["method"]) == ("not-reproduced", "snippet"), v


def test_refused_snippet_falls_back_and_writes_nothing(cpu_runner, tmp_path):
    target = tmp_path / "ckpt.pt"
    source = f"scaler.scale(loss).backward()\ntorch.save(model.state_dict(), {str(target)!r})\nscaler.step(optimizer)"
    v = cpu_runner.run("AMP102", {"step_source": source})
    assert v["method"] == "experiment" and "save" in v["evidence"]["snippet_skipped"]
    assert not target.exists()


def test_snippet_failing_both_ways_falls_back(cpu_runner):
    v = cpu_runner.run("AMP101", {"step_source": "scaler.scale(loss).backward()\nmodel.module.foo()\nscaler.step(opt)"})
    assert v["method"] == "experiment" and "with and without scaling" in v["evidence"]["snippet_skipped"]


def test_cpu_worker_caps_its_memory(cpu_runner):
    ev = cpu_runner.run("TEST", {}, target="test_verify_isolation:limits")["evidence"]
    if not ev.get("as") or ev["as"][0] == "unlimited":
        pytest.skip("no RLIMIT_AS here")
    restarts = cpu_runner.restarts
    v = cpu_runner.run("TEST", {"bytes": int(ev["as"][0])}, target="test_verify_isolation:hog")
    assert v["verdict"] == "error" and "MemoryError" in v["reason"], v
    assert cpu_runner.run("TEST", {}, target="test_verify_isolation:ok")["verdict"] == "confirmed"
    assert cpu_runner.restarts == restarts  # a MemoryError is a verdict, not a crash


# ------------------------------------------------------------------ snippet analysis (no worker)


def test_free_names_follow_statement_order():
    tree = parse("    loss = loss / accum\n    out = model(x)\n    y2 = [z for z in out]\n    scaler.scale(loss).backward()")
    free = free_names(tree)
    assert free.names == ["accum", "loss", "model", "scaler", "x"]


def test_self_chains_and_roles():
    tree = parse("self.scaler.scale(loss).backward()\nclip(self.model.parameters(), self.args.max_grad_norm)")
    free = free_names(tree)
    assert ("self", "args", "max_grad_norm") in free.chains["self"]
    assert "clip" in free.called
    assert role_of("scaler", {}) == "scaler" and role_of("opt", {}) == "optimizer" and role_of("loss_fn", {}) == "criterion"
    assert role_of("my_scaler_obj", {"scaler": "self.my_scaler_obj"}) == "scaler"
    prepared = prepare_training(TrainingSpec(source="scaler.scale(loss).backward()\nclip(model.parameters(), 1.0)"))
    assert prepared.unbound == ["clip"] and prepared.roles["clip"] == "missing"  # bound lazily
    prepared = prepare_training(TrainingSpec(source="if opt.fp16:\n    scaler.step(optimizer_G)"))
    assert prepared.roles["opt"] == {"fp16": "flag"} and prepared.roles["optimizer_G"] == "optimizer"


@pytest.mark.parametrize(
    "source",
    ["import os", "open('x', 'w')", "torch.save(m, 'x')", "os.system('ls')", "eval('1')", "x.__class__", "getattr(torch, 'save')"],
)
def test_refused_constructs(source):
    with pytest.raises(Refused):
        check_safe(parse(source))


def test_indentation_repair():
    tree = parse("        scaler.scale(loss).backward()\n    scaler.step(opt)\n")
    assert free_names(tree).names == ["loss", "opt", "scaler"]


# ------------------------------------------------------------------ CUDA (scripts/gpu-check.sh)


def _cuda_present() -> bool:
    """Cheap guess (no torch import here); the worker decides for real."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0") or bool(os.environ.get("AMPLINT_REQUIRE_CUDA"))


@pytest.fixture(scope="module")
def cuda_runner():
    if not _cuda_present():
        pytest.skip("no CUDA device")
    runner = Runner(device="cuda", timeout=120)
    try:
        env = runner.start()
    except VerifyError as exc:
        runner.close()
        if os.environ.get("AMPLINT_REQUIRE_CUDA"):  # scripts/gpu-check.sh: a skip is a failure
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    assert env["device_type"] == "cuda" and env["capability"]
    yield runner
    runner.close()


# cases whose outcome differs on CUDA, measured there: CUDA's unscale kernel has no bf16 version
_CUDA_DIFFERS = {"106-bf16": ("confirmed", "experiment")}
# verdicts that must not change on CUDA (the others only must not be `error`)
_CUDA_STABLE = {"AMP001", "AMP002", "AMP101", "AMP102", "AMP103", "AMP104", "AMP106", "AMP301", "AMP303", "AMP401", "AMP501", "AMP503"}


@pytest.mark.cuda
@pytest.mark.parametrize("case_id,code,data,verdict,method", CASES, ids=[c[0] for c in CASES])
def test_experiment_cuda(cuda_runner, case_id, code, data, verdict, method):
    v = cuda_runner.run(code, _with_device(data, "cuda"))
    assert v["verdict"] != "error", v
    assert v["device"].startswith("cuda") and v["capability"]
    if case_id in _CUDA_DIFFERS:
        assert (v["verdict"], v["method"]) == _CUDA_DIFFERS[case_id], v
    elif code in _CUDA_STABLE:
        assert (v["verdict"], v["method"]) == (verdict, method), v


@pytest.mark.cuda
def test_amp303_direct_on_cuda(cuda_runner):
    v = cuda_runner.run("AMP303", {"snippet": "F.binary_cross_entropy(torch.sigmoid(logits), target)"})
    assert v["verdict"] == "confirmed" and "torch.autocast('cuda'" in v["evidence"]["ran_under"]
    assert "bce_calls_redispatched" not in v["evidence"]


@pytest.mark.cuda
def test_cuda_index_device():
    if not _cuda_present():
        pytest.skip("no CUDA device")
    with Runner(device="cuda:0", timeout=120) as runner:
        try:
            env = runner.start()
        except VerifyError as exc:
            if os.environ.get("AMPLINT_REQUIRE_CUDA"):
                pytest.fail(str(exc))
            pytest.skip(str(exc))
        assert env["device"].startswith("cuda:0")
