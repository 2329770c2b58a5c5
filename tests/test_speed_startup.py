"""`amplint --version` and runs on files that pass no gate import neither libcst nor torch."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _imported(args, cwd):
    """(exit code, stdout, the set of top-level modules imported) for `amplint ARGS`."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "amplint._start", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"},
    )
    modules = set()
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name.split(".")[0])
    return out.returncode, out.stdout, modules


def test_version_imports_nothing_heavy(tmp_path):
    code, stdout, modules = _imported(["--version"], tmp_path)
    assert code == 0 and stdout.startswith("amplint ")
    assert not modules & {"libcst", "torch", "click"}, modules & {"libcst", "torch", "click"}


@pytest.mark.parametrize("extra", [["--no-cache"], [], ["--jobs", "2"], ["--output-format", "json"]])
def test_run_where_no_file_passes_a_gate(tmp_path, extra):
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text("import os\n\ndef f(x):\n    return os.path.join(x, 'y')\n")
    code, stdout, modules = _imported([str(tmp_path), "--isolated", *extra], tmp_path)
    assert code == 0, stdout
    assert "libcst" not in modules and "torch" not in modules


def test_warm_run_imports_no_libcst(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nscaler = torch.amp.GradScaler('cuda')\nscaler.scale(loss).backward()\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
    )
    st = os.stat(tmp_path / "train.py")
    os.utime(tmp_path / "train.py", ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
    code, _, modules = _imported([str(tmp_path), "--isolated"], tmp_path)
    assert code == 1 and "libcst" in modules
    code, stdout, modules = _imported([str(tmp_path), "--isolated"], tmp_path)
    assert code == 1 and "AMP101" in stdout
    assert "libcst" not in modules, "a warm run with nothing changed parses nothing"


def test_console_script_points_at_the_fast_entry():
    import sys as _sys

    if _sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    with open(os.path.join(HERE, "..", "pyproject.toml"), "rb") as fh:
        data = tomllib.load(fh)
    assert data["project"]["scripts"]["amplint"] == "amplint._start:main"


def test_importing_the_package_is_light():
    code = "import sys, amplint; amplint.Rule; amplint.Severity; print(sorted(m for m in ('libcst','torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr
