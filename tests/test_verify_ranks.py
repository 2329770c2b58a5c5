"""A finding's own step on 2 gloo ranks inside the sandbox (AMP803), and what confines the ranks.

The worker forks two sibling rank processes for an experiment whose `ranks(data)` is 2; each
confines itself as a finding does (rlimits, Landlock, seccomp) except for TCP sockets on the
sandbox's own loopback. The attacks below run on those ranks (`target="test_verify_ranks:..."`,
this module's `ranks` says how many) and the tests check from the host that they were refused.
"""
from __future__ import annotations

import importlib.util
import os
import select
import socket

import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed", allow_module_level=True)

from amplint.verify import Runner, verify_diagnostics  # noqa: E402
from amplint.verify.prelude import Preludes, torch_imports  # noqa: E402
from amplint.verify.sandbox import Sandbox, SandboxUnavailable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
T = "test_verify_ranks"
try:
    Sandbox.find()
    NO_SANDBOX = ""
except SandboxUnavailable as exc:  # pragma: no cover - depends on the machine
    NO_SANDBOX = str(exc)

HOOKS = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"
POLICY = "torch.distributed.fsdp.MixedPrecisionPolicy"


def _fsdp2(snippet):
    return {"mechanism": "fsdp", "policy": "MixedPrecisionPolicy", "snippet": snippet, "names": {"MixedPrecisionPolicy": POLICY}}


def _master(cast, policy="MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)", **extra):
    """AMP804 on FSDP2: the flagged cast and the wrapper's policy, as the parent reads them."""
    return {"wrapper": "fsdp2", "dtype": "bf16", "snippet": cast, "names": {"torch": "torch"}, "policy_snippet": policy,
            "policy_names": {"MixedPrecisionPolicy": POLICY, "MPP": POLICY, "torch": "torch"}, **extra}


def _hook(snippet):
    return {"mechanism": "ddp-comm-hook", "reduce_dtype": "fp16", "snippet": snippet, "names": {"default": HOOKS}}


#: (id, code, data, verdict, reason prefix): the user's code on 2 ranks, each with its negative twin
CASES = [
    ("803-fsdp2-fp16-param", "AMP803", _fsdp2("MixedPrecisionPolicy(param_dtype=torch.float16)"), "confirmed", None),
    ("803-fsdp2-fp16-reduce", "AMP803", _fsdp2("MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float16)"), "confirmed", None),
    ("803-fsdp2-fp32-reduce", "AMP803", _fsdp2("MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)"), "not-reproduced", None),
    ("803-ddp-fp16-hook", "AMP803", _hook("model.register_comm_hook(state=None, hook=default.fp16_compress_hook)"), "confirmed", None),
    ("803-ddp-allreduce-hook", "AMP803", _hook("model.register_comm_hook(None, default.allreduce_hook)"), "not-reproduced", None),
    ("803-ddp-bf16-hook-cpu", "AMP803", _hook("ddp.register_comm_hook(None, default.bf16_compress_hook)"), "inconclusive",
     "could not run this code: the flagged code raised TypeError: BF16 all reduce communication hook required CUDA"),
    ("803-unbound-state", "AMP803", _hook("model.register_comm_hook(my_state, default.fp16_compress_hook)"), "inconclusive",
     "could not run this code: my_state"),
    ("803-fsdp1", "AMP803", {"mechanism": "fsdp", "policy": "MixedPrecision", "snippet": "MixedPrecision(param_dtype=torch.float16)"},
     "inconclusive", "needs an accelerator: FSDP1"),
    ("803-lightning", "AMP803", {"mechanism": "lightning-fsdp", "precision": "16-mixed"}, "inconclusive",
     "needs an accelerator: Lightning's FSDP strategy (FSDP1"),
    ("804-fsdp2-bf16-method", "AMP804", _master("Net(config).cuda().bfloat16()"), "confirmed", None),
    ("804-fsdp2-fp16-to-device", "AMP804", _master("model.to(device, torch.float16)", "MPP(param_dtype=torch.float16)", dtype="fp16"),
     "confirmed", None),
    ("804-fsdp2-default-dtype", "AMP804", _master("torch.set_default_dtype(torch.bfloat16)"), "confirmed", None),
    ("804-fsdp2-fp32-masters", "AMP804", _master("model.float()"), "not-reproduced", None),
    ("804-fsdp2-default-fp32", "AMP804", _master("torch.set_default_dtype(torch.float32)"), "not-reproduced", None),
    ("804-unbound-dtype", "AMP804", _master("model.to(dtype=cfg.dtype)"), "inconclusive", "could not run this code: cfg"),
    ("804-fsdp1", "AMP804", {"wrapper": "fsdp1", "snippet": "model.half()"}, "inconclusive", "needs an accelerator: FSDP1"),
    ("804-fabric", "AMP804", {"wrapper": "fabric"}, "inconclusive", "needs an accelerator: Lightning Fabric's FSDP strategy (FSDP1"),
    ("801-fsdp1", "AMP801", {"wrapper": "fsdp1"}, "inconclusive", "needs an accelerator: FSDP1"),
    ("802-fsdp1", "AMP802", {"wrapper": "fsdp1", "scaler_class": "GradScaler"}, "inconclusive", "needs an accelerator: FSDP1"),
]
CODES = {c[1] for c in CASES}


# ------------------------------------------------------------------ run on the ranks


def ranks(data):
    """This module's targets run on `data["world"]` ranks (the worker reads it, as for AMP803)."""
    return data.get("world", 1)


def _try(fn):
    try:
        return ["ok", repr(fn())[:200]]
    except BaseException as exc:  # noqa: BLE001 - the attack's outcome is the evidence
        return ["refused", f"{type(exc).__name__}: {exc}"[:200]]


def _connect(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect((host, port))
        s.sendall(b"escaped")


def attack_rank(data, lab):
    """On each rank, inside the gloo group: new processes, programs, other socket kinds, outbound
    and host connections, a chosen port; then the group's own all-reduce still works."""
    import resource

    import torch
    import torch.distributed as dist

    from amplint.verify.experiments._distributed import joined

    with joined(data) as (rank, world):
        out = {
            "fork": _try(os.fork),
            "execve": _try(lambda: os.execv("/bin/true", ["true"])),
            "posix_spawn": _try(lambda: os.posix_spawn("/bin/true", ["true"], {})),
            "unix": _try(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
            "udp": _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
            "raw": _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
            "packet": _try(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
            "netlink_other": _try(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)),  # NETLINK_SOCK_DIAG
            "outbound": _try(lambda: _connect("192.0.2.1", data["port"])),  # TEST-NET-1, a port of the range
            "host_listener": _try(lambda: _connect("127.0.0.1", data["port"])),
            "low_port": _try(lambda: _connect("127.0.0.1", 22)),
            "bind_chosen": _try(lambda: socket.socket().bind(("127.0.0.1", 5000))),
        }
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        limits = torch.tensor([float(resource.getrlimit(w)[1]) for w in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE)],
                              dtype=torch.float64)
        every = [torch.zeros_like(limits) for _ in range(world)]
        dist.all_gather(every, limits)
        refused = torch.tensor([sum(v[0] == "refused" for v in out.values())])
        dist.all_reduce(refused, op=dist.ReduceOp.MIN)
    out.update(rank=rank, world=world, all_reduce=float(total), rlimits=[t.tolist() for t in every], refused_on_every_rank=int(refused))
    return lab.confirmed("tried", out, method="snippet")


def rank_one_dies(data, lab):
    from amplint.verify.experiments._distributed import joined

    with joined(data) as (rank, _):
        if rank == 1:
            os._exit(9)
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))  # waits for rank 1, which is gone
    return lab.confirmed("unreachable", {}, method="snippet")


def rank_one_hangs(data, lab):
    import time

    if data["_group"]["rank"] == 1:
        time.sleep(600)
    return lab.confirmed("rank 0 is done", {}, method="snippet")


def ok(data, lab):
    return lab.confirmed("fine", {"rank": (data.get("_group") or {}).get("rank")}, method="snippet")


# ------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def runner():
    if NO_SANDBOX:
        pytest.skip(f"no sandbox on this machine: {NO_SANDBOX}")
    with Runner(device="cpu", timeout=60, extra_sys_path=[HERE]) as r:
        r.start()
        yield r


@pytest.fixture(scope="module")
def verdicts(runner):
    """case id -> its verdict, each run once, when a test first asks for it."""
    by_id = {c[0]: c for c in CASES}

    class Verdicts(dict):
        def __missing__(self, case_id):
            _, code, data, _, _ = by_id[case_id]
            self[case_id] = runner.run(code, data)
            return self[case_id]

    return Verdicts()


#: the cases the default test run leaves out (`-m slow` runs them): more of the same 2-rank runs
SLOW = {"803-fsdp2-fp16-reduce", "803-ddp-bf16-hook-cpu", "803-unbound-state", "804-fsdp2-fp16-to-device",
        "804-fsdp2-default-fp32", "804-unbound-dtype"}


def test_the_layers_line_names_the_ranks(runner):
    line = " ".join(runner.layers)
    assert "2-rank findings: two sibling processes" in line and "loopback" in line, runner.layers


@pytest.mark.parametrize("case_id,code,data,verdict,reason", [
    pytest.param(*c, id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in CASES
])
def test_verdict_on_two_ranks(verdicts, case_id, code, data, verdict, reason):
    v = verdicts[case_id]
    assert v["verdict"] == verdict, v
    if verdict in ("confirmed", "not-reproduced"):
        assert v["method"] == "snippet" and v["evidence"]["ranks"] == 2 and v["evidence"]["backend"] == "gloo", v
        assert "on 2 gloo ranks" in v["summary"], v
    else:
        assert (v["reason"] or "").startswith(reason), v


def test_confirmed_means_the_reduction_lost_what_fp32_kept(verdicts):
    hook = verdicts["803-ddp-fp16-hook"]["evidence"]
    assert hook["loss_multipliers"]["x1e+07"]["nonfinite_after_user_reduce"] > 0, hook  # 65504 exceeded: inf
    assert hook["loss_multipliers"]["x1e-07"]["zero_after_user_reduce"] > 0, hook  # below fp16's subnormals: 0
    assert hook["nonfinite_weights_after_sgd_step"]["user_hook"] > 0 == hook["nonfinite_weights_after_sgd_step"]["fp32_allreduce"], hook
    fsdp = verdicts["803-fsdp2-fp16-param"]["evidence"]
    assert sum(r["zero_after_user_reduce"] for r in fsdp["loss_multipliers"].values()) > 0, fsdp
    twin = verdicts["803-fsdp2-fp32-reduce"]["evidence"]
    assert all(r["zero_after_user_reduce"] == r["nonfinite_after_user_reduce"] == 0 for r in twin["loss_multipliers"].values()), twin


def test_confirmed_means_the_low_precision_shards_lost_what_fp32_masters_kept(verdicts):
    """AMP804: FSDP2 keeps the shards in the dtype the model had (bf16 after the user's cast), so
    steps below bf16's spacing round away; the same policy over fp32 masters moves every value."""
    ev = verdicts["804-fsdp2-bf16-method"]["evidence"]
    assert ev["cast_ran"] == "MLP.bfloat16()" and ev["cast_left_out"] == [".cuda()"], ev  # the user's dtype method, on the lab's MLP
    assert ev["sharded_dtype"] == {"user": "bfloat16", "fp32_control": "float32"}, ev
    assert ev["moved_by_fp32_control"] == ev["values"] and 2 * ev["unchanged_by_user"] > ev["values"], ev
    assert ev["update_kept"] < 0.5 and 2 * ev["large_steps"]["moved_by_user"] > ev["values"], ev  # it trains at large steps
    twin = verdicts["804-fsdp2-fp32-masters"]["evidence"]
    assert twin["sharded_dtype"]["user"] == "float32" and twin["unchanged_by_user"] == 0 and twin["update_kept"] == 1.0, twin
    default = verdicts["804-fsdp2-default-dtype"]["evidence"]
    assert default["parameter_dtypes_after_cast"] == ["bfloat16"] and default["unchanged_by_user"] == ev["unchanged_by_user"], default


def test_ranks_are_refused_processes_programs_and_every_network_but_their_own(runner):
    with socket.socket() as host:  # a listener on the host's loopback, at a port of the range the ranks may connect to
        host.bind(("127.0.0.1", 0))
        host.listen(1)
        port = host.getsockname()[1]
        v = runner.run("TEST", {"world": 2, "port": port}, target=f"{T}:attack_rank")
        pending, _, _ = select.select([host], [], [], 0)  # a connection that reached it would be waiting
    assert pending == [], "a rank reached the host's loopback"
    ev = v["evidence"]
    assert v["verdict"] == "confirmed" and ev["world"] == 2 and ev["all_reduce"] == 3.0, v  # the group itself works
    for attack in ("fork", "execve", "posix_spawn", "unix", "udp", "raw", "packet", "netlink_other", "outbound",
                   "host_listener", "low_port", "bind_chosen"):
        assert ev[attack][0] == "refused", (attack, ev[attack])
    assert "Network is unreachable" in ev["outbound"][1], ev["outbound"]  # no route out of the namespace
    assert "Connection refused" in ev["host_listener"][1], ev["host_listener"]  # its loopback is not the host's
    assert "Permission denied" in ev["low_port"][1] and "Permission denied" in ev["bind_chosen"][1], ev  # Landlock
    assert ev["refused_on_every_rank"] == 12, ev  # rank 1 was refused the same (all-reduced minimum)
    (as0, cpu0, fsize0), (as1, cpu1, fsize1) = ev["rlimits"]
    assert 0 < as0 < 2 ** 62 and 0 < as1 < 2 ** 62 and cpu0 == cpu1 == 61 and fsize0 == fsize1 == 64 << 20, ev  # per rank


def test_a_rank_that_dies_ends_the_finding_and_not_the_worker(runner):
    worker = runner.pid
    v = runner.run("TEST", {"world": 2}, target=f"{T}:rank_one_dies", timeout=30)
    assert v["verdict"] == "error" and v["reason"].startswith("rank 1: the experiment crashed the worker (exit code 9)"), v
    again = runner.run("TEST", {"world": 2}, target=f"{T}:ok")
    assert again["verdict"] == "confirmed" and again["evidence"] == {"rank": 0} and runner.pid == worker, again


def test_one_timeout_holds_both_ranks(runner):
    worker = runner.pid
    v = runner.run("TEST", {"world": 2}, target=f"{T}:rank_one_hangs", timeout=2)
    assert v["verdict"] == "inconclusive" and v["reason"] == "timeout after 2 s", v  # rank 0's verdict alone is not one
    assert runner.pid == worker and runner.run("TEST", {"world": 2}, target=f"{T}:ok")["verdict"] == "confirmed"


def test_without_the_sandbox_nothing_runs_on_ranks():
    with Runner(device="cpu", timeout=30, unsandboxed=True, lazy=True, extra_sys_path=[HERE]) as r:
        v = r.run("TEST", {"world": 2}, target=f"{T}:ok")
        assert "2-rank findings: not run" in " ".join(r.layers), r.layers
    assert v["verdict"] == "inconclusive" and v["reason"].startswith("not run on 2 ranks: "), v
    assert "network namespace" in v["reason"], v


_FILES = {
    "hook.py": """import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
model.register_comm_hook(state=None, hook=default.fp16_compress_hook)
""",
    "policy.py": """import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
policy = MixedPrecisionPolicy(
    param_dtype=torch.bfloat16,
    reduce_dtype=torch.float16,
)
fully_shard(model, mp_policy=policy)
""",
}


def _lint(tmp_path):
    from amplint import Config, lint_paths

    for name, text in _FILES.items():
        (tmp_path / name).write_text(text)
    found = lint_paths([str(tmp_path)], Config(root=str(tmp_path))).diagnostics
    return sorted((d for d in found if d.code == "AMP803"), key=lambda d: d.filename)


def test_the_parent_reads_the_flagged_call_and_its_torch_imports(tmp_path):
    hook, policy = _lint(tmp_path)
    data = Preludes().data_for(hook)
    assert data["snippet"] == "model.register_comm_hook(state=None, hook=default.fp16_compress_hook)", data
    assert data["names"] == {"default": HOOKS}, data
    data = Preludes().data_for(policy)  # flagged at the `reduce_dtype=` value: the call it is passed to
    assert data["snippet"].startswith("MixedPrecisionPolicy(") and data["names"]["MixedPrecisionPolicy"] == POLICY, data
    assert torch_imports("import torch.distributed as dist\nfrom os import path\n", "dist.f(path)") == {"dist": "torch.distributed"}


def test_verify_runs_the_users_code_on_two_ranks(runner, tmp_path):
    found = _lint(tmp_path)
    assert verify_diagnostics(found, device="cpu", runner=runner) == 2
    for d in found:
        assert (d.verification["verdict"], d.verification["method"]) == ("confirmed", "snippet"), d.verification


_MASTER = {
    "builder.py": """import torch

def build(config):
    model = Net(config).cuda().bfloat16()
    return model
""",
    "train.py": """import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy as MPP
from builder import build

def main(config):
    model = build(config)
    policy = MPP(
        param_dtype=torch.bfloat16,
        reduce_dtype=torch.float32,
    )
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
""",
}


def test_amp804_the_parent_reads_the_cast_and_the_wrappers_policy_and_verify_runs_them(runner, tmp_path):
    from amplint import Config, lint_paths

    for name, text in _MASTER.items():
        (tmp_path / name).write_text(text)
    found = [d for d in lint_paths([str(tmp_path)], Config(root=str(tmp_path))).diagnostics if d.code == "AMP804"]
    (d,) = found  # flagged at the cast in builder.py; the policy is train.py's
    data = Preludes().data_for(d)
    assert data["snippet"] == "Net(config).cuda().bfloat16()" and data["policy_site"] == "train.py:7", data
    assert data["policy_snippet"].startswith("MPP(") and data["policy_names"]["MPP"] == POLICY, data
    assert verify_diagnostics(found, device="cpu", runner=runner) == 1
    assert (d.verification["verdict"], d.verification["method"]) == ("confirmed", "snippet"), d.verification
