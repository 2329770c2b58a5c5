"""`amplint run [options] -- python train.py ARGS...`: watch an unmodified training run.

The command runs as given, with a temporary folder holding amplint's
sitecustomize.py first on PYTHONPATH, so every Python process it starts
(torchrun's workers inherit the environment) installs the guard when it
imports torch. stdin, stdout and stderr are the command's own; amplint adds
only its summary on stderr once the command ends, and exits with the
command's exit code. This module never imports torch.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
USAGE = "amplint run [--report DIR] [options] -- python train.py ARGS... | -m module ARGS... | torchrun ..."


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amplint run", usage=USAGE, description=__doc__.split("\n")[0])
    p.add_argument("--report", default="amplint-run", metavar="DIR", help="where events.jsonl, report.html and incidents/ go (default: ./amplint-run)")
    p.add_argument("--collapse-steps", type=int, default=8, metavar="N", help="AMP701 when the loss scale falls on N consecutive steps (default 8)")
    p.add_argument("--skip-share", type=float, default=0.25, metavar="X", help="AMP701 when more than X of the steps are skipped, after 50 steps (default 0.25)")
    p.add_argument("--incident-burst", type=int, default=2, metavar="N", help="save an incident on the first run of N skipped steps; 0: never (default 2)")
    p.add_argument("--incident-max-mb", type=float, default=256.0, metavar="MB", help="largest incident snapshot to write (default 256)")
    p.add_argument("--max-events-mb", type=float, default=64.0, metavar="MB", help="bound on events.jsonl (default 64)")
    p.add_argument("--no-grad-norm", action="store_true", help="do not measure the unscaled gradient norm")
    p.add_argument("--no-html", action="store_true", help="do not write report.html")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program to run, after --")
    return p


def command_line(rest: List[str]) -> List[str]:
    """`train.py ...` and `-m mod ...` run under this Python; anything else runs as given."""
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        return []
    if rest[0] == "-m" or rest[0].endswith(".py"):
        return [sys.executable, *rest]
    return rest


def environment(report_dir: str, boot_dir: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = boot_dir + (os.pathsep + old if old else "")
    env["AMPLINT_WATCH_DIR"] = report_dir
    env["AMPLINT_WATCH_HOME"] = os.path.dirname(os.path.dirname(HERE))
    env["AMPLINT_WATCH_COLLAPSE_STEPS"] = str(args.collapse_steps)
    env["AMPLINT_WATCH_SKIP_SHARE"] = str(args.skip_share)
    env["AMPLINT_WATCH_INCIDENT_BURST"] = str(args.incident_burst)
    env["AMPLINT_WATCH_INCIDENT_MAX_BYTES"] = str(int(args.incident_max_mb * 1024 * 1024))
    env["AMPLINT_WATCH_MAX_BYTES"] = str(int(args.max_events_mb * 1024 * 1024))
    env["AMPLINT_WATCH_GRAD_NORM"] = "0" if args.no_grad_norm else "1"
    return env


def fresh_report_dir(path: str) -> str:
    """DIR, emptied of what an earlier run of amplint left there (nothing else is touched)."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    for name in ("events.jsonl", "report.html"):
        if os.path.isfile(os.path.join(path, name)):
            os.remove(os.path.join(path, name))
    incidents = os.path.join(path, "incidents")
    if os.path.isdir(incidents):
        for name in os.listdir(incidents):
            if name.startswith("step") and name.endswith(".pt"):
                os.remove(os.path.join(incidents, name))
    return path


def finish(report_dir: str, html: bool, across_ranks: bool = False) -> None:
    """The summary on stderr and DIR/report.html, from DIR/events.jsonl. `across_ranks` (once
    every rank has ended: `amplint run`'s own process) also compares the ranks (AMP702) and
    appends that finding to events.jsonl."""
    from .events import read_events
    from .findings import rank_disagreement, summary

    path = os.path.join(report_dir, "events.jsonl")
    events = list(read_events(path))
    if across_ranks and not any(e.get("type") == "finding" and e.get("code") == "AMP702" for e in events):
        record = rank_disagreement(events)
        if record is not None:
            record["pid"] = os.getpid()
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, allow_nan=False, default=str) + "\n")
            events.append(record)
    sys.stderr.write(summary(events))
    if html and events:
        from .report import write_report

        path = write_report(report_dir, events)
        sys.stderr.write(f"amplint run: report {path}\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(list(sys.argv[2:] if argv is None else argv))
    cmd = command_line(args.command)
    if not cmd:
        sys.stderr.write(f"amplint: error: no command to run (usage: {USAGE})\n")
        return 2
    report_dir = fresh_report_dir(args.report)
    boot_dir = tempfile.mkdtemp(prefix="amplint-run-")
    try:
        shutil.copyfile(os.path.join(HERE, "bootstrap", "sitecustomize.py"), os.path.join(boot_dir, "sitecustomize.py"))
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the program; we wait for it
        try:
            try:
                code = subprocess.call(cmd, env=environment(report_dir, boot_dir, args))
            except OSError as exc:
                sys.stderr.write(f"amplint: error: cannot run {cmd[0]!r}: {exc.strerror}\n")
                return 127
        finally:
            signal.signal(signal.SIGINT, previous)
        finish(report_dir, not args.no_html, across_ranks=True)
    finally:
        shutil.rmtree(boot_dir, ignore_errors=True)
    return 128 - code if code < 0 else code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
