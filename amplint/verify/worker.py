"""The verifier's worker process: `python -m amplint.verify.worker --device D --seed S`.

The only place amplint imports torch. The parent (`runner.py`) starts one
worker per run and sends it one JSON request per line on stdin:

    {"op": "run", "id": 1, "code": "AMP101", "target": "amplint.verify.experiments.amp101:run",
     "data": {...}, "seed": 0}
    {"op": "exit"}

and reads one JSON object per line from the worker's *original* stdout:

    {"op": "hello", "env": {...}}            # once, after torch is imported
    {"op": "hello", "error": "..."}          # the device cannot be used
    {"op": "result", "id": 1, "result": {...verdict...}}

File descriptor 1 is re-pointed at stderr before anything else runs, so prints
from experiments or from the user's snippets can never corrupt the protocol.
The parent starts the worker in a fresh temporary directory (its cwd) in a
new session, and kills the whole process group on timeout.
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

VERDICTS = ("confirmed", "not-reproduced", "inconclusive", "error")


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
                try:  # the worker leads its own process group: take its children along
                    os.killpg(os.getpgid(0), 9)
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="amplint-parent-watch", daemon=True).start()


def _limit_resources(device_type: str) -> None:
    """No core files; cap the address space on CPU (CUDA maps huge virtual ranges, so not there)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):  # pragma: no cover
        pass
    if device_type != "cpu":
        return
    extra_mb = int(os.environ.get("AMPLINT_VERIFY_MEMORY_MB", "4096"))
    if extra_mb <= 0:
        return
    try:
        with open("/proc/self/status") as fh:
            vm_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return
    limit = (vm_kb + extra_mb * 1024) * 1024
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):  # pragma: no cover
        pass


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


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="amplint.verify.worker")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lazy", action="store_true", help="import torch only when an experiment needs it")
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
    _limit_resources("gpu" if args.device.startswith("cuda") else "unknown")
    if args.lazy:
        from .lazy_lab import LazyLab

        lab: Any = LazyLab(args.device, args.seed)
        send({"op": "hello", "env": {}, "lazy": True})
        return _serve(lab, send, proto)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy"
        try:
            from .lab import Lab, DeviceUnavailable

            lab = Lab(args.device, args.seed)
        except DeviceUnavailable as exc:
            send({"op": "hello", "error": str(exc)})
            return 3
        except Exception as exc:  # noqa: BLE001
            send({"op": "hello", "error": f"cannot start the verifier: {type(exc).__name__}: {exc}"})
            return 3
    _limit_resources(lab.device_type)
    send({"op": "hello", "env": lab.env()})
    return _serve(lab, send, proto)


def _serve(lab: Any, send: Any, proto: Any) -> int:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if request.get("op") == "exit":
            proto.flush()
            sys.stderr.flush()
            os._exit(0)  # nothing to clean up here; interpreter teardown with torch loaded is slow
        if request.get("op") == "run":
            send({"op": "result", "id": request.get("id"), "result": run_one(lab, request)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
