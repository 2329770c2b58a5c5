"""Rewrite fixtures/*.expected from the current findings.

Run after a deliberate change, then review the diff by hand: every line of a
sidecar is a claim that amplint is right about that code.

    python scripts/update_fixture_expectations.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixture_expectations import current_findings, sidecar_text  # noqa: E402


def main() -> None:
    found = current_findings()
    for source in sorted((ROOT / "fixtures").glob("*.py")):
        sidecar = source.with_suffix(source.suffix + ".expected")
        sidecar.write_text(sidecar_text(found.get(source.name, [])))
        print(f"{sidecar.relative_to(ROOT)}: {len(found.get(source.name, []))} findings")


if __name__ == "__main__":
    main()
