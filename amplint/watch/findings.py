"""Runtime findings: the record shape, the loss-scale-collapse detector, the stderr summary.

A finding is `{"type": "finding", "code", "filename", "line", "message", "step"}`.
Static codes (AMP101 ...) are used when the pitfall a static rule describes is
seen happening; AMP7xx codes (see `codes.py`) exist only at run time.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple


def finding(code: str, filename: str, line: int, message: str, step: int, **data: Any) -> Dict[str, Any]:
    record = {"type": "finding", "code": code, "filename": filename, "line": int(line), "message": message, "step": int(step)}
    record.update(data)
    return record


def fmt_scale(value: float) -> str:
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
                    f"({fmt_scale(self.run_from)} -> {fmt_scale(scale_after)})")
        if self.seen >= self.min_steps and self.skipped > self.share * self.seen:
            self.fired = True
            return (f"{self.skipped} of {self.seen} steps skipped ({100.0 * self.skipped / self.seen:.0f}%) "
                    f"since step {self.first_skip} ({fmt_scale(self.start_scale)} -> {fmt_scale(scale_after)})")
        return None


def clean(text: Any, limit: int = 300) -> str:
    """Text from the watched program made safe for a terminal: no control characters, bounded."""
    s = str(text)
    out = []
    for ch in s[:limit]:
        o = ord(ch)
        out.append(ch if (o >= 32 and o != 127 and not 0x80 <= o < 0xA0) else f"\\x{o:02x}")
    return "".join(out) + ("..." if len(s) > limit else "")


def steps_by_rank(events: Iterable[Dict[str, Any]]) -> Dict[int, List[Dict[str, Any]]]:
    out: Dict[int, List[Dict[str, Any]]] = {}
    for e in events:
        if e.get("type") == "step":
            out.setdefault(int(e.get("rank", 0) or 0), []).append(e)
    return out


def run_numbers(steps: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One rank's totals, as the summary and report.html both state them: steps, skipped steps,
    and the loss scale from the one the first step ran with (before its `update()`, as AMP701
    counts) to the one the last step left; None without an enabled GradScaler."""
    scaled = [s for s in steps if s.get("loss_scale") is not None]
    first = None
    if scaled:
        first = scaled[0].get("loss_scale_before")
        first = scaled[0]["loss_scale"] if first is None else first
    return {
        "steps": len(steps),
        "skipped": sum(1 for s in steps if s.get("skipped")),
        "scale_from": first,
        "scale_to": scaled[-1]["loss_scale"] if scaled else None,
    }


def _ranks(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def first_nonfinite(events: List[Dict[str, Any]], steps: Dict[int, List[Dict[str, Any]]]) -> Tuple[List[int], Optional[int], Optional[Dict[str, Any]]]:
    """The rank(s) that skipped a step first (the earliest skipped step number, every rank that
    skipped it), that step, and the first of those ranks' non-finite module records (a forward
    output before a gradient, as the summary orders them)."""
    first_step: Optional[int] = None
    ranks: List[int] = []
    for rank in sorted(steps):
        hit = next((int(s.get("step") or 0) for s in steps[rank] if s.get("skipped")), None)
        if hit is None:
            continue
        if first_step is None or hit < first_step:
            first_step, ranks = hit, [rank]
        elif hit == first_step:
            ranks.append(rank)
    source = None
    if ranks:
        found = [e for e in events if e.get("type") == "nonfinite" and int(e.get("rank", 0) or 0) == ranks[0]]
        found.sort(key=lambda n: (n.get("kind") != "forward output", int(n.get("step") or 0)))
        source = found[0] if found else None
    return ranks, first_step, source


def rank_disagreement(events: Iterable[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """AMP702: the first step at which the ranks of one run disagree, on whether it was skipped
    or on the loss scale it ran with or left; None for one rank, or ranks that agree throughout.

    Steps are aligned by number (each rank counts its own optimizer steps, and data-parallel ranks
    step together). The finding is located at the module the first rank to go non-finite named
    (where it was built), else at that rank's `scaler.update()` call."""
    events = list(events)
    steps = steps_by_rank(events)
    if len(steps) < 2:
        return None
    index = {rank: {int(s.get("step") or 0): s for s in rows} for rank, rows in steps.items()}
    common = sorted(set.intersection(*[set(i) for i in index.values()]))
    message = None
    at = 0
    for step in common:
        rows = {rank: index[rank][step] for rank in sorted(index)}
        before = {r: s.get("loss_scale_before") for r, s in rows.items()}
        after = {r: s.get("loss_scale") for r, s in rows.items()}
        skipped = [r for r, s in rows.items() if s.get("skipped")]
        if len(set(before.values())) > 1:
            message = f"loss scales differ across ranks at step {step}: " + _scales(before)
        elif skipped and len(skipped) < len(rows):
            stepped = [r for r in rows if r not in skipped]
            message = (f"ranks disagree on step {step}: {_ranks(skipped)} skipped it (inf/NaN gradients), "
                       f"{_ranks(stepped)} stepped")
        elif len(set(after.values())) > 1:
            message = f"loss scales diverge across ranks at step {step}: " + _scales(after)
        if message is not None:
            at = step
            break
    if message is None:
        return None
    ranks, first_step, source = first_nonfinite(events, steps)
    data: Dict[str, Any] = {"first_ranks": ranks, "first_skipped_step": first_step,
                            "scales": {str(r): index[r][at].get("loss_scale") for r in sorted(index)}}
    where: Tuple[str, int] = ("<unknown>", 0)
    blame = ranks[0] if ranks else min(steps)
    if source is not None:
        message += f"; first non-finite: {source.get('kind')} of `{source.get('module')}` on rank {blame}"
        data["module"] = source.get("module")
        if source.get("filename"):
            where = (str(source["filename"]), int(source.get("line") or 0))
    elif ranks:
        message += f"; first non-finite: {_ranks(ranks)} at step {first_step}"
    if where[0] == "<unknown>":
        scaler = next((e for e in events if e.get("type") == "scaler" and int(e.get("rank", 0) or 0) == blame), None)
        scaler = scaler or next((e for e in events if e.get("type") == "scaler"), None)
        if scaler is not None and scaler.get("filename"):
            where = (str(scaler["filename"]), int(scaler.get("line") or 0))
            data["scaler"] = scaler.get("class")
    record = finding("AMP702", where[0], where[1], message, at, **data)
    record["rank"] = blame
    return record


def _scales(by_rank: Dict[int, Any]) -> str:
    return ", ".join(f"{'n/a' if v is None else fmt_scale(v)} (rank {r})" for r, v in by_rank.items())


def when(record: Dict[str, Any]) -> str:
    """A finding's step as the summary and the report say it: "step 18", or "after step 40" for
    what the run did between steps (a checkpoint saved after the loop), "before step 1"."""
    step = int(record.get("step") or 0)
    if record.get("after"):
        return f"after step {step}" if step > 0 else "before step 1"
    return f"step {step}"


def summary(events: Iterable[Dict[str, Any]]) -> str:
    """The few lines `amplint run` prints on stderr once the run ends."""
    events = list(events)
    steps = steps_by_rank(events)
    found: List[Dict[str, Any]] = []
    nonfinite: List[Dict[str, Any]] = []
    incidents: List[Dict[str, Any]] = []
    for e in events:
        kind = e.get("type")
        if kind == "finding":
            found.append(e)
        elif kind == "nonfinite":
            nonfinite.append(e)
        elif kind == "incident":
            incidents.append(e)
    lines = []
    if not steps and not found:
        return "amplint run: no optimizer step was seen (was torch imported by the program?)\n"
    for rank in sorted(steps):
        n = run_numbers(steps[rank])
        tail = f", loss scale {fmt_scale(n['scale_from'])} -> {fmt_scale(n['scale_to'])}" if n["scale_from"] is not None else ""
        who = f" (rank {rank})" if len(steps) > 1 else ""
        lines.append(f"amplint run{who}: {n['steps']} optimizer steps, {n['skipped']} skipped{tail}")
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
        lines.append(f"{clean(f.get('filename'))}:{f.get('line')}: {clean(f.get('code'), 10)} {clean(f.get('message'))} ({when(f)})")
    return "\n".join(lines) + "\n"
