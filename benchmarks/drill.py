"""The real-code drill: lint pinned releases of real PyTorch training code.

    python benchmarks/drill.py                 # fetch (once) and lint every package
    python benchmarks/drill.py --show AMP101   # print each AMP101 finding with context, for review

Findings are written to `<corpus>/drill-findings.json`; the hand review of
every finding lives in docs/precision.md. Run by hand, not in the test suite.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import DRILL_PACKAGES, corpus_dir, fetch  # noqa: E402

from amplint import Config, lint_paths  # noqa: E402


def run() -> list:
    findings = []
    print(f"{'package':<24}{'files':>7}{'findings':>10}{'AMP000':>8}{'seconds':>9}")
    for name, version in DRILL_PACKAGES.items():
        folder = fetch(name, version)
        start = time.perf_counter()
        result = lint_paths([str(folder)], Config(exclude=(".git", "__pycache__"), root=str(folder)))
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
        print(f"{name:<24}{len(result.files):>7}{len(result.diagnostics):>10}{crashes:>8}{took:>9.1f}")
    return findings


def show(findings: list, code: str, context: int = 4) -> None:
    for f in findings:
        if f["code"] != code:
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
    parser.add_argument("--show", metavar="CODE", help="print each finding of CODE with context")
    args = parser.parse_args()
    out = corpus_dir() / "drill-findings.json"
    if args.show and out.exists():
        show(json.loads(out.read_text()), args.show.upper())
        return
    findings = run()
    out.write_text(json.dumps(findings, indent=1))
    per_rule = collections.Counter(f["code"] for f in findings)
    print("\nper rule:", dict(sorted(per_rule.items())))
    print(f"written: {out}")
    if args.show:
        show(findings, args.show.upper())


if __name__ == "__main__":
    main()
