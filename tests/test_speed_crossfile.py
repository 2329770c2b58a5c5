"""What the cross-file pass costs in imports: a run over a multi-file project imports libcst
only where something is parsed, and a pool run imports it once, in the parent, before the
workers fork (they inherit it instead of each importing it again)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "bce_loss_module"


def _run(args, cwd):
    """(stdout, how many processes imported the `libcst` package) for `amplint ARGS`; forked
    workers inherit `-X importtime` and stderr, so their imports are counted too."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "amplint._start", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"},
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]
    imports = sum(1 for line in out.stderr.splitlines() if line.startswith("import time:") and line.rsplit("|", 1)[1].strip() == "libcst")
    return out.stdout, imports


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(PROJECT, root)
    for path in root.rglob("*"):  # old enough for the cache to trust their stat
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
    return root


def test_warm_and_one_file_runs_of_a_project_import_no_libcst(tmp_path):
    root = _copy(tmp_path)
    cache = ["--isolated", "--cache-dir", str(tmp_path / "cache")]
    cold, imports = _run([str(root), *cache], tmp_path)
    assert "losses.py:22:15: AMP303" in cold and imports == 1
    warm, imports = _run([str(root), *cache], tmp_path)
    assert warm == cold and imports == 0, "every file and the project pass are cache hits"
    losses = root / "segkit" / "losses.py"
    os.utime(losses)  # touched, bytes unchanged: what pre-commit sees after a save
    one, imports = _run([str(losses), *cache], tmp_path)
    assert imports == 0
    assert [line for line in one.splitlines() if "AMP303" in line] == [line for line in cold.splitlines() if "AMP303" in line]


def test_a_pool_run_imports_libcst_once(tmp_path):
    root = _copy(tmp_path)
    (root / "segkit" / "filler.py").write_text("# filler\n" * 130000)  # enough bytes for the pool
    for i in range(8):
        (root / "segkit" / f"plain_{i}.py").write_text(f"X = {i}\n")
    serial, imports = _run([str(root), "--isolated", "--no-cache", "--jobs", "1"], tmp_path)
    assert imports == 1 and "AMP303" in serial
    pooled, imports = _run([str(root), "--isolated", "--no-cache", "--jobs", "2"], tmp_path)
    assert pooled == serial
    assert imports == 1, f"libcst imported by {imports} processes: the workers did not inherit it"
