"""DIR/events.jsonl: one JSON object per line, appended by every watched process.

Lines are written with one `os.write` on an O_APPEND descriptor, so the ranks
of a torchrun job can share the file without interleaving lines. Step records
are formatted from a fixed template (no `json.dumps` per step) and buffered
until the guard's `flush()` (it batches steps: a write per step is a syscall
per step); every other record, and `close()` at exit, flushes them first. The
file is bounded (`max_bytes`): past the bound, step records stop and one
`truncated` line says so; findings keep a small reserve so they are never lost
to a long run. Values are plain JSON (no NaN/Infinity: non-finite numbers are
written as null with the reason beside them).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Iterator, List, Optional

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
FINDINGS_RESERVE = 1024 * 1024


def finite_or_none(value: Optional[float]) -> Optional[float]:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _number(value: Optional[float]) -> str:
    """A JSON number as json.dumps writes it (float's repr), null for None and non-finite values."""
    if value is None or not math.isfinite(value):
        return "null"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


_STEP = ('{"type": "step", "step": %d, "loss_scale_before": %s, "loss_scale": %s, "skipped": %s, "grad_norm": %s, '
         '"step_time_s": %s, "peak_mem_bytes": %s, "mem": "%s", "rank": %d, "pid": %d}\n')
_MEM_KINDS = ("cuda", "rss", "none")


class EventLog:
    """Appends records to DIR/events.jsonl, tagging each with this process's rank and pid."""

    def __init__(self, directory: str, rank: int = 0, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "events.jsonl")
        self.rank = rank
        self.max_bytes = max_bytes
        self.written = 0
        self.truncated = False
        self._fd: Optional[int] = None
        self._buffer: List[bytes] = []

    def write(self, record: Dict[str, Any]) -> bool:
        """Append one record and flush; False when the bound dropped it."""
        record = dict(record, rank=self.rank, pid=os.getpid())
        line = (json.dumps(record, allow_nan=False, default=str) + "\n").encode("utf-8")
        kept = self._add(line, record.get("type") == "finding")
        self.flush()
        return kept

    def write_step(self, step: int, loss_scale_before: Optional[float], loss_scale: Optional[float], skipped: bool,
                   grad_norm: Optional[float], step_time_s: Optional[float], peak_mem_bytes: Optional[int], mem: str) -> bool:
        """Buffer one step record (the `step` row of docs/run.md) until the next flush: the scale the
        step ran with (`loss_scale_before`) and the one `update()` left (`loss_scale`)."""
        line = _STEP % (step, _number(loss_scale_before), _number(loss_scale), "true" if skipped else "false", _number(grad_norm),
                        _number(step_time_s), _number(peak_mem_bytes), mem if mem in _MEM_KINDS else "none", self.rank, os.getpid())
        return self._add(line.encode("ascii"), False)

    def _add(self, line: bytes, finding: bool) -> bool:
        budget = self.max_bytes if finding else self.max_bytes - FINDINGS_RESERVE
        if self.written + len(line) > budget:
            if not self.truncated and not finding:
                self.truncated = True
                note = json.dumps({"type": "truncated", "rank": self.rank, "pid": os.getpid(), "after_bytes": self.written})
                self._buffer.append(note.encode() + b"\n")
                self.written += len(self._buffer[-1])
            return False
        self._buffer.append(line)
        self.written += len(line)
        return True

    def flush(self) -> None:
        if self._buffer:
            data, self._buffer = b"".join(self._buffer), []
            self._append(data)

    def _append(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, data)

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_events(path: str) -> Iterator[Dict[str, Any]]:
    """The records of an events.jsonl; a torn or foreign line is skipped, never fatal."""
    try:
        fh = open(path, encoding="utf-8", errors="replace")
    except OSError:
        return
    with fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nested too deeply to read
                continue
            if isinstance(value, dict):
                yield value

