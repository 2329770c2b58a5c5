"""Shared helpers for the tests of `amplint run` / `amplint.watch` (tests/test_watch_*.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "watch")
TRAIN = os.path.join(DATA, "train_cpu.py")


def line_of(path: str, text: str) -> int:
    """The 1-based line of `path` holding `text` (exactly one)."""
    with open(path, encoding="utf-8") as fh:
        hits = [i for i, line in enumerate(fh, 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def amplint(*args: str, cwd: str, env: Dict[str, str] = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint._start", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def watched(report: str, *command: str, cwd: str, options=(), env=None) -> subprocess.CompletedProcess:
    return amplint("run", "--report", report, *options, "--", *command, cwd=cwd, env=env)


#: what torch's gloo teardown prints when a rank aborts at interpreter exit, after the script's last line
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def torchrun_watched(report: str, script: str, *args: str, cwd: str) -> subprocess.CompletedProcess:
    """`script` on 2 gloo ranks (`torch.distributed.run --nproc_per_node=2`) under `amplint run`, run
    again (at most twice) when a rank died of torch's own gloo teardown abort: it ends 2 of 10 plain
    `torchrun` runs of tests/data/watch/train_ddp.py here, without amplint, even after a barrier and
    `destroy_process_group`. Any other outcome is returned as it is."""
    for _ in range(3):
        shutil.rmtree(report, ignore_errors=True)
        run = watched(report, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                      script, *args, cwd=cwd)
        if run.returncode == 0 or GLOO_TEARDOWN_ABORT not in run.stderr:
            return run
    return run


def events(report: str) -> List[Dict[str, Any]]:
    with open(os.path.join(report, "events.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def of_type(evs: List[Dict[str, Any]], kind: str) -> List[Dict[str, Any]]:
    return [e for e in evs if e["type"] == kind]
