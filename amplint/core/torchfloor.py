"""The oldest torch a project supports, read from its requirements.

As ruff infers `target-version` from `requires-python`, amplint infers
`torch-version` (which fixes may use APIs newer than the project's torch) from
the project's own declarations, first found wins: `[project] dependencies` in
pyproject.toml, `install_requires` in setup.cfg, `install_requires` in
setup.py (literal strings only: the file is read, never run), then
requirements*.txt. `torch>=X.Y`, `torch~=X.Y`, `torch>X.Y`, `torch==X.Y.*` and
`torch==X.Y.Z` give a floor; a requirement with only upper bounds, or none,
gives none. A `torch-version` setting overrides all of this.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from .safe_read import read_text

Version = Tuple[int, int]

#: the files that mark a project's root folder
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")

_NAME = re.compile(r"^\s*torch(?![A-Za-z0-9_.-])\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;#]*)", re.IGNORECASE)
_CLAUSE = re.compile(r"(?P<op>>=|~=|==|>)\s*v?(?P<major>\d+)(?:\.(?P<minor>\d+))?")


def floor_of(requirement: str) -> Optional[Version]:
    """`torch>=1.12` -> (1, 12); None when `requirement` is not torch or sets no lower bound."""
    m = _NAME.match(requirement)
    if m is None:
        return None
    floors = [
        (int(c.group("major")), int(c.group("minor") or 0)) for c in _CLAUSE.finditer(m.group("spec"))
    ]
    return max(floors) if floors else None


def _first_floor(requirements: Iterable[str]) -> Optional[Version]:
    for r in requirements:
        if isinstance(r, str):
            floor = floor_of(r)
            if floor is not None:
                return floor
    return None


def _from_pyproject(path: Path) -> Optional[Version]:
    from .config import ConfigError, _read_toml

    try:
        data = _read_toml(path)
    except ConfigError:
        return None
    deps = data.get("project", {}).get("dependencies", [])
    return _first_floor(deps) if isinstance(deps, list) else None


def _from_setup_cfg(path: Path) -> Optional[Version]:
    import configparser

    parser = configparser.ConfigParser()
    try:
        parser.read_string(read_text(str(path)))
        value = parser.get("options", "install_requires", fallback="")
    except (configparser.Error, UnicodeDecodeError, OSError):
        return None
    return _first_floor(value.splitlines())


def _from_setup_py(path: Path) -> Optional[Version]:
    import ast

    try:
        tree = ast.parse(read_text(str(path)))
    except (SyntaxError, ValueError, OSError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires" and isinstance(node.value, (ast.List, ast.Tuple)):
            return _first_floor(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return None


def _from_requirements(folder: Path) -> Optional[Version]:
    for path in sorted(folder.glob("requirements*.txt")):
        try:
            lines = read_text(str(path)).splitlines()  # a pipe named requirements.txt is never opened
        except OSError:
            continue
        floor = _first_floor(lines)
        if floor is not None:
            return floor
    return None


def infer(folder: Path) -> Optional[Tuple[Version, str]]:
    """(floor, the file it came from) for the project in `folder`, or None."""
    readers = (
        ("pyproject.toml", _from_pyproject),
        ("setup.cfg", _from_setup_cfg),
        ("setup.py", _from_setup_py),
    )
    for name, read in readers:
        if (folder / name).is_file():
            floor = read(folder / name)
            if floor is not None:
                return floor, name
    floor = _from_requirements(folder)
    if floor is not None:
        return floor, "requirements*.txt"
    return None


def project_folder(paths: Sequence[str]) -> Optional[Path]:
    """The nearest folder at or above the first path holding a project file."""
    starts: List[Path] = [Path(os.path.realpath(p)) for p in paths if p != "-"] or [Path.cwd()]
    start = starts[0] if starts[0].is_dir() else starts[0].parent
    for candidate in (start, *start.parents):
        if any((candidate / name).is_file() for name in PROJECT_FILES):
            return candidate
    return None
