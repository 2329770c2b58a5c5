"""The hand review of the real-code drill, as data: every finding's verdict and every known miss.

`drill_review.json` (beside this file) holds one entry per finding of
`drill.py --select ALL` on the pinned packages of `corpus.DRILL_PACKAGES`:
where it is, the rule, and the verdict a person gave after reading the code
("correct", "fp" for a false positive, "info" for advice rules, which are not
judged), with a one-line reason. `misses` lists the AMP pitfalls found by hand
in the training code that amplint does not report, with why it misses them.

A drill run is compared with it (`compare`), so a later run flags any finding
that moved, appeared or disappeared: each such change needs a new review.
`table` renders the per-rule precision and recall that docs/precision.md shows.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

REVIEW_FILE = Path(__file__).resolve().parent / "drill_review.json"
VERDICTS = ("correct", "fp", "info")

Key = Tuple[str, str, int, int, str]  # package, file, row, column, code


class Comparison(NamedTuple):
    unreviewed: List[dict]  # findings of the run that no review entry matches
    gone: List[dict]  # review entries (of the packages and rules run) the run no longer reports
    matched: List[Tuple[dict, dict]]  # (finding, its review entry)


def load(path: Path = REVIEW_FILE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def key(entry: dict) -> Key:
    return (entry["package"], entry["file"], entry["row"], entry["column"], entry["code"])


def selected(code: str, severity: str, select: Sequence[str]) -> bool:
    """Whether a run with `--select select` reports a finding of `code` (info rules only when asked)."""
    if not select:
        return severity != "info"
    return any(s == "ALL" or code.startswith(s) for s in select)


def compare(findings: Iterable[dict], review: dict, packages: Sequence[str], select: Sequence[str]) -> Comparison:
    """The run's findings against the reviewed ones of the same packages (`name==version`) and rules."""
    expected: Dict[Key, dict] = {
        key(e): e
        for e in review["findings"]
        if e["package"] in packages and selected(e["code"], e["severity"], select)
    }
    unreviewed, matched = [], []
    seen = set()
    for f in findings:
        k = key(f)
        entry = expected.get(k)
        if entry is None or entry["severity"] != f["severity"]:
            unreviewed.append(f)
        else:
            matched.append((f, entry))
            seen.add(k)
    gone = [e for k, e in expected.items() if k not in seen]
    return Comparison(unreviewed, gone, matched)


def counts(review: dict) -> Dict[str, Dict[str, int]]:
    """Per rule: warning/error findings, correct, fp, and known misses."""
    table: Dict[str, Dict[str, int]] = collections.defaultdict(lambda: {"findings": 0, "correct": 0, "fp": 0, "misses": 0})
    for e in review["findings"]:
        if e["verdict"] == "info":
            continue
        row = table[e["code"]]
        row["findings"] += 1
        row[e["verdict"]] += 1
    for m in review["misses"]:
        table[m["code"]]["misses"] += 1
    return dict(sorted(table.items()))


def _ratio(num: int, den: int) -> str:
    return f"{num}/{den} = {100 * num / den:.0f}%" if den else "n/a"


def table(review: dict) -> str:
    """The markdown table of docs/precision.md: precision over warning/error findings, recall over
    the pitfalls known (found correctly + missed)."""
    lines = [
        "| rule | findings | correct | FP | known misses | precision | recall |",
        "|---|---|---|---|---|---|---|",
    ]
    total = {"findings": 0, "correct": 0, "fp": 0, "misses": 0}
    for code, row in counts(review).items():
        for k in total:
            total[k] += row[k]
        lines.append(
            f"| {code} | {row['findings']} | {row['correct']} | {row['fp']} | {row['misses']} | "
            f"{_ratio(row['correct'], row['findings'])} | {_ratio(row['correct'], row['correct'] + row['misses'])} |"
        )
    lines.append(
        f"| **total** | **{total['findings']}** | **{total['correct']}** | **{total['fp']}** | **{total['misses']}** | "
        f"**{_ratio(total['correct'], total['findings'])}** | **{_ratio(total['correct'], total['correct'] + total['misses'])}** |"
    )
    return "\n".join(lines)


def problems(review: dict, pinned: Dict[str, str]) -> List[str]:
    """What is wrong with the review data itself (empty when it is well-formed)."""
    out: List[str] = []
    packages = {f"{n}=={v}" for n, v in pinned.items()}
    seen: Dict[Key, int] = {}
    for i, e in enumerate(review["findings"]):
        where = f"findings[{i}] {e.get('package')} {e.get('file')}:{e.get('row')}"
        missing = [f for f in ("package", "file", "row", "column", "code", "severity", "verdict", "why") if f not in e]
        if missing:
            out.append(f"{where}: lacks {missing}")
            continue
        if e["package"] not in packages:
            out.append(f"{where}: package not pinned in corpus.DRILL_PACKAGES")
        if e["verdict"] not in VERDICTS:
            out.append(f"{where}: verdict {e['verdict']!r} not in {VERDICTS}")
        if (e["verdict"] == "info") != (e["severity"] == "info"):
            out.append(f"{where}: only info findings take the verdict 'info'")
        if not e["why"].strip():
            out.append(f"{where}: no reason given")
        if key(e) in seen:
            out.append(f"{where}: duplicate of findings[{seen[key(e)]}]")
        seen[key(e)] = i
    for i, m in enumerate(review["misses"]):
        missing = [f for f in ("package", "file", "row", "code", "why") if f not in m]
        if missing:
            out.append(f"misses[{i}]: lacks {missing}")
        elif m["package"] not in packages:
            out.append(f"misses[{i}] {m['package']}: package not pinned in corpus.DRILL_PACKAGES")
    return out


def report(comparison: Comparison, out=print) -> None:
    for f in comparison.unreviewed:
        out(f"UNREVIEWED {f['package']} {f['file']}:{f['row']}:{f['column']} {f['code']} {f['severity']} {f['message'][:100]}")
    for e in comparison.gone:
        out(f"GONE       {e['package']} {e['file']}:{e['row']}:{e['column']} {e['code']} (reviewed {e['verdict']}: {e['why'][:80]})")
    fp = [e for _, e in comparison.matched if e["verdict"] == "fp"]
    judged = [e for _, e in comparison.matched if e["verdict"] != "info"]
    out(
        f"review: {len(comparison.matched)} findings as reviewed, {len(comparison.unreviewed)} unreviewed, "
        f"{len(comparison.gone)} gone; warning/error correct {len(judged) - len(fp)}/{len(judged)}"
    )


def entry(finding: dict, verdict: str, why: str) -> dict:
    """A review entry for a finding of `drill.py` (for adding reviews by hand)."""
    keep = ("package", "file", "row", "column", "code", "severity")
    return {**{k: finding[k] for k in keep}, "verdict": verdict, "why": why}


def package_specs(names: Optional[Sequence[str]], pinned: Dict[str, str]) -> List[str]:
    return [f"{n}=={v}" for n, v in pinned.items() if not names or n in names]
