"""Shared helpers for the tests of `amplint run` / `amplint.watch` (tests/test_watch_*.py)."""
from __future__ import annotations

import json
import os
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


def events(report: str) -> List[Dict[str, Any]]:
    with open(os.path.join(report, "events.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def of_type(evs: List[Dict[str, Any]], kind: str) -> List[Dict[str, Any]]:
    return [e for e in evs if e["type"] == kind]
