"""How many `--verify` verdicts are about the user's own code, on real public code.

    python benchmarks/verify_coverage.py                    # drill packages + scripts folder
    python benchmarks/verify_coverage.py --packages timm    # some drill packages only
    python benchmarks/verify_coverage.py --scripts DIR      # also every .py under DIR
    python benchmarks/verify_coverage.py --why              # list each reference-only finding's reason

Lints each target (the drill's packages from `benchmarks/corpus.py`, fetched on
first use, and `<corpus>/scripts/`, real training scripts kept outside the
repository), verifies every finding whose rule has an experiment on the CPU, and
prints per rule: findings, how many ran the user's code (`method: snippet`), the
verdicts, and the most common reason the code could not run. Findings in
`KNOWN_FALSE` (judged false positives in the drill's review, drill_review.json)
are left out of the "true findings" share. Run by hand, not in the test suite.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drill_review  # noqa: E402
from corpus import DRILL_PACKAGES, corpus_dir, fetch  # noqa: E402

from amplint import Config, lint_paths  # noqa: E402
from amplint.verify import has_experiment, verify_diagnostics  # noqa: E402

#: (package folder name, file, row) judged false positives (benchmarks/drill_review.json)
KNOWN_FALSE = {
    (e["package"].replace("==", "-"), e["file"], e["row"]) for e in drill_review.load()["findings"] if e["verdict"] == "fp"
}


def targets(packages: Tuple[str, ...], scripts: Tuple[str, ...]) -> List[Tuple[str, Path]]:
    out = []
    for name, version in DRILL_PACKAGES.items():
        if packages and name not in packages:  # ("none",) selects no package
            continue
        try:
            out.append((f"{name}-{version}", fetch(name, version)))
        except Exception as exc:  # noqa: BLE001 - a package that cannot be fetched is reported, not fatal
            print(f"skipped {name}: {exc}", file=sys.stderr)
    for folder in scripts:
        path = Path(folder).expanduser()
        if path.is_dir():
            out.append((path.name, path))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", default="", help="comma-separated drill package names (default: all; 'none' for none)")
    parser.add_argument("--scripts", action="append", default=[], help="extra folders of training scripts")
    parser.add_argument("--why", action="store_true", help="print every finding that did not run the user's code")
    parser.add_argument("--json", help="write every verdict to this file")
    args = parser.parse_args()
    packages = tuple(p for p in args.packages.split(",") if p)
    scripts = tuple(args.scripts) or (str(corpus_dir() / "scripts"),)
    rows = []
    start = time.perf_counter()
    for label, folder in targets(packages, scripts):
        result = lint_paths([str(folder)], Config(exclude=(".git", "__pycache__"), root=str(folder)))
        todo = [d for d in result.diagnostics if has_experiment(d.code)]
        if todo:
            verify_diagnostics(todo, device="cpu", timeout=60)
        for d in todo:
            rel = str(Path(d.filename).resolve().relative_to(folder.resolve()))
            v = d.verification or {}
            rows.append(
                {
                    "target": label,
                    "file": rel,
                    "row": d.location.row,
                    "code": d.code,
                    "verdict": v.get("verdict"),
                    "method": v.get("method"),
                    "reason": v.get("reason"),
                    "true": (label, rel, d.location.row) not in KNOWN_FALSE,
                }
            )
        print(f"{label:<34}{len(result.files):>6} files{len(todo):>5} verifiable findings", flush=True)
    took = time.perf_counter() - start
    table(rows)
    print(f"wall time: {took:.0f} s")
    if args.why:
        for r in rows:
            if r["method"] != "snippet":
                print(f"{r['target']}/{r['file']}:{r['row']} {r['code']} {r['verdict']}: {r['reason']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def table(rows: List[Dict]) -> None:
    per: Dict[str, List[Dict]] = collections.defaultdict(list)
    for r in rows:
        per[r["code"]].append(r)
    print(f"\n{'rule':<8}{'findings':>9}{'own code':>9}{'confirmed':>10}{'not-repr':>9}{'inconcl':>8}{'error':>6}  most common reason the code could not run")
    for code in sorted(per):
        rs = per[code]
        counts = collections.Counter(r["verdict"] for r in rs)
        own = sum(1 for r in rs if r["method"] == "snippet")
        reasons = collections.Counter(r["reason"] for r in rs if r["method"] != "snippet" and r["reason"])
        top = reasons.most_common(1)[0][0][:70] if reasons else ""
        print(
            f"{code:<8}{len(rs):>9}{own:>9}{counts['confirmed']:>10}{counts['not-reproduced']:>9}"
            f"{counts['inconclusive']:>8}{counts['error']:>6}  {top}"
        )
    true = [r for r in rows if r["true"]]
    own = sum(1 for r in true if r["method"] == "snippet")
    decided = sum(1 for r in true if r["method"] == "snippet" and r["verdict"] in ("confirmed", "not-reproduced"))
    n = max(len(true), 1)
    print(f"\ntrue findings whose verdict ran the user's own code: {own}/{len(true)} = {own / n:.0%}")
    print(f"true findings decided (confirmed / not-reproduced) on the user's own code: {decided}/{len(true)} = {decided / n:.0%}")


if __name__ == "__main__":
    main()
