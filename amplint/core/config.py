"""`[tool.amplint]` in the nearest pyproject.toml, turned into one frozen Config.

Unknown keys, unknown codes and wrong types raise `ConfigError` with a
"did you mean" hint; the CLI turns that into exit code 2.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

DEFAULT_EXCLUDE: Tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    ".eggs",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".amplint_cache",
)

PRECISIONS = ("auto", "fp16", "bf16")
#: the largest `file-timeout` a config file may set (the command line may say 0: no limit)
MAX_FILE_TIMEOUT = 600.0


class ConfigError(Exception):
    """A configuration or usage problem: exit code 2 with a one-line message."""


@dataclass(frozen=True)
class Config:
    select: Tuple[str, ...] = ()  # empty: every default (non-info) rule
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    exclude: Tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: Tuple[str, ...] = ()
    torch_version: Optional[Tuple[int, int]] = None  # the oldest torch the project supports
    precision: str = "auto"
    verify_device: str = "auto"
    verify_timeout: float = 60.0
    verify_budget: float = 900.0
    file_timeout: float = 120.0  # seconds one file's analysis may take (0: no limit); see engine/budget.py
    root: Optional[str] = None  # folder of the pyproject.toml the config came from
    respect_gitignore: bool = True  # skip what .gitignore / .git/info/exclude ignore when walking folders
    force_exclude: bool = False  # apply exclude globs to files named on the command line too

    def selected_codes(self, known: Sequence[str], defaults: Sequence[str]) -> FrozenSet[str]:
        chosen = set(expand_codes(self.select, known)) if self.select else set(defaults)
        chosen |= set(expand_codes(self.extend_select, known))
        chosen -= set(expand_codes(self.ignore, known))
        return frozenset(chosen)

    def ignored_for(self, path: str, known: Sequence[str]) -> FrozenSet[str]:
        """Codes `per-file-ignores` turns off for `path`."""
        import fnmatch

        rel = _relative(path, self.root)
        out: set = set()
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(os.path.basename(path), pattern):
                out |= set(expand_codes(codes, known))
        return frozenset(out)

    def fingerprint(self) -> str:
        """A stable text of everything that changes results (for the cache)."""
        return repr((self.select, self.ignore, self.extend_select, self.per_file_ignores, self.torch_version, self.precision))


def _relative(path: str, root: Optional[str]) -> str:
    p = os.path.abspath(path)
    if root:
        try:
            return os.path.relpath(p, root).replace(os.sep, "/")
        except ValueError:
            pass
    return p.replace(os.sep, "/")


def expand_codes(selectors: Iterable[str], known: Sequence[str]) -> List[str]:
    """`ALL`, `AMP1`, `AMP101` -> the matching known codes; unknown ones raise."""
    out: List[str] = []
    for sel in selectors:
        sel = sel.strip().upper()
        if not sel:
            continue
        if sel == "ALL":
            out.extend(known)
            continue
        matches = [c for c in known if c.startswith(sel)]
        if not matches:
            import difflib  # only for this message

            hint = difflib.get_close_matches(sel, known, n=1)
            raise ConfigError(f"unknown rule selector {sel!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        out.extend(matches)
    return out


# --------------------------------------------------------------------- pyproject

_KEYS = {
    "select": "codes",
    "ignore": "codes",
    "extend-select": "codes",
    "per-file-ignores": "table",
    "exclude": "strings",
    "extend-exclude": "strings",
    "torch-version": "string",
    "precision": "string",
    "verify": "verify",
    "respect-gitignore": "bool",
    "force-exclude": "bool",
    "file-timeout": "seconds",
}
_VERIFY_KEYS = {"device": "string", "timeout": "number", "budget": "number"}


#: per folder, the files amplint reads its settings from, first match wins (ruff's order:
#: `.ruff.toml`, `ruff.toml`, then a pyproject.toml with a [tool.ruff] table)
CONFIG_FILES = (".amplint.toml", "amplint.toml")


def find_config(paths: Sequence[str]) -> Optional[Path]:
    """The nearest `.amplint.toml`, `amplint.toml`, or pyproject.toml with [tool.amplint], walking up."""
    # realpath, not Path.resolve: on a symbolic link loop the latter raises RuntimeError (3.11)
    starts = [Path(os.path.realpath(p)) for p in paths] or [Path.cwd()]
    for start in starts:
        folder = start if start.is_dir() else start.parent
        for candidate in (folder, *folder.parents):
            for name in CONFIG_FILES:
                if (candidate / name).is_file():
                    return candidate / name
            found = _pyproject_with_table(candidate / "pyproject.toml")
            if found is not None:
                return found
    return None


def find_pyproject(paths: Sequence[str]) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.amplint] table, walking up from the paths."""
    # realpath, not Path.resolve: on a symbolic link loop the latter raises RuntimeError (3.11)
    starts = [Path(os.path.realpath(p)) for p in paths] or [Path.cwd()]
    for start in starts:
        folder = start if start.is_dir() else start.parent
        for candidate in (folder, *folder.parents):
            found = _pyproject_with_table(candidate / "pyproject.toml")
            if found is not None:
                return found
    return None


def _pyproject_with_table(f: Path) -> Optional[Path]:
    if not f.is_file():
        return None
    try:
        data = _read_toml(f)
    except ConfigError:
        return f  # report the broken file rather than skipping past it
    return f if "amplint" in data.get("tool", {}) else None


def _read_toml(path: Path) -> Dict[str, Any]:
    if sys.version_info >= (3, 11):  # imported here: most runs read no TOML (--isolated, no pyproject)
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from .safe_read import read_bytes

    try:
        return tomllib.loads(read_bytes(str(path)).decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply to read") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 (byte 0x{exc.object[exc.start:exc.start + 1].hex()} at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def load_config(path: Optional[Path], known_codes: Sequence[str]) -> Config:
    """Config from a pyproject.toml (or a bare amplint TOML with --config)."""
    if path is None:
        return Config()
    data = _read_toml(path)
    table = data.get("tool", {}).get("amplint")
    if table is None:
        table = data if path.name != "pyproject.toml" else {}
    return config_from_table(table, known_codes, root=os.path.realpath(path.parent), source=str(path))


def config_from_table(table: Mapping[str, Any], known_codes: Sequence[str], root: Optional[str] = None, source: str = "config") -> Config:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: [tool.amplint] must be a table")
    kwargs: Dict[str, Any] = {"root": root}
    for key, value in table.items():
        kind = _KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{source}: unknown key {key!r} in [tool.amplint]{_did_you_mean(key, _KEYS)}")
        attr = key.replace("-", "_")
        if kind == "codes":
            codes = _strings(value, key, source)
            expand_codes(codes, known_codes)  # validates
            kwargs[attr] = tuple(codes)
        elif kind == "strings":
            kwargs[attr] = tuple(_strings(value, key, source))
        elif kind == "table":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: 'per-file-ignores' must be a table of glob = [codes]")
            entries = []
            for pattern, codes in value.items():
                codes = _strings(codes, f"per-file-ignores.{pattern}", source)
                expand_codes(codes, known_codes)
                entries.append((pattern, tuple(codes)))
            kwargs[attr] = tuple(entries)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{source}: {key!r} must be true or false")
            kwargs[attr] = value
        elif kind == "seconds":
            kwargs[attr] = parse_seconds(value, f"{source}: {key}")
            if not 0 < kwargs[attr] <= MAX_FILE_TIMEOUT:  # a repository cannot lift the budget
                raise ConfigError(f"{source}: {key} must be more than 0 and at most {MAX_FILE_TIMEOUT:g} seconds in a "
                                  f"config file, got {value!r} (--file-timeout 0 on the command line turns the budget off)")
        elif key == "torch-version":
            kwargs[attr] = parse_torch_version(value, source)
        elif key == "precision":
            if value not in PRECISIONS:
                raise ConfigError(f"{source}: precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
            kwargs[attr] = value
        elif kind == "verify":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: [tool.amplint.verify] must be a table")
            for vkey, vvalue in value.items():
                if vkey not in _VERIFY_KEYS:
                    raise ConfigError(f"{source}: unknown key {vkey!r} in [tool.amplint.verify]{_did_you_mean(vkey, _VERIFY_KEYS)}")
                if vkey == "device":
                    if not isinstance(vvalue, str):
                        raise ConfigError(f"{source}: verify.device must be a string")
                    kwargs["verify_device"] = vvalue
                else:  # caps are checked with the command line's values (`amplint.verify.runner`)
                    if isinstance(vvalue, bool) or not isinstance(vvalue, (int, float)) or not math.isfinite(vvalue) or vvalue <= 0:
                        raise ConfigError(f"{source}: verify.{vkey} must be a positive, finite number of seconds")
                    kwargs[f"verify_{vkey}"] = float(vvalue)
    return Config(**kwargs)


def parse_seconds(value: Any, what: str) -> float:
    """A non-negative number of seconds (0: no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise ConfigError(f"{what} must be a number of seconds (0: no limit), got {value!r}")
    return float(value)


def parse_torch_version(value: Any, source: str = "config") -> Tuple[int, int]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # TOML reads an unquoted 2.10 as the number 2.1: never guess which was meant
        raise ConfigError(f"{source}: torch-version must be a quoted string like \"{value}\" (an unquoted 2.10 reads as 2.1)")
    if not isinstance(value, str):
        raise ConfigError(f"{source}: torch-version must be a string like \"2.1\"")
    parts = value.strip().lstrip(">=~^ ").split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ConfigError(f"{source}: torch-version must look like \"2.1\", got {value!r}") from None


def _strings(value: Any, key: str, source: str) -> List[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{source}: {key!r} must be a list of strings")
    return list(value)


def _did_you_mean(key: str, options: Iterable[str]) -> str:
    import difflib  # only for this message

    hint = difflib.get_close_matches(key, list(options), n=1)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def with_overrides(config: Config, **overrides: Any) -> Config:
    """CLI flags override config values; None means "not given"."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, **given)
