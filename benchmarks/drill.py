"""The real-code drill: lint pinned releases of real PyTorch training code.

    python benchmarks/drill.py                 # fetch (once) and lint every package
    python benchmarks/drill.py --show AMP101   # print each AMP101 finding with context, for review

    python benchmarks/drill.py --check         # exit 1 when a finding is not as reviewed
    python benchmarks/drill.py --table         # the per-rule precision/recall table of docs/precision.md

Findings are written to `<corpus>/drill-findings.json`. The hand review of
every finding (and of the pitfalls amplint misses) is data, `drill_review.json`
(see drill_review.py): each run is compared with it, and a finding that
appeared, moved or disappeared is printed (UNREVIEWED / GONE) for review;
`--template` writes the unreviewed ones as entries to fill in. The prose is in
docs/precision.md. Run by hand; tests/test_drill_review.py runs a few small
packages (slow) and checks the review data itself.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drill_review  # noqa: E402
from corpus import DRILL_PACKAGES, corpus_dir, fetch  # noqa: E402

from amplint import Config, lint_paths  # noqa: E402


def run(select: tuple = (), jobs: int = 1, only: tuple = (), out: Optional[Path] = None) -> list:
    findings = []
    print(f"{'package':<24}{'files':>7}{'findings':>10}{'AMP000':>8}{'seconds':>9}")
    for name, version in DRILL_PACKAGES.items():
        if only and name not in only:
            continue
        folder = fetch(name, version)
        start = time.perf_counter()
        result = lint_paths(
            [str(folder)],
            Config(exclude=(".git", "__pycache__"), root=str(folder), select=select),
            jobs=jobs,
        )
        took = time.perf_counter() - start
        crashes = sum(1 for d in result.diagnostics if d.code == "AMP000")
        for d in result.diagnostics:
            findings.append(
                {
                    "package": f"{name}=={version}",
                    "file": str(Path(d.filename).relative_to(folder)),
                    "row": d.location.row,
                    "column": d.location.column,
                    "code": d.code,
                    "severity": d.severity.value,
                    "message": d.message,
                }
            )
        print(f"{name:<24}{len(result.files):>7}{len(result.diagnostics):>10}{crashes:>8}{took:>9.1f}", flush=True)
        if out is not None:  # keep what is done so far (a full drill takes many minutes)
            out.write_text(json.dumps(findings, indent=1))
    return findings


def show(findings: list, code: str, context: int = 4) -> None:
    codes = set(code.split(","))
    for f in findings:
        if f["code"] not in codes and "ALL" not in codes:
            continue
        name, version = f["package"].split("==")
        path = corpus_dir() / f"{name}-{version}" / f["file"]
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        lo, hi = max(0, f["row"] - 1 - context), min(len(lines), f["row"] + context)
        print(f"\n== {f['package']} {f['file']}:{f['row']}:{f['column']} {f['code']} {f['message'][:100]}")
        for i in range(lo, hi):
            mark = ">>" if i == f["row"] - 1 else "  "
            print(f"{mark}{i + 1:5} {lines[i]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--show", metavar="CODE", help="print each finding of CODE (comma-separated, or ALL) with context")
    parser.add_argument("--select", default="", help="comma-separated rule selectors (e.g. ALL for info rules too)")
    parser.add_argument("--jobs", type=int, default=1, help="processes to lint with")
    parser.add_argument("--packages", default="", help="comma-separated package names (default: all)")
    parser.add_argument("--out", help="findings file (default <corpus>/drill-findings.json)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a finding is not as reviewed")
    parser.add_argument("--template", metavar="PATH", help="write the unreviewed findings as review entries to fill in")
    parser.add_argument("--table", action="store_true", help="print the per-rule precision/recall table and stop")
    args = parser.parse_args()
    if args.table:
        print(drill_review.table(drill_review.load()))
        return
    out = Path(args.out) if args.out else corpus_dir() / "drill-findings.json"
    if args.show and out.exists():
        show(json.loads(out.read_text()), args.show.upper())
        return
    start = time.perf_counter()
    select = tuple(c for c in args.select.split(",") if c)
    only = tuple(p for p in args.packages.split(",") if p)
    findings = run(select, args.jobs, only, out)
    took = time.perf_counter() - start
    out.write_text(json.dumps(findings, indent=1))
    per_rule = collections.Counter(f["code"] for f in findings)
    print("\nper rule:", dict(sorted(per_rule.items())))
    per_severity = collections.Counter(f["severity"] for f in findings)
    print("per severity:", dict(sorted(per_severity.items())))
    print(f"wall time: {took:.1f}s")
    print(f"written: {out}")
    comparison = drill_review.compare(
        findings, drill_review.load(), drill_review.package_specs(only, DRILL_PACKAGES), select
    )
    drill_review.report(comparison)
    if args.template:
        entries = [drill_review.entry(f, "", "") for f in comparison.unreviewed]
        Path(args.template).write_text(json.dumps(entries, indent=1))
        print(f"review template ({len(entries)} entries): {args.template}")
    if args.show:
        show(findings, args.show.upper())
    if args.check and (comparison.unreviewed or comparison.gone):
        sys.exit(1)


if __name__ == "__main__":
    main()
