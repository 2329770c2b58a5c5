"""AMP801-AMP803 measured on a real distributed engine: torch.distributed, gloo, 2 processes on CPU.

    python -m amplint.verify.experiments._distributed [clip|scaler|reduce ...]   (JSON on stdout)

Each measurement runs on every rank of a 2-process gloo group (`run_ranks`: fresh interpreters,
a FileStore rendezvous in a temporary folder, gloo's TCP pairs on the loopback interface only) and
returns one JSON-able dict per rank; `measure` merges them. The numbers are in docs/evidence.md
(AMP801, AMP802, AMP803) and tests/test_scale_evidence.py asserts the claims on them.

FSDP1 (`FullyShardedDataParallel`) cannot run here: on a machine without an accelerator its
constructor raises "FSDP needs a non-CPU accelerator device, but no accelerator device is detected"
(torch 2.13; `fsdp1_on_cpu` records the message each time). Where FSDP1's behaviour is the claim, the
measurement uses a stand-in for its sharding, and says so: the model's parameters flattened and split
into one contiguous shard per rank (FSDP1's FlatParameter under FULL_SHARD), each rank holding the
shard of the reduced gradient the reduce-scatter would give it (both ranks run the same batch, so the
reduced gradient is the local one). The scalers, the clip and the collectives are torch's own. FSDP2
(`fully_shard`), DDP and DDP's `fp16_compress_hook` are the real ones.

`joined(data)` is the other use: inside the sandbox, a finding's experiment (AMP803) runs on 2
sibling rank processes the worker starts (`forked.run_group`), and `joined` puts each into their
gloo group (the rendezvous file the worker named in `data["_group"]`, gloo's pairs on the sandbox's
own loopback).

Importing this module imports no torch (the verifier's worker imports every experiment module).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

WORLD = 2
#: the MLP every measurement trains: Linear(8, 16), ReLU, Linear(16, 4); batch 64
BATCH = 64
#: weight on output 3 in the loss: at GradScaler's default scale 65536 the fp16 backward of the last
#: layer overflows (its weight row 3 and bias 3) while the first layer's gradients stay finite
SPIKE = 10.0
DEFAULT_SCALE = 65536.0


# ----------------------------------------------------------------------------------- launching
def run_ranks(names: Sequence[str], timeout: float = 180.0, world: int = WORLD) -> Dict[int, Dict[str, Any]]:
    """Run the measurements `names` in turn on `world` fresh processes (one group for all of them);
    {rank: {name: its result}}. Raises RuntimeError with the ranks' stderr when one fails or the
    group does not finish within `timeout` seconds."""
    names = list(names)
    name = ",".join(names)
    with tempfile.TemporaryDirectory(prefix="amplint-dist-") as tmp:
        store = os.path.join(tmp, "store")
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env["PYTHONPATH"] = home + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        procs = []
        for rank in range(world):
            out = os.path.join(tmp, f"rank{rank}.json")
            code = f"from amplint.verify.experiments._distributed import _child; _child({names!r}, {rank}, {world}, {store!r}, {out!r})"
            procs.append((subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE, text=True), out))
        errors: List[str] = []
        for rank, (proc, _) in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for p, _ in procs:
                    p.kill()
                raise RuntimeError(f"{name}: the {world} ranks did not finish in {timeout:g} s") from None
            if proc.returncode != 0:
                errors.append(f"rank {rank} exited {proc.returncode}: {err[-1500:]}")
        if errors:
            raise RuntimeError(f"{name}: " + "; ".join(errors))
        results = {}
        for rank, (_, out) in enumerate(procs):
            with open(out, encoding="utf-8") as fh:
                results[rank] = json.load(fh)
        return results


def _child(names: List[str], rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    try:
        result = {name: MEASUREMENTS[name](rank, world) for name in names}
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    # torch 2.13's gloo can abort at interpreter teardown after the group is destroyed ("terminate
    # called without an active exception", exit -6, about one run in five under load): the result
    # is written, so leave without the C++ teardown and let the exit status say how the ranks went
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: seconds a collective of a finding's ranks may wait for the other rank (the worker's deadline
#: kills both sooner when the finding's timeout is shorter)
GROUP_TIMEOUT_S = 120


@contextlib.contextmanager
def joined(data: Dict[str, Any]) -> Iterator[Tuple[int, int]]:
    """(rank, world) inside the finding's gloo group; left (after a barrier) on the way out.
    Only the worker's `data["_group"]` names the group: without it, LookupError."""
    import datetime

    import torch.distributed as dist

    group = data.get("_group")
    if not isinstance(group, dict) or not isinstance(group.get("store"), str):
        raise LookupError("not started on ranks")
    rank, world = int(group["rank"]), int(group["world"])
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # the sandbox's loopback: the only interface there is
    dist.init_process_group("gloo", init_method="file://" + group["store"], rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    try:
        yield rank, world
        dist.barrier()  # no rank tears the group down while the other still uses it
    finally:
        dist.destroy_process_group()


def measure(names: Sequence[str], timeout: float = 180.0) -> Dict[str, Dict[str, Any]]:
    """{name: {"rank0": ..., "rank1": ..., "torch": version, "world": 2}} for each measurement."""
    import torch

    ranks = run_ranks(names, timeout)
    return {name: {"torch": torch.__version__, "world": len(ranks), **{f"rank{r}": v[name] for r, v in sorted(ranks.items())}}
            for name in names}


# ----------------------------------------------------------------------------------- shared pieces
def _model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch() -> Any:
    import torch

    return torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(1))


def _loss(model: Any, x: Any, spike: float = 1.0, autocast: bool = False) -> Any:
    """mean over the batch of the outputs, output 3 weighted by `spike`; the forward under fp16
    autocast when asked."""
    import torch

    weight = torch.ones(4)
    weight[3] = spike
    if autocast:
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
    else:
        out = model(x)
    return (out.float() * weight).mean()


def fsdp1_on_cpu() -> Optional[str]:
    """FullyShardedDataParallel's answer on this machine: None when it wraps, else its error."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    try:
        FullyShardedDataParallel(_model())
    except Exception as exc:  # noqa: BLE001 - the message is the measurement
        return f"{type(exc).__name__}: {exc}"
    return None


def fsdp1_reason(torch: Any, subject: str = "FSDP1 (FullyShardedDataParallel)") -> str:
    """Why an FSDP1 finding (AMP801, AMP802, AMP803 on `MixedPrecision` or Lightning's FSDP)
    gets no verdict here; `subject` is what wraps the model."""
    accelerator = getattr(torch, "accelerator", None)
    if not (accelerator is not None and accelerator.is_available()):
        return (f"needs an accelerator: {subject} raises without one "
                "('FSDP needs a non-CPU accelerator device', docs/evidence.md#amp801)")
    return f"needs 2 accelerators on 2 ranks: {subject} runs of a finding are not built yet"


class _FlatShard:
    """The stand-in for FSDP1's FULL_SHARD layout: every parameter flattened into one vector, split
    into `world` contiguous shards (padded at the end); this rank owns one as an nn.Parameter."""

    def __init__(self, model: Any, rank: int, world: int) -> None:
        import torch

        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        self.numel = flat.numel()
        self.size = -(-self.numel // world)
        flat = torch.nn.functional.pad(flat, (0, self.size * world - self.numel))
        self.start = rank * self.size
        self.param = torch.nn.Parameter(flat[self.start:self.start + self.size].clone())
        self.names = [(n, p.numel()) for n, p in model.named_parameters()]

    def take_grad(self, model: Any) -> None:
        """This rank's shard of the (reduced) gradient, as FSDP1 leaves it in the flat parameter."""
        import torch

        flat = torch.cat([p.grad.detach().flatten() for p in model.parameters()])
        flat = torch.nn.functional.pad(flat, (0, self.size * WORLD - self.numel))
        self.param.grad = flat[self.start:self.start + self.size].clone()

    def owned(self) -> List[str]:
        """The parameters (names) any element of which lies in this rank's shard."""
        out, at = [], 0
        for name, n in self.names:
            if at < self.start + self.size and at + n > self.start:
                out.append(name)
            at += n
        return out


# ----------------------------------------------------------------------------------- AMP801
def clip(rank: int, world: int) -> Dict[str, Any]:
    """torch.nn.utils.clip_grad_norm_ on a rank's shard (FSDP1 stand-in) vs the global norm; and on an
    FSDP2 (`fully_shard`) model, against the unsharded model's norm."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    max_norm = 0.25
    x = _batch()
    ref = _model()
    _loss(ref, x).backward()
    true_norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), float("inf")))

    shard = _FlatShard(ref, rank, world)
    shard.take_grad(ref)
    before = shard.param.grad.clone()
    local = float(torch.nn.utils.clip_grad_norm_([shard.param], max_norm))
    applied = float(shard.param.grad.norm() / before.norm())
    total = torch.tensor([local ** 2])
    dist.all_reduce(total)
    global_norm = float(total.sqrt())

    fsdp2 = _model()
    fully_shard(fsdp2)
    _loss(fsdp2, x).backward()
    fsdp2_norm = torch.nn.utils.clip_grad_norm_(fsdp2.parameters(), max_norm)
    fsdp2_norm = float(fsdp2_norm.full_tensor() if hasattr(fsdp2_norm, "full_tensor") else fsdp2_norm)
    return {
        "fsdp1": fsdp1_on_cpu(),
        "shard_params": shard.owned(),
        "true_norm": true_norm,
        "local_norm": local,  # what torch's clip computed on this rank's shard
        "global_norm": global_norm,  # what FSDP1's own clip_grad_norm_ all-reduces to
        "applied_factor": applied,
        "correct_factor": min(1.0, max_norm / true_norm),
        "fsdp2_norm": fsdp2_norm,
    }


# ----------------------------------------------------------------------------------- AMP802
def _scaler_step(shard_param: Any, scaler: Any) -> Dict[str, Any]:
    import torch

    opt = torch.optim.SGD([shard_param], lr=0.1)
    before = shard_param.detach().clone()
    scaler.unscale_(opt)
    found = sum(float(v) for v in scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
    scale = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    return {"found_inf": found, "stepped": not torch.equal(before, shard_param.detach()), "scale_before": scale,
            "scale_after": scaler.get_scale()}


def scaler(rank: int, world: int) -> Dict[str, Any]:
    """One fp16-autocast step whose last layer overflows at the default scale (65536), under the
    FSDP1 stand-in with a plain GradScaler and with ShardedGradScaler, and under FSDP2 with a plain
    GradScaler: which ranks found inf, stepped, and the scale each kept."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    x = _batch()
    out: Dict[str, Any] = {"fsdp1": fsdp1_on_cpu()}
    for kind, make in (("plain", lambda: torch.amp.GradScaler("cpu")), ("sharded", lambda: ShardedGradScaler("cpu"))):
        model = _model()
        sc = make()
        sc.scale(_loss(model, x, SPIKE, autocast=True)).backward()  # the scaled backward, then shard
        nonfinite = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p.grad).all())]
        shard = _FlatShard(model, rank, world)
        shard.take_grad(model)
        out[f"stand_in_{kind}"] = dict(_scaler_step(shard.param, sc), nonfinite_params=nonfinite,
                                       shard_params=shard.owned(),
                                       shard_nonfinite=int((~torch.isfinite(shard.param.grad)).sum()))
    model = _model()
    fully_shard(model)
    sc = torch.amp.GradScaler("cpu")
    sc.scale(_loss(model, x, SPIKE, autocast=True)).backward()
    local_bad = sum(int((~torch.isfinite(p.grad.to_local())).sum()) for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().to_local().clone() for p in model.parameters()]
    sc.unscale_(opt)
    found = sum(float(v) for v in sc._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
    scale = sc.get_scale()
    sc.step(opt)
    sc.update()
    stepped = any(not torch.equal(b, p.detach().to_local()) for b, p in zip(before, model.parameters()))
    out["fsdp2_plain"] = {"local_nonfinite": local_bad, "found_inf": found, "stepped": stepped, "scale_before": scale,
                          "scale_after": sc.get_scale()}
    return out


# ----------------------------------------------------------------------------------- AMP803
#: loss multipliers for the FSDP2 comparison: from typical gradients to ones near fp16's subnormals
FSDP2_MULTIPLIERS = (1.0, 1e-3, 1e-4)


def _ddp_run(hook: bool, scaled: bool, spike: float, rank: int) -> Dict[str, Any]:
    """12 steps of an fp32 DDP model, with or without fp16_compress_hook, with or without a
    GradScaler (default scale 65536): skipped steps, scales, and the reduced gradient of step 1."""
    import torch
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    ddp = nn.parallel.DistributedDataParallel(_model())
    if hook:
        ddp.register_comm_hook(None, fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    sc = torch.amp.GradScaler("cpu", enabled=scaled)
    gen = torch.Generator().manual_seed(10 + rank)
    skipped, scales, first = 0, [], None
    for _ in range(12):
        x = torch.randn(BATCH, 8, generator=gen)
        sc.scale(_loss(ddp, x, spike)).backward()
        if first is None:
            first = torch.cat([p.grad.detach().flatten() for p in ddp.parameters()]) / (sc.get_scale() if scaled else 1.0)
        before = [p.detach().clone() for p in ddp.parameters()]
        scales.append(sc.get_scale() if scaled else None)
        sc.step(opt)
        sc.update()
        skipped += all(torch.equal(b, p.detach()) for b, p in zip(before, ddp.parameters()))
        opt.zero_grad()
    return {"skipped": skipped, "scales": scales, "first_grad": first}


def reduce(rank: int, world: int) -> Dict[str, Any]:
    """Gradients reduced in fp16. DDP's fp16_compress_hook: on chosen values; over 12 steps of an fp32
    model with a GradScaler at its default scale (65536) against plain DDP; and without a scaler on
    gradients near fp16's subnormals. FSDP2 with MixedPrecisionPolicy(param_dtype=fp16) reducing in
    fp16 (reduce_dtype None, the default) against reduce_dtype=fp32, on the same fp16 gradients."""
    import torch
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    out: Dict[str, Any] = {}
    probe = nn.parallel.DistributedDataParallel(nn.Linear(4, 1, bias=False))
    probe.register_comm_hook(None, fp16_compress_hook)
    values = torch.tensor([[70000.0, 1.0, 1e-4, 3e-8]])  # the same gradient on both ranks
    with torch.no_grad():
        probe.module.weight.fill_(1.0)
    probe(values).sum().backward()
    out["hook_values"] = {"in": values.flatten().tolist(), "reduced": [str(v) for v in probe.module.weight.grad.flatten().tolist()]}

    for kind, hook in (("fp32", False), ("fp16_compress_hook", True)):
        r = _ddp_run(hook, True, SPIKE, rank)
        out[f"ddp_scaled_{kind}"] = {"skipped": r["skipped"], "scales": r["scales"]}
    tiny = 1e-7  # a loss this small: gradients around fp16's smallest normal (6.1e-5) and below
    plain = _ddp_run(False, False, tiny, rank)["first_grad"]
    hooked = _ddp_run(True, False, tiny, rank)["first_grad"]
    nonzero = plain != 0
    out["ddp_unscaled_tiny"] = {"loss_multiplier": tiny, "nonzero": int(nonzero.sum()),
                                "zeroed_by_hook": int(((hooked == 0) & nonzero).sum()),
                                "rel_l1_error": float((hooked - plain).abs().sum() / plain.abs().sum())}

    for mult in FSDP2_MULTIPLIERS:
        grads = {}
        for kind, reduce_dtype in (("fp16", None), ("fp32", torch.float32)):
            model = _model()
            fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=reduce_dtype))
            x = torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(20 + rank))  # each rank its own batch
            (_loss(model, x) * mult).backward()
            grads[kind] = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
        a, b = grads["fp16"], grads["fp32"]
        nonzero = b != 0
        out[f"fsdp2_x{mult:g}"] = {"nonzero_fp32_reduce": int(nonzero.sum()), "zeroed_fp16_reduce": int(((a == 0) & nonzero).sum()),
                                   "rel_l1_diff": float((a - b).abs().sum() / b.abs().sum()),
                                   "max_rel_diff": float(((a - b).abs()[nonzero] / b.abs()[nonzero]).max())}
    return out


MEASUREMENTS: Dict[str, Callable[[int, int], Dict[str, Any]]] = {"clip": clip, "scaler": scaler, "reduce": reduce}


if __name__ == "__main__":  # pragma: no cover - the measuring script
    names = sys.argv[1:] or list(MEASUREMENTS)
    print(json.dumps(measure(names), indent=1))
