"""Small multi-file projects written for the project-model tests (tests/test_project_*.py)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict


def write_project(root: Path, files: Dict[str, str]) -> Path:
    """A project at `root`: a `pyproject.toml` (which makes `root` its project root) and `files`
    ({relative path: dedented text}), folders made as needed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root
