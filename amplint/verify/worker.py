"""The verifier's worker process: `python -m amplint.verify.worker --device D --seed S`.

The only place amplint imports torch. The parent (`runner.py`) starts one worker
per run, inside the sandbox (`sandbox.py`), and sends it one JSON request per line
on stdin:

    {"op": "run", "id": 1, "code": "AMP101", "target": "amplint.verify.experiments.amp101:run",
     "data": {...}, "seed": 0, "timeout": 60}
    {"op": "exit"}

and reads one JSON object per line from the worker's *original* stdout:

    {"op": "hello", "env": {...}, "layers": [...]}   # once, after torch is imported
    {"op": "hello", "error": "..."}                  # the device cannot be used
    {"op": "result", "id": 1, "result": {...verdict...}}

The worker never runs an experiment (or the user's code) itself: each request runs
in a forked, confined child (`forked.py`) that cannot reach the protocol pipe, and
the worker enforces the request's timeout, so a hang or crash costs one verdict,
not the warm worker. An experiment whose module's `ranks(data)` says 2 runs on two
sibling rank processes in a gloo group (`_run_ranks`). File descriptor 1 is re-pointed at stderr before anything
else runs, so the worker's own prints never reach the protocol either.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback
import warnings
from typing import Any, Dict, Optional

from .forked import VERDICTS, ranks_refused, run_forked, run_group


def _protocol_stream():
    """Keep the real stdout for the protocol; send fd 1 (and sys.stdout) to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _watch_parent() -> None:
    """Exit when the parent goes away (killed amplint): never outlive it, even mid-experiment."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                try:
                    from .confine import kill_descendants

                    kill_descendants()
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="amplint-parent-watch", daemon=True).start()


def jsonable(value: Any, depth: int = 0) -> Any:
    """Evidence values made JSON-safe: non-finite floats become strings, tensors numbers."""
    if depth > 6:
        return repr(value)[:200]
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "numel", lambda: 2)() == 1:
        try:
            return jsonable(item(), depth + 1)
        except Exception:  # noqa: BLE001
            pass
    return str(value)[:300]


def run_one(lab: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    """Run one experiment; never raises. Adds environment, seed and duration."""
    code = request.get("code") or "?"
    data = request.get("data") or {}
    seed = int(request.get("seed", 0))
    target = request.get("target") or f"amplint.verify.experiments.{code.lower()}:run"
    start = time.perf_counter()
    lab.begin(code, seed)
    try:
        module_name, _, func_name = target.partition(":")
        func = getattr(importlib.import_module(module_name), func_name or "run")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = func(dict(data), lab)
        if not isinstance(result, dict) or result.get("verdict") not in VERDICTS:
            result = lab.error(f"experiment returned {result!r:.200} instead of a verdict")
    except Exception as exc:  # noqa: BLE001 - an experiment bug is a verdict, not a crash
        tb = traceback.format_exc(limit=-3)
        result = lab.error(f"experiment failed: {type(exc).__name__}: {str(exc)[:300]}", traceback=tb[-1500:])
    finally:
        try:
            lab.end()
        except Exception as exc:  # noqa: BLE001 - e.g. a CUDA error surfacing at synchronize
            result = lab.error(f"the device failed after the experiment: {type(exc).__name__}: {str(exc)[:300]}")
    out = dict(result)
    env = lab.env()
    if data.get("device") == "cuda" and env.get("device_type") == "cpu" and out.get("verdict") in VERDICTS[:2]:
        # honest about where it ran: the verdict is about behaviour CPU and CUDA share
        out.setdefault("evidence", {})["ran_on"] = "cpu (the flagged code targets cuda)"
    out.setdefault("method", "experiment")
    out.setdefault("evidence", {})
    out.setdefault("dtype", data.get("dtype"))
    out.update(env)
    out["experiment"] = code
    out["seed"] = seed
    out["duration_s"] = round(time.perf_counter() - start, 3)
    return jsonable(out)


def _fail_verdict(kind: str, problem: str, request: Dict[str, Any], env: Dict[str, Any], output: str) -> Dict[str, Any]:
    """The worker's own verdict when a finding's process gave none (timeout, crash, garbage)."""
    data = request.get("data") or {}
    evidence: Dict[str, Any] = {}
    if kind == "timeout":
        evidence["timeout_s"] = request.get("timeout")
    elif output.strip():
        lines = [ln for ln in output.splitlines() if ln.strip() and "Failed to initialize NumPy" not in ln]
        evidence["output"] = " | ".join(lines[-6:])[-600:]
    out: Dict[str, Any] = {
        "verdict": "inconclusive" if kind in ("timeout", "inconclusive") else "error",
        "reason": problem,
        "method": "experiment",
        "summary": None,
        "evidence": evidence,
        "dtype": data.get("dtype"),
    }
    out.update(env)
    out.update({"experiment": request.get("code") or "?", "seed": int(request.get("seed", 0)), "duration_s": None})
    return out


def _timeout(request: Dict[str, Any]) -> float:
    """The request's timeout, strictly a finite positive number (else the worker's default)."""
    value = request.get("timeout")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return 60.0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="amplint.verify.worker")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lazy", action="store_true", help="import torch only when an experiment needs it")
    parser.add_argument("--memory-mb", type=int, default=4096, help="address space each finding may add (CPU)")
    parser.add_argument("--read", action="append", default=[], help="a folder findings may read (Landlock)")
    parser.add_argument("--require-seccomp", action="store_true", help="refuse to start without the seccomp filter")
    parser.add_argument("--cgroup", default="", help="why no cgroup v2 bounds a finding here (the layers line says it)")
    parser.add_argument("--private-network", action="store_true",
                        help="this worker is in the sandbox's network namespace (checked: only `lo`): 2-rank findings may run")
    args = parser.parse_args(argv)
    proto = _protocol_stream()
    _watch_parent()

    def send(obj: Dict[str, Any]) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        import faulthandler

        faulthandler.enable(sys.stderr)
    except Exception:  # noqa: BLE001 # pragma: no cover
        pass
    from . import confine, seccomp
    from .forked import Limits

    layers = []
    try:
        program: Optional[seccomp.Program] = seccomp.build()
    except seccomp.SeccompUnavailable as exc:
        if args.require_seccomp:
            send({"op": "hello", "error": f"the per-finding seccomp filter cannot be built here: {exc}"})
            return 3
        program = None
        layers.append(f"no seccomp ({exc})")
    keyctl_nr = program.numbers.get("keyctl") if program is not None else _KEYCTL.get(os.uname().machine)
    if keyctl_nr is not None:
        try:  # the worker itself never holds the caller's session keyring either
            confine.fresh_session_keyring(keyctl_nr)
            layers.append("fresh session keyring")
        except OSError as exc:
            keyctl_nr = None
            layers.append(f"inherited session keyring ({exc.strerror})")
    try:
        confine.mark_worker()
        layers.append("subreaper")
    except OSError:  # pragma: no cover - not Linux
        pass
    abi = confine.landlock_abi()
    devices = [os.devnull, "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/shm"]
    if args.device != "cpu":
        import glob

        devices += sorted(glob.glob("/dev/nvidia*"))
    limits = Limits(
        memory_mb=args.memory_mb,
        landlock_abi=abi,
        read_paths=list(args.read) + ["/proc", "/sys"],  # devices: only those listed, never disks
        devices=devices,
        seccomp=program.bpf if program is not None else None,
        keyctl_nr=keyctl_nr,
        rank_seccomp=program.rank_bpf if program is not None else None,
        private_network=bool(args.private_network) and confine.only_loopback(),
    )
    if abi:
        layers.append(f"landlock ABI {abi}")
    layers.append("rlimits")
    layers.extend(seccomp.summary(program))
    layers.append(_ranks_layer(limits))
    close = [proto.fileno(), 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy"
        try:
            lab, probe = _make_lab(args)
        except Exception as exc:  # noqa: BLE001
            send({"op": "hello", "error": _lab_error(exc)})
            return 3
    if not probe and not args.lazy:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _warm_up(lab)
    env = lab.env()
    if probe:  # CUDA: the device opens in each finding's process (CUDA does not survive fork)
        outcome = run_forked(lambda: {"verdict": "confirmed", "method": "experiment", "env": _probe(lab)}, limits, 180.0, close)
        if outcome.result is None or "error" in (outcome.result.get("env") or {}):
            why = (outcome.result or {}).get("env", {}).get("error") or outcome.problem or "the device probe failed"
            send({"op": "hello", "error": str(why)})
            return 3
        env = outcome.result["env"]
    limits.cap_address_space = env.get("device_type", "cpu") == "cpu" and not probe
    layers.append(_memory_layer(limits, program is not None, args.cgroup))
    send({"op": "hello", "env": env, "lazy": bool(args.lazy), "layers": layers})
    return _serve(lab, send, limits, close, env)


#: keyctl's number where no libseccomp can tell it (the filter's absence is reported anyway)
_KEYCTL = {"x86_64": 250, "aarch64": 219}


def _ranks_layer(limits: Any) -> str:
    """The layers line's words for 2-rank findings (AMP803): how they are confined, or why not run."""
    from . import confine

    refused = ranks_refused(limits)
    if refused is None:
        try:
            low, high = confine.ephemeral_ports()
        except OSError as exc:
            refused = f"no ephemeral port range ({exc})"
    if refused is not None:
        return f"2-rank findings: not run ({refused})"
    return (f"2-rank findings: two sibling processes, each confined as a finding but for TCP sockets on the sandbox's "
            f"own loopback (Landlock: bind to a kernel-picked port, connect to {low}-{high}) and NETLINK_ROUTE")


def _memory_layer(limits: Any, one_process: bool, cgroup: str) -> str:
    """The layers line's words for the memory and process bound of a finding."""
    why = f"no cgroup v2: {cgroup}" if cgroup else "no cgroup v2"
    if limits.cap_address_space and limits.memory_mb > 0:
        bound = f"address space <= worker + {limits.memory_mb} MB"
    else:
        bound = "no address-space limit (CUDA reserves address space)"
    if one_process:
        return f"memory: one process per finding, {bound} ({why})"
    return f"memory: {bound} per process, processes bounded by the timeout and reaper ({why})"


def _make_lab(args: Any) -> Any:
    """(lab, probe): a CPU lab built here, or a lazy one that each finding's process builds
    (`--lazy`, and CUDA, which does not survive fork: probe=True opens it once to say hello)."""
    from .lazy_lab import LazyLab

    if args.lazy:
        return LazyLab(args.device, args.seed), False
    if args.device != "cpu" and (args.device != "auto" or _cuda_visible()):
        import torch  # noqa: F401 - warm for every finding; CUDA itself is not touched here

        return LazyLab(args.device, args.seed), True
    from .lab import Lab

    return Lab("cpu", args.seed), False


def _warm_up(lab: Any) -> None:
    """Pay torch's lazy first-use costs once, here, not in every finding's process: import the
    experiments (amplint's own code) and what creating an optimizer pulls in (torch._dynamo,
    seconds), and run one tiny scaled, autocast training step. No user code runs here."""
    from . import experiments

    folder = os.path.dirname(os.path.abspath(experiments.__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and name != "__init__.py":
            module = importlib.import_module(f"{experiments.__name__}.{name[:-3]}")
            if callable(getattr(module, "warm", None)):  # e.g. torch.distributed for the ranks
                module.warm()
    importlib.import_module(".snippet", __package__)
    torch = lab.torch
    lab.begin("warm-up", 0)
    try:
        model = lab.model()
        for cls in ("SGD", "Adam", "AdamW"):
            opt = lab.optimizer(model.parameters(), cls)
            scaler = lab.scaler()
            x, y = lab.batch()
            for dtype in (torch.float16, torch.bfloat16):
                with lab.autocast(dtype):
                    loss = torch.nn.functional.mse_loss(model(x).float(), y)
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
    finally:
        lab.end()


def _cuda_visible() -> bool:
    """Whether CUDA devices exist, asked without initializing CUDA in this process (NVML)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return bool(torch.cuda.is_available())


def _probe(lab: Any) -> Dict[str, Any]:
    try:
        lab.materialize()
    except Exception as exc:  # noqa: BLE001
        return {"error": _lab_error(exc)}
    return lab.env()


def _lab_error(exc: BaseException) -> str:
    from .lab import DeviceUnavailable

    if isinstance(exc, DeviceUnavailable):
        return str(exc)
    return f"cannot start the verifier: {type(exc).__name__}: {exc}"


def _serve(lab: Any, send: Any, limits: Any, close: list, env: Dict[str, Any]) -> int:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict):
            continue
        if request.get("op") == "exit":
            sys.stderr.flush()
            os._exit(0)  # nothing to clean up here; interpreter teardown with torch loaded is slow
        if request.get("op") == "run":
            timeout = _timeout(request)
            world = _world(request)
            if world > 1:
                result = _run_ranks(lab, request, world, limits, timeout, close, env)
            else:
                outcome = run_forked(lambda: run_one(lab, request), limits, timeout, close)
                if outcome.result is not None:
                    result = outcome.result
                else:
                    result = _fail_verdict(outcome.kind, outcome.problem or "no verdict", request, env, outcome.output())
            send({"op": "result", "id": request.get("id"), "result": result})
    return 0


#: the most ranks a finding may ask for
MAX_WORLD = 2


def _experiment_module(request: Dict[str, Any]) -> Any:
    code = request.get("code") or "?"
    target = request.get("target") or f"amplint.verify.experiments.{code.lower()}:run"
    return importlib.import_module(target.partition(":")[0])


def _world(request: Dict[str, Any]) -> int:
    """How many ranks the request's experiment runs on: its module's `ranks(data)` (amplint's
    own code, read here before anything is forked), 1 when it has none or fails."""
    try:
        ranks = getattr(_experiment_module(request), "ranks", None)
        world = int(ranks(dict(request.get("data") or {}))) if callable(ranks) else 1
    except Exception:  # noqa: BLE001 - the single-process path reports a broken experiment
        return 1
    return min(max(world, 1), MAX_WORLD)


def _run_ranks(lab: Any, request: Dict[str, Any], world: int, limits: Any, timeout: float, close: list, env: Dict[str, Any]) -> Dict[str, Any]:
    """One finding on `world` sibling rank processes (`forked.run_group`): rank r runs the
    experiment with `data["_group"]` = {rank, world, store} (the rendezvous file in their
    shared temp folder). The verdict is rank 0's when every rank gave the same one."""
    refused = ranks_refused(limits)
    if refused is not None:
        return _fail_verdict("inconclusive", f"not run on {world} ranks: {refused}", request, env, "")
    data = dict(request.get("data") or {})

    def body(rank: int, workdir: str) -> Dict[str, Any]:
        group = {"rank": rank, "world": world, "store": os.path.join(workdir, "rendezvous")}
        return run_one(lab, dict(request, data=dict(data, _group=group)))

    outcomes = run_group(body, world, limits, timeout, close)
    timed_out = next((o for o in outcomes if o.result is None and o.kind == "timeout"), None)
    if timed_out is not None:
        return _fail_verdict("timeout", timed_out.problem or "timeout", request, env, timed_out.output())
    # the rank that failed on its own, before one the worker killed because of it
    failed = sorted((o.killed, rank) for rank, o in enumerate(outcomes) if o.result is None)
    if failed:
        rank = failed[0][1]
        problem = outcomes[rank].problem or "no verdict"
        return _fail_verdict("error", f"rank {rank}: {problem}", request, env, outcomes[rank].output())
    verdicts = [o.result.get("verdict") for o in outcomes]
    if len(set(verdicts)) > 1:
        return _fail_verdict("error", f"the ranks disagree: {', '.join(f'rank {r} {v}' for r, v in enumerate(verdicts))}", request, env, "")
    return outcomes[0].result


if __name__ == "__main__":
    sys.exit(main())
