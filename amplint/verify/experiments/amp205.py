"""AMP205 dataparallel-bf16-autocast: DataParallel replicas under bf16 autocast.

With two or more CUDA devices: wraps a tiny model in `torch.nn.DataParallel`
over two of them, calls it under `torch.autocast("cuda", dtype=torch.bfloat16)`
and reports the dtype of each replica's output and the autocast dtype each
replica thread saw. Confirmed when a replica ran fp16 instead of bf16.

With fewer it is inconclusive ("needs 2 CUDA devices"): with one device
DataParallel calls the module in the main thread, so bf16 holds. As evidence
it shows the mechanism on the lab's device: a thread
that re-enters autocast with only `enabled=` forwarded, as `parallel_apply`
does, autocasts to the device's default dtype rather than the main thread's,
and whether `parallel_apply`'s source forwards the dtype at all.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any, Dict, List


def _parallel_apply_forwards_dtype(torch: Any) -> Any:
    try:
        from torch.nn.parallel import parallel_apply

        source = inspect.getsource(parallel_apply)
    except (ImportError, OSError, TypeError):
        return None
    return "get_autocast_dtype" in source or "dtype=" in source.split("amp.autocast(", 1)[-1].split(")", 1)[0]


def _thread_mechanism(lab: Any) -> Dict[str, Any]:
    """Main thread asks for the non-default dtype; a worker re-enters with `enabled` only."""
    torch = lab.torch
    default = torch.get_autocast_dtype(lab.device_type) if hasattr(torch, "get_autocast_dtype") else None
    asked = torch.float16 if default == torch.bfloat16 else torch.bfloat16
    lin = torch.nn.Linear(lab.IN, lab.OUT).to(lab.device)
    replica = torch.nn.Linear(lab.IN, lab.OUT).to(lab.device)  # its own weights, as DataParallel's replicas have
    x = torch.randn(4, lab.IN).to(lab.device)
    seen: Dict[str, Any] = {}

    def worker(enabled: bool) -> None:
        seen["thread_autocast_enabled_before_reentry"] = torch.is_autocast_enabled(lab.device_type)
        try:
            with torch.autocast(lab.device_type, enabled=enabled):
                seen["thread_autocast_dtype"] = lab.dtype_name(torch.get_autocast_dtype(lab.device_type))
                seen["thread_linear_dtype"] = lab.dtype_name(replica(x).dtype)
        except Exception as exc:  # noqa: BLE001
            seen["thread_error"] = lab.exc(exc)

    with torch.autocast(lab.device_type, dtype=asked):
        main = lab.dtype_name(lin(x).dtype)
        th = threading.Thread(target=worker, args=(torch.is_autocast_enabled(lab.device_type),))
        th.start()
        th.join()
    return {
        "device": lab.device_type,
        "device_default_dtype": lab.dtype_name(default),
        "main_thread_asked": lab.dtype_name(asked),
        "main_thread_linear_dtype": main,
        **seen,
    }


def _replicas(lab: Any, ids: List[int]) -> Dict[str, Any]:
    torch = lab.torch
    seen: Dict[int, Any] = {}

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(lab.IN, lab.OUT)

        def forward(self, x: Any) -> Any:
            out = self.lin(x)
            seen[x.device.index] = {
                "output_dtype": lab.dtype_name(out.dtype),
                "thread_autocast_dtype": lab.dtype_name(torch.get_autocast_dtype("cuda")),
                "main_thread": threading.current_thread() is threading.main_thread(),
            }
            return out

    model = torch.nn.DataParallel(Probe().to(torch.device("cuda", ids[0])), device_ids=ids)
    x = torch.randn(8 * len(ids), lab.IN, device=torch.device("cuda", ids[0]))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    torch.cuda.synchronize()
    return {"gathered_output_dtype": lab.dtype_name(out.dtype), "replicas": {f"cuda:{k}": v for k, v in sorted(seen.items())}}


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    ev: Dict[str, Any] = {
        "cuda_devices": count,
        "parallel_apply_forwards_dtype": _parallel_apply_forwards_dtype(torch),
        "thread_mechanism": _thread_mechanism(lab),
    }
    if not lab.is_cuda or count < 2:
        if lab.is_cuda:  # one GPU: DataParallel runs the module in the main thread
            ev["one_device"] = _replicas(lab, [lab.device.index or 0])
        mech = ev["thread_mechanism"]
        return lab.inconclusive(
            "needs 2 CUDA devices",
            ev,
            summary=(
                f"{count} CUDA device(s); mechanism on {mech['device']}: main thread asked "
                f"{mech['main_thread_asked']}, a thread re-entering autocast with only enabled= ran "
                f"{mech.get('thread_linear_dtype')}"
                + (" (the device default)" if mech.get("thread_linear_dtype") == mech.get("device_default_dtype") else "")
            ),
            dtype=torch.bfloat16,
        )
    first = lab.device.index or 0
    ids = [first] + [i for i in range(count) if i != first][:1]
    ev.update(_replicas(lab, ids))
    dtypes = {k: v["output_dtype"] for k, v in ev["replicas"].items()}
    off = {k: d for k, d in dtypes.items() if d != "bf16"}
    if off:
        return lab.confirmed(
            f"DataParallel over {len(ids)} GPUs under bf16 autocast: replica outputs {dtypes} "
            f"(gathered {ev['gathered_output_dtype']}); the code asked for bf16",
            ev,
            dtype=torch.bfloat16,
        )
    return lab.not_reproduced(
        f"DataParallel over {len(ids)} GPUs under bf16 autocast: every replica ran bf16 ({dtypes})", ev, dtype=torch.bfloat16
    )
