"""`--show-settings`: the settings a run would use, and where each came from.

One `key = value` line per setting in the TOML spelling of [tool.amplint], so a
line can be pasted into a config file; the selection is shown expanded to the
rule codes it turns on.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from .core.config import Config


def _toml(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f'"{value[0]}.{value[1]}"'  # torch-version
    if isinstance(value, tuple) and value and all(isinstance(v, tuple) for v in value):
        return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value) + " }"  # per-file-ignores
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def settings_text(config: Config, origin: Mapping[str, Any]) -> str:
    from .engine.pipeline import default_codes, known_codes

    lines = [f"# config file: {origin.get('file') or '(none: defaults)'}"]
    floor_from = origin.get("torch-version")
    for f in fields(Config):
        key = f.name.replace("_", "-")
        value = getattr(config, f.name)
        note = ""
        if f.name == "torch_version":
            if floor_from:
                note = f"  # inferred from {floor_from}"
            elif value is None:
                note = "  # no floor known: fixes say which torch they need"
        if f.name == "root":
            key = "# root"
        elif f.name.startswith("verify_"):
            key = "verify." + f.name[len("verify_"):]
        lines.append(f"{key} = {_toml(value)}{note}")
    selected = sorted(config.selected_codes(known_codes(), default_codes()))
    lines.append(f"# rules enabled ({len(selected)}): {', '.join(selected)}")
    return "\n".join(lines) + "\n"
