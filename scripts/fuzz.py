#!/usr/bin/env python3
"""A long fuzz run of amplint, for manual use (the test suite runs a bounded one).

    .venv/bin/python scripts/fuzz.py                      # 20,000 generated programs + 50 mutants per source
    .venv/bin/python scripts/fuzz.py --examples 200000 --mutants 500 --seed 7
    .venv/bin/python scripts/fuzz.py --corpus ~/.cache/amplint-corpus  # also mutate real files

The properties are those of tests/test_fuzz.py: linting with every rule never
raises and never reports an internal error; fixes parse, are idempotent and
touch only the lines their edits name. Failing inputs are written to
--out (default ./fuzz-failures/) with the error, and the run goes on.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_fuzz import AMP_LINES, HEADER, check_fixes, check_never_raises, corpus, mutate  # noqa: E402


def record(out: Path, kind: str, source: str, exc: BaseException) -> None:
    out.mkdir(parents=True, exist_ok=True)
    n = len(list(out.glob("*.py")))
    path = out / f"{kind}-{n:05d}.py"
    path.write_text(source, encoding="utf-8", errors="surrogateescape")
    path.with_suffix(".txt").write_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    print(f"FAIL {kind}: {type(exc).__name__}: {str(exc)[:200]} -> {path}", flush=True)


def one(source: str, out: Path, kind: str) -> bool:
    try:
        check_fixes(source, check_never_raises(source))
        return True
    except Exception as exc:  # noqa: BLE001 - every failure is a finding
        record(out, kind, source, exc)
        return False


def generated(examples: int, seed: int, out: Path) -> int:
    import hypothesmith
    from hypothesis import HealthCheck, given, settings, strategies as st

    failures = [0]

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=False)
    @given(hypothesmith.from_grammar(), st.lists(st.sampled_from(AMP_LINES), max_size=10), st.randoms(use_true_random=False))
    def run(source, amp, rnd):
        lines = source.splitlines(keepends=True)
        for line in amp:
            lines.insert(rnd.randint(0, len(lines)), line + "\n")
        if not one(HEADER + "import torch\n" + "".join(lines), out, "generated"):
            failures[0] += 1

    random.seed(seed)
    run()
    return failures[0]


def mutants(per_source: int, seed: int, out: Path, extra: list) -> int:
    failures = 0
    sources = corpus() + extra
    for i, (name, source) in enumerate(sources):
        rnd = random.Random(f"{seed}:{name}")
        for _ in range(per_source):
            if not one(mutate(source, rnd), out, "mutant"):
                failures += 1
        if i % 50 == 0:
            print(f"  mutants: {i + 1}/{len(sources)} sources", flush=True)
    return failures


def real_files(folder: str, limit: int) -> list:
    found = []
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                try:
                    text = Path(p).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if len(text) < 200_000:
                    found.append((p, HEADER + text))
    random.Random(0).shuffle(found)
    return found[:limit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=20_000, help="generated programs")
    ap.add_argument("--mutants", type=int, default=50, help="mutants per fixture/example/real file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default=None, help="a folder of real .py files to mutate too")
    ap.add_argument("--corpus-files", type=int, default=500)
    ap.add_argument("--out", default="fuzz-failures")
    args = ap.parse_args()
    out = Path(args.out)
    start = time.time()
    extra = real_files(args.corpus, args.corpus_files) if args.corpus else []
    failed = mutants(args.mutants, args.seed, out, extra)
    print(f"mutants done: {failed} failures, {time.time() - start:.0f}s", flush=True)
    failed += generated(args.examples, args.seed, out)
    print(f"done: {failed} failures in {time.time() - start:.0f}s (inputs in {out}/)" if failed else f"done: no failure in {time.time() - start:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
