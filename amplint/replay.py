"""`amplint replay FILE`: re-run a saved overflowing step, inside the verifier's sandbox.

An incident file comes off a cluster, from anyone who could write there, so it is
data until proven otherwise: the host reads it with `torch.load(weights_only=True)`
(`watch.replay.load_incident`: tensors, numbers and strings; an old whole-pickle
incident, or a pickle that calls `os.system`, is refused with one line and exit 2,
having run nothing). The step itself needs the model's code, which the incident's
`objects` pickle and the training script bring: it runs in the verifier's sandbox
(`verify.runner.Runner`, as `--verify` runs flagged code: namespaces, a read-only view
holding only Python, amplint, the incident and the script's folder, Landlock, seccomp,
rlimits), through `watch.replay.sandboxed`. Where the sandbox cannot start, replay
refuses unless `--unsandboxed` (only for incidents you trust).

Exit code 1 when the recorded precision overflows, 0 when it does not, 2 when the
snapshot cannot be replayed. The console script dispatches here (`_start.SUBCOMMANDS`);
this module sits above watch/ and verify/, which do not import each other.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

#: seconds the replayed step may take in the sandbox (both passes), unless --timeout
DEFAULT_TIMEOUT = 300.0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="amplint replay", description="Re-run a saved overflowing step in the recorded precision and in fp32, sandboxed.")
    p.add_argument("file", help="an incident snapshot, DIR/incidents/stepN.pt")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    p.add_argument("--main", default=None, metavar="SCRIPT", help="the training script defining the model classes (default: the one recorded)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds the step may take (at most 600)")
    p.add_argument("--unsandboxed", action="store_true", help="run the step where the sandbox cannot start (only for incidents you trust)")
    args = p.parse_args(list(sys.argv[2:] if argv is None else argv))
    from .watch.findings import clean
    from .watch.replay import NotAnIncident, load_incident

    def fail(message: str) -> int:
        sys.stderr.write(f"amplint replay: error: {clean(message, 600)}\n")
        return 2

    path = os.path.abspath(args.file)
    try:
        snap = load_incident(path)
    except NotAnIncident as exc:
        return fail(f"cannot load {args.file}: {exc}")
    main_file = args.main or snap.get("main_file")
    main_file = os.path.abspath(main_file) if isinstance(main_file, str) and main_file and os.path.isfile(main_file) else None
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    from .verify.runner import MAX_TIMEOUT, Runner, VerifyError, check_seconds

    try:
        timeout = check_seconds(args.timeout, "--timeout", MAX_TIMEOUT)
        read = [os.path.dirname(path)] + ([os.path.dirname(main_file)] if main_file else [])
        with Runner(device=device, timeout=timeout, lazy=True, unsandboxed=args.unsandboxed, read_only=read) as runner:
            runner.start()
            sys.stderr.write("amplint replay: sandbox: " + "; ".join(runner.layers) + "\n")
            verdict = runner.run("REPLAY", {"path": path, "main": main_file, "device": device}, target="amplint.watch.replay:sandboxed")
    except VerifyError as exc:
        return fail(str(exc) + (" (--unsandboxed runs it bare, only for incidents you trust)" if "sandbox" in str(exc) or "bubblewrap" in str(exc) else ""))
    ev = verdict.get("evidence") or {}
    if verdict.get("verdict") not in ("confirmed", "not-reproduced"):
        if ev.get("no_model"):
            return fail(f"the model ({ev['no_model']}) could not be saved with the snapshot")
        why = verdict.get("reason") or "the replay failed"
        detail = ev.get("output") or ""
        return fail(f"cannot replay {args.file}: {why}" + (f": {detail}" if detail else ""))
    ac = snap.get("autocast") or {}
    label = f"{ac['dtype']} autocast" if ac.get("enabled") and ac.get("dtype") else "recorded precision (no autocast)"
    low, high = ev.get("low"), ev.get("high")
    out = sys.stdout
    out.write(f"amplint replay: step {clean(snap.get('step'))} (loss scale {clean(snap.get('loss_scale'))}), on {clean(device)}\n")
    out.write(f"  {clean(label)}: " + (f"first non-finite: {clean(low)}" if low else "all outputs and gradients finite") + "\n")
    out.write("  float32: " + (f"first non-finite: {clean(high)}" if high else "all outputs and gradients finite") + "\n")
    if low and not high:
        out.write(f"{clean(low)} overflows in {clean(ac.get('dtype'))} and not in float32\n")
    elif low and high:
        out.write("non-finite in float32 too: the values themselves blow up (learning rate, data, initialization), not only the precision\n")
    return 1 if low else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
