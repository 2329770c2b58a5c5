"""Real PyTorch code from PyPI, downloaded and unpacked outside the repository.

Shared by the real-code drill (`benchmarks/drill.py`), the speed benchmark and
the whole-ecosystem robustness test. Nothing here is ever committed: packages
land in `$AMPLINT_CORPUS_DIR` (default `~/.cache/amplint-corpus`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

#: pinned releases of real training code (name -> version)
DRILL_PACKAGES: Dict[str, str] = {
    "transformers": "5.24.0",
    "accelerate": "1.15.0",
    "diffusers": "0.42.1",
    "timm": "1.0.31",
    "pytorch-lightning": "2.6.6",
    "ultralytics": "8.4.190",
    "peft": "0.21.2",
    "trl": "1.16.0",
    "open-clip-torch": "3.3.0",
    "deepspeed": "0.19.8",
    "mmengine": "0.10.7",
    "mosaicml": "0.32.1",
    "speechbrain": "1.1.2",
    "torchtune": "0.6.1",
    "sentence-transformers": "6.2.0",
    "fairscale": "0.4.13",
    # multi-file training projects (issue 13): trainers, engines, solvers, recipes
    "yolov5": "7.0.14",
    "nnunetv2": "2.8.1",
    "pytorch-ignite": "0.5.5",
    "monai": "1.6.1",
    "fastai": "2.8.12",
    "audiocraft": "1.3.0",
    "trainer": "0.0.36",
    "rfdetr": "1.11.2",
    "salesforce-lavis": "1.0.2",
    "litgpt": "0.5.13",
    "torchdistill": "1.1.5",
    "super-gradients": "3.7.1",
}


def corpus_dir() -> Path:
    return Path(os.environ.get("AMPLINT_CORPUS_DIR", Path.home() / ".cache" / "amplint-corpus"))


def fetch(name: str, version: str, root: Optional[Path] = None) -> Path:
    """Download (wheel preferred, else sdist) and unpack; returns the unpacked folder."""
    root = root or corpus_dir()
    target = root / f"{name}-{version}"
    done = target / ".unpacked"
    if done.exists():
        return target
    downloads = root / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{name}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(downloads), spec]
    try:
        subprocess.run(cmd + ["--only-binary=:all:"], check=True, capture_output=True, timeout=600)
    except subprocess.CalledProcessError:
        subprocess.run(cmd + ["--no-binary=:all:"], check=True, capture_output=True, timeout=600)
    archive = _find_archive(downloads, name, version)
    target.mkdir(parents=True, exist_ok=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(target)
    else:
        with tarfile.open(archive) as t:
            t.extractall(target, filter="data") if sys.version_info >= (3, 12) else t.extractall(target)
    done.write_text(archive.name)
    return target


def _find_archive(folder: Path, name: str, version: str) -> Path:
    norm = name.replace("-", "_").lower()
    for f in sorted(folder.iterdir()):
        low = f.name.lower().replace("-", "_")
        if low.startswith(f"{norm}_{version}".lower()) or low.startswith(f"{norm}-{version}".lower()):
            return f
    raise FileNotFoundError(f"no archive for {name}=={version} in {folder}")


def python_files(folder: Path) -> List[Path]:
    return sorted(p for p in folder.rglob("*.py") if p.is_file())


if __name__ == "__main__":
    for n, v in DRILL_PACKAGES.items():
        print(n, fetch(n, v))
