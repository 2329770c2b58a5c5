"""Are the rule gates sound on real code? Run rules with their gates bypassed.

    python benchmarks/gate_soundness.py                    # every rule, the drill corpus
    python benchmarks/gate_soundness.py --rules AMP301 --prefilter '\\d{5}|\\d[eE]\\+?\\d'

For every file of the drill's pinned packages (benchmarks/corpus.py), each
chosen rule runs on the parsed file *without* its gate; a file where the rule
fires but its gate fails is a gate bug (the linter would have skipped a real
finding), printed and counted. `--prefilter` parses only files a regex matches
(a looser, obviously sound condition) to save time. Also prints how many
files each gate lets through, to see how selective it is, and checks that
parsing only the excerpt (amplint/engine/excerpt.py) of a file finds exactly what
parsing it whole finds, for the rules with `gate_sites`. Run by hand.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import DRILL_PACKAGES, fetch, python_files  # noqa: E402

import libcst as cst  # noqa: E402

from amplint.core.config import Config  # noqa: E402
from amplint.core.gating import passing
from amplint.engine.pipeline import FileResult, _excerpt_checked, _parse_and_check, read_file, run_guarded  # noqa: E402
from amplint.engine.registry import all_rules, rule_specs  # noqa: E402
from amplint.model.context import ModuleContext  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", nargs="*", default=None, help="codes (default: every rule)")
    parser.add_argument("--prefilter", default=None, help="parse only files this regex matches")
    args = parser.parse_args()
    wanted = set(args.rules or [r.code for r in all_rules()])
    rules = [r for r in all_rules() if r.code in wanted]
    specs = {s.code: s for s in rule_specs()}
    prefilter = re.compile(args.prefilter) if args.prefilter else None
    fired = collections.Counter()
    gated = collections.Counter()
    misses = []
    files = parsed = excerpts = 0
    local = [s for s in rule_specs() if s.gate_sites is not None and s.code in wanted]
    codes = frozenset(s.code for s in rule_specs())
    start = time.perf_counter()
    for name, version in DRILL_PACKAGES.items():
        for path in python_files(fetch(name, version)):
            files += 1
            source, _ = read_file(str(path))  # as the linter reads it: own line ends, coding cookie
            if source is None:
                continue
            passes = {r.code for r in rules if specs[r.code].passes_gate(source)}
            gated.update(passes)
            excerpts += _excerpt_differs(source, str(path), local, codes, misses)
            if prefilter is not None and not prefilter.search(source):
                continue
            try:
                ctx = ModuleContext.build(cst.parse_module(source), source, str(path))
            except Exception:  # noqa: BLE001 - unparsable or too deep: the linter reports those itself
                continue
            parsed += 1
            for rule in rules:
                try:
                    found = list(rule().check(ctx))
                except Exception:  # noqa: BLE001
                    continue
                if found:
                    fired[rule.code] += 1
                    if rule.code not in passes:
                        misses.append(f"{rule.code} fires on {path} but its gate fails")
    for line in misses:
        print(line)
    print(f"{files} files, {parsed} parsed, {excerpts} excerpts compared, {time.perf_counter() - start:.0f} s")
    for r in rules:
        print(f"  {r.code}: gate passes {gated[r.code]:5} files, rule fires in {fired[r.code]:4}")
    print(f"{len(misses)} gate misses or excerpt differences")
    return 1 if misses else 0


def _excerpt_differs(source: str, name: str, local: list, codes: frozenset, misses: list) -> int:
    """Compare excerpt and whole-file diagnostics of the local rules; 1 if an excerpt was made."""
    active = passing(local, source)
    if not active:
        return 0
    config = Config()
    partial = _excerpt_checked(source, name, config, active, codes, FileResult(path=name))
    if partial is None:
        return 0
    whole = run_guarded(_parse_and_check, source, name, config, active, codes, FileResult(path=name))
    if partial != whole:
        misses.append(f"excerpt of {name} finds {len(partial)} diagnostics, the whole file {len(whole or [])}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
