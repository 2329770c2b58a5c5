"""The whole-ecosystem run (issue 7): lint every .py file of the installed torch
package and of nine large PyPI packages (over 10,000 files: torch 2.13
~2,300, the wheels ~8,100) with every rule, and
assert amplint never has an internal error on real code.

The wheels are pinned and downloaded on first use with `pip download --no-deps`
into a cache outside the repository (`$AMPLINT_CORPUS_DIR`, default
~/.cache/amplint-corpus/ecosystem), unpacked there and reused. The test skips
only if they cannot be downloaded (no network / no PyPI). Marked slow; CI runs it.
Run it by hand with numbers: `pytest -m slow -s tests/test_ecosystem_run.py`.
"""
from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from amplint import Config, lint_paths
from amplint.engine.parallel import default_jobs
from amplint.engine.pipeline import is_internal_error

pytestmark = pytest.mark.slow

#: large, real PyTorch code bases plus big scientific/web ones (breadth of syntax)
PACKAGES = (
    "transformers==4.46.3",
    "diffusers==0.31.0",
    "timm==1.0.11",
    "pytorch-lightning==2.4.0",
    "sympy==1.13.3",
    "pandas==2.2.3",
    "scipy==1.14.1",
    "django==5.1.3",
    "networkx==3.4.2",
)
MIN_FILES = 10_000


def corpus_dir() -> Path:
    return Path(os.environ.get("AMPLINT_CORPUS_DIR", Path.home() / ".cache" / "amplint-corpus")) / "ecosystem"


def fetch(spec: str) -> Path:
    """The unpacked wheel of `spec` (downloaded once); skips the test when PyPI is unreachable."""
    root = corpus_dir()
    name = spec.replace("==", "-")
    target = root / name
    if (target / ".complete").exists():
        return target
    downloads = root / "downloads" / name
    downloads.mkdir(parents=True, exist_ok=True)
    wheels = list(downloads.glob("*.whl"))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(downloads), spec],
            capture_output=True,
            text=True,
            timeout=600,
        )
        wheels = list(downloads.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(f"cannot download {spec} from the package index (network or PyPI unreachable): {proc.stderr.strip()[-300:]}")
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(target)
    (target / ".complete").write_text(spec)
    return target


def installed_torch() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed (pip install -e '.[verify]')")
    return Path(list(spec.submodule_search_locations)[0])


def test_whole_ecosystem_has_no_internal_error():
    roots = [installed_torch(), *(fetch(p) for p in PACKAGES)]
    # lint everything: no exclude globs (torch lives in site-packages), no .gitignore
    config = Config(select=("ALL",), exclude=(), respect_gitignore=False)
    start = time.monotonic()
    result = lint_paths([str(r) for r in roots], config, jobs=default_jobs())
    seconds = time.monotonic() - start

    per_rule = collections.Counter(d.code for d in result.diagnostics if d.code != "AMP000")
    internal = [d for d in result.diagnostics if is_internal_error(d)]
    unparsable = [d for d in result.diagnostics if d.code == "AMP000" and not is_internal_error(d)]
    per_root = {}
    for r in roots:
        prefix = str(r) + os.sep
        per_root[r.name] = sum(1 for f in result.files if f.startswith(prefix))
    report = {
        "files": len(result.files),
        "files_per_package": per_root,
        "seconds": round(seconds, 1),
        "jobs": default_jobs(),
        "findings_per_rule": dict(sorted(per_rule.items())),
        "internal_errors": len(internal),
        "amp000_not_parsed": len(unparsable),
        "amp000_examples": [f"{d.filename}:{d.location.row}: {d.message[:120]}" for d in unparsable[:20]],
    }
    print("\n" + json.dumps(report, indent=2))
    (corpus_dir() / "last-run.json").write_text(json.dumps(report, indent=2))

    assert len(result.files) > MIN_FILES, per_root
    assert not internal, "\n".join(f"{d.filename}: {d.message}" for d in internal[:20])
