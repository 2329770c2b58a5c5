"""Runtime findings: the record shape, the loss-scale-collapse detector, the stderr summary.

A finding is `{"type": "finding", "code", "filename", "line", "message", "step"}`.
Static codes (AMP101 ...) are used when the pitfall a static rule describes is
seen happening; AMP7xx codes (see `codes.py`) exist only at run time.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional


def finding(code: str, filename: str, line: int, message: str, step: int, **data: Any) -> Dict[str, Any]:
    record = {"type": "finding", "code": code, "filename": filename, "line": int(line), "message": message, "step": int(step)}
    record.update(data)
    return record


def _fmt_scale(value: float) -> str:
    return f"{value:g}"


class CollapseDetector:
    """AMP701: the scale fell on `steps` consecutive updates, or more than `share` of the
    steps were skipped once at least `min_steps` ran. Fires once per run.

    A handful of skipped steps while the scale finds its level (the first
    steps from 65536, one per growth interval) never reaches either bound.
    """

    def __init__(self, steps: int = 8, share: float = 0.25, min_steps: int = 50) -> None:
        self.steps = steps
        self.share = share
        self.min_steps = min_steps
        self.fired = False
        self.seen = 0
        self.skipped = 0
        self.run = 0  # consecutive falls
        self.run_start: Optional[int] = None
        self.run_from: Optional[float] = None
        self.first_skip: Optional[int] = None
        self.start_scale: Optional[float] = None
        self.prev: Optional[float] = None

    def feed(self, step: int, scale_before: float, scale_after: float, skipped: bool) -> Optional[str]:
        """The AMP701 message when this step completes a collapse, else None."""
        self.seen += 1
        if self.start_scale is None:
            self.start_scale = scale_before
        if skipped:
            self.skipped += 1
            if self.first_skip is None:
                self.first_skip = step
        if scale_after < scale_before:
            if self.run == 0:
                self.run_start, self.run_from = step, scale_before
            self.run += 1
        else:
            self.run = 0
        if self.fired:
            return None
        if self.run >= self.steps:
            self.fired = True
            return (f"loss scale fell on {self.run} consecutive steps since step {self.run_start} "
                    f"({_fmt_scale(self.run_from)} -> {_fmt_scale(scale_after)})")
        if self.seen >= self.min_steps and self.skipped > self.share * self.seen:
            self.fired = True
            return (f"{self.skipped} of {self.seen} steps skipped ({100.0 * self.skipped / self.seen:.0f}%) "
                    f"since step {self.first_skip} ({_fmt_scale(self.start_scale)} -> {_fmt_scale(scale_after)})")
        return None


def clean(text: Any, limit: int = 300) -> str:
    """Text from the watched program made safe for a terminal: no control characters, bounded."""
    s = str(text)
    out = []
    for ch in s[:limit]:
        o = ord(ch)
        out.append(ch if (o >= 32 and o != 127 and not 0x80 <= o < 0xA0) else f"\\x{o:02x}")
    return "".join(out) + ("..." if len(s) > limit else "")


def summary(events: Iterable[Dict[str, Any]]) -> str:
    """The few lines `amplint run` prints on stderr once the run ends."""
    steps: Dict[int, List[Dict[str, Any]]] = {}
    found: List[Dict[str, Any]] = []
    nonfinite: List[Dict[str, Any]] = []
    incidents: List[Dict[str, Any]] = []
    for e in events:
        kind = e.get("type")
        if kind == "step":
            steps.setdefault(int(e.get("rank", 0) or 0), []).append(e)
        elif kind == "finding":
            found.append(e)
        elif kind == "nonfinite":
            nonfinite.append(e)
        elif kind == "incident":
            incidents.append(e)
    lines = []
    if not steps and not found:
        return "amplint run: no optimizer step was seen (was torch imported by the program?)\n"
    for rank in sorted(steps):
        rs = steps[rank]
        skipped = sum(1 for s in rs if s.get("skipped"))
        scales = [s.get("loss_scale") for s in rs if s.get("loss_scale") is not None]
        tail = f", loss scale {_fmt_scale(scales[0])} -> {_fmt_scale(scales[-1])}" if scales else ""
        who = f" (rank {rank})" if len(steps) > 1 else ""
        lines.append(f"amplint run{who}: {len(rs)} optimizer steps, {skipped} skipped{tail}")
    nonfinite.sort(key=lambda n: n.get("kind") != "forward output")  # a forward overflow explains the gradients
    for n in nonfinite[:1]:
        lines.append("  first non-finite: " + clean(n.get("message", "")))
    for i in incidents[:1]:
        lines.append("  incident saved: " + clean(i.get("path", "")) + " (amplint replay FILE)")
    seen = set()
    for f in found:
        key = (f.get("code"), f.get("filename"), f.get("line"))
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"{clean(f.get('filename'))}:{f.get('line')}: {clean(f.get('code'), 10)} {clean(f.get('message'))} (step {f.get('step')})")
    return "\n".join(lines) + "\n"
