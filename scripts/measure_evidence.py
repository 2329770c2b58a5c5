"""Re-measure docs/evidence.md: run every rule's experiment on this machine's torch.

For each rule, its first INVALID example is linted and the finding verified
(`amplint --verify`) on the device given (default cpu); prints one JSON object
per rule: code, verdict, method, device, torch version and the evidence, which
is what docs/evidence.md quotes. Run by hand after a torch upgrade:

    python scripts/measure_evidence.py [--device cpu|cuda] > /tmp/evidence.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amplint import Config, lint_source  # noqa: E402
from amplint.engine.registry import all_rules  # noqa: E402
from amplint.core.rule import example_source  # noqa: E402
from amplint.verify import verify_diagnostics  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    findings = []
    for rule in all_rules():
        for case in rule.INVALID:
            found = [d for d in lint_source(example_source(case.code), "example.py", Config(select=("ALL",))) if d.code == rule.code]
            if found:
                findings.append(found[0])
                break
    verify_diagnostics(findings, device=args.device, timeout=args.timeout)
    for d in findings:
        print(json.dumps({"code": d.code, **(d.verification or {"verdict": "no experiment"})}, default=str), flush=True)


if __name__ == "__main__":
    main()
