"""The runtime verifier behind `amplint --verify`.

Importing this package never imports torch: the parent side (`runner.py`)
talks JSON to one worker subprocess (`worker.py`), the only place torch is
imported. Experiments live in `experiments/ampNNN.py`, one per rule code, each
`run(finding_data, lab) -> verdict dict`. The contract (data keys, verdict
fields) is documented in docs/verifier.md.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from .prelude import Preludes
from .runner import DEFAULT_TIMEOUT, Runner, VerifyError, terminating_cleanly, torch_available
from .verdicts import honest

__all__ = [
    "DEFAULT_TIMEOUT",
    "Runner",
    "VerifyError",
    "experiment_codes",
    "has_experiment",
    "torch_available",
    "validate_device",
    "verify_diagnostics",
    "INSTALL_HINT",
]

INSTALL_HINT = "--verify needs torch in this environment: pip install 'amplint[verify]'"
_EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "experiments")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def experiment_codes() -> List[str]:
    """Rule codes that have an experiment (from the file names; nothing imported)."""
    try:
        names = os.listdir(_EXPERIMENTS)
    except OSError:  # pragma: no cover
        return []
    return sorted(n[:-3].upper() for n in names if re.fullmatch(r"amp\d{3}\.py", n))


def has_experiment(code: str) -> bool:
    return os.path.isfile(os.path.join(_EXPERIMENTS, f"{code.lower()}.py")) and bool(re.fullmatch(r"AMP\d{3}", code))


def validate_device(device: str) -> str:
    """auto | cpu | cuda | cuda:N (case-insensitive) or VerifyError."""
    spec = (device or "auto").strip().lower()
    if not _DEVICE.match(spec):
        raise VerifyError(f"--device {device!r}: use auto, cpu, cuda or cuda:N")
    return spec


def _key(code: str, data: Dict[str, Any]) -> Tuple[str, str]:
    return code, json.dumps(data, sort_keys=True, default=str)


def verify_diagnostics(
    diagnostics: Iterable[Any],
    device: str = "auto",
    timeout: float = DEFAULT_TIMEOUT,
    seed: int = 0,
    runner: Optional[Runner] = None,
    on_result: Optional[Callable[[Any, Dict[str, Any]], None]] = None,
    budget: Optional[float] = None,
    unsandboxed: bool = False,
    on_start: Optional[Callable[[List[str]], None]] = None,
    store: Optional[Any] = None,
) -> int:
    """Set `d.verification` on every diagnostic whose rule has an experiment.

    Findings with identical (code, data) run once. Returns how many diagnostics
    got a verdict. Raises VerifyError when the verifier cannot run at all (no
    torch, device unavailable, no sandbox and not `unsandboxed`, the worker does
    not start). `on_start(layers)` hears what confines the worker before any
    finding runs. SIGTERM/SIGHUP end the run like Ctrl-C: temp folders removed.
    `store` (a `store.VerdictStore`) keeps each verdict for the editor, saved at the end
    (also when the run is cut short).
    """
    todo = [d for d in diagnostics if has_experiment(d.code)]
    if not todo:
        return 0
    if not torch_available():
        raise VerifyError(INSTALL_HINT)
    device = validate_device(device)
    own = runner is None
    cache: Dict[Tuple[str, str], Dict[str, Any]] = {}
    preludes = Preludes()
    if store is not None:
        from .store import FileDigests

        digests = FileDigests()
    with terminating_cleanly():
        runner = runner or Runner(device=device, timeout=timeout, seed=seed, budget=budget, unsandboxed=unsandboxed)
        try:
            runner.start()
            if on_start is not None:
                on_start(list(getattr(runner, "layers", [])))
            for d in todo:
                data = preludes.data_for(d)  # the finding's data and the file's own helpers it uses
                key = _key(d.code, data)
                if key not in cache:
                    # checked here too: only a run of the user's code may confirm or refute
                    cache[key] = honest(runner.run(d.code, data))
                d.verification = dict(cache[key])
                if store is not None:
                    store.record(d, digests.of(d.filename), d.verification)
                if on_result is not None:
                    on_result(d, d.verification)
        finally:
            if own:
                runner.close()
            if store is not None:
                store.save()
    return len(todo)
