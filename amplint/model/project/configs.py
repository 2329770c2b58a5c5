"""Precision settings kept outside the code: DeepSpeed JSON and accelerate's YAML config.

Distributed training often states its precision in a config file the code names
(`deepspeed.initialize(config="ds_config.json")`, `TrainingArguments(deepspeed=...)`,
`DeepSpeedPlugin(hf_ds_config=...)`, an accelerate config YAML passed to
`accelerate launch --config_file`). The rules of issue 23 read those files here.

What is read, and how (the linted tree is untrusted input):

* only a file a string literal of the code names, resolved against the naming file's
  folder and then the project root, and only when its real path lies inside the project
  root (never a file outside the project, never through a link leading out of it); and,
  in a project whose code uses DeepSpeed, accelerate, transformers or Lightning, the
  JSON files the run's walk met inside the project (not excluded, not ignored: a
  DeepSpeed config launched from a shell script or an accelerate YAML the code never
  names), at most `wrappers.MAX_SHIPPED_CONFIGS` of them, the same fence applied;
* only a regular file, through `core/safe_read.py` (a named pipe or a device named
  `ds_config.json` is never opened), and at most `MAX_BYTES`;
* JSON with the standard library's parser (`json.loads`: no code runs, no object hooks),
  then a small scanner over the same text that records the line of every key path, so a
  finding can point at `"loss_scale": 128` itself;
* YAML with the small reader below, never PyYAML. accelerate writes its config as plain
  block mappings of scalars (`mixed_precision: fp16`, `deepspeed_config:` with nested
  keys), which this reader covers with line numbers; anything beyond that subset (flow
  collections other than `{}`/`[]`, anchors, aliases, tags, block scalars) makes the
  key's value unknown instead of guessed. A reader of our own also means the findings
  do not depend on whether PyYAML happens to be installed, and `yaml.safe_load` would
  not give line numbers anyway.

A file that cannot be read or parsed is simply unknown (`None`): rules then stay silent.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ...core.safe_read import read_bytes

#: the largest config file read (DeepSpeed and accelerate configs are a few hundred bytes)
MAX_BYTES = 256 * 1024
#: the suffixes of the files a string literal may name
CONFIG_SUFFIXES = (".json", ".yaml", ".yml")

KeyPath = Tuple[str, ...]


@dataclass
class ConfigFile:
    """A parsed config: its values, and the (line, column) of each key path (1-based)."""

    path: str
    values: Dict[str, Any]
    lines: Dict[KeyPath, Tuple[int, int]] = field(default_factory=dict)

    def get(self, *keys: str) -> Any:
        """The value at a key path (None when absent or not a mapping on the way)."""
        return lookup(self.values, keys)[1]

    def has(self, *keys: str) -> bool:
        return lookup(self.values, keys)[0]

    def where(self, *keys: str) -> Tuple[int, int]:
        """Where the key path is written (the nearest written prefix; else the file's start)."""
        return written_at(self.lines, keys, (1, 1))


def lookup(values: Any, keys: KeyPath) -> Tuple[bool, Any]:
    """(present, value) at a key path of nested mappings; (False, None) when a step is missing
    or not a mapping. One walk for every config reader (files, dict literals, wrappers)."""
    node = values
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def written_at(lines: Dict[KeyPath, Tuple[int, int]], keys: KeyPath, default: Tuple[int, int]) -> Tuple[int, int]:
    """Where the longest written prefix of a key path is, else `default`."""
    for n in range(len(keys), 0, -1):
        found = lines.get(tuple(keys[:n]))
        if found is not None:
            return found
    return default


def resolve(literal: str, naming_file: str, root: Optional[str]) -> Optional[str]:
    """The project file a string literal names, or None: tried next to the naming file,
    then at the project root; its real path must lie inside the (real) project root, or,
    without a root, inside the naming file's folder."""
    if not literal or len(literal) > 300 or "\0" in literal or not literal.lower().endswith(CONFIG_SUFFIXES):
        return None
    if os.path.isabs(literal) or literal.startswith("~"):
        return None  # outside any project by construction
    base = os.path.dirname(os.path.abspath(naming_file))
    fence = os.path.realpath(root) if root else os.path.realpath(base)
    for folder in (base, root):
        if not folder:
            continue
        candidate = os.path.realpath(os.path.join(folder, literal))
        if candidate != fence and not candidate.startswith(fence.rstrip(os.sep) + os.sep):
            continue
        if os.path.isfile(candidate):
            return candidate
    return None


def load(path: str, needles: Tuple[bytes, ...] = ()) -> Optional[ConfigFile]:
    """A JSON or YAML config file, parsed; None when it cannot be read or parsed, or (with
    `needles`) when its bytes hold none of them (no parse for a file that cannot matter)."""
    try:
        if os.stat(path).st_size > MAX_BYTES:
            return None
        data = read_bytes(path)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    if needles and not any(n in data for n in needles):
        return None
    text = data.decode("utf-8", "replace")
    if path.lower().endswith(".json"):
        return parse_json(text, path)
    return parse_yaml(text, path)


# --------------------------------------------------------------------------- JSON


def parse_json(text: str, path: str = "<json>") -> Optional[ConfigFile]:
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(values, dict):
        return None
    return ConfigFile(path, values, _json_key_lines(text))


_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def _json_key_lines(text: str) -> Dict[KeyPath, Tuple[int, int]]:
    """(line, column) of every object key, by key path (array elements are not paths)."""
    out: Dict[KeyPath, Tuple[int, int]] = {}
    stack: List[Tuple[str, Optional[str]]] = []  # (container kind, the key it sits under)
    pending: Optional[Tuple[str, int]] = None  # a string that may be a key, and its offset
    key: Optional[str] = None  # the key whose value comes next
    newlines = [m.start() for m in re.finditer("\n", text)]

    def position(offset: int) -> Tuple[int, int]:
        import bisect

        row = bisect.bisect_right(newlines, offset - 1)
        start = newlines[row - 1] + 1 if row else 0
        return row + 1, offset - start + 1

    def path_to(name: str) -> KeyPath:
        parts = [k for kind, k in stack[1:] if k is not None]
        return (*parts, name)

    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token == ":" and pending is not None and stack and stack[-1][0] == "{":
            try:
                name = json.loads(pending[0])
            except ValueError:
                name = None
            if isinstance(name, str):
                key = name
                if len(stack) < 12:
                    out.setdefault(path_to(name), position(pending[1]))
            pending = None
            continue
        pending = (token, m.start()) if token.startswith('"') else None
        if token in ("{", "["):
            inner = key if stack and stack[-1][0] == "{" else None
            stack.append((token, inner))
            key = None
        elif token in ("}", "]"):
            if stack:
                stack.pop()
            key = None
        elif token == ",":
            key = None
    return out


# --------------------------------------------------------------------------- YAML (a safe subset)

_YAML_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.\-]*|\"[^\"]*\"|'[^']*')\s*:(?:\s+(?P<value>.*?))?\s*$")
_UNKNOWN = object()


def parse_yaml(text: str, path: str = "<yaml>") -> Optional[ConfigFile]:
    """Block mappings of scalars (what accelerate's `accelerate config` writes), with the
    line of each key. Lines this reader does not understand end the mapping they are in;
    values it cannot read are left out (unknown), never guessed."""
    root: Dict[str, Any] = {}
    lines: Dict[KeyPath, Tuple[int, int]] = {}
    stack: List[Tuple[int, Dict[str, Any], KeyPath]] = [(-1, root, ())]
    last: Optional[Tuple[int, Dict[str, Any], str, KeyPath]] = None  # a key with an empty value
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            return None  # tabs are not YAML indentation
        m = _YAML_KEY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if m is None:
            if line.lstrip().startswith("- ") or line.strip() == "-":
                continue  # a sequence item: not read (no accelerate precision setting is one)
            continue  # anything else: not understood, skipped
        if last is not None and indent > last[0]:
            # the empty-valued key above opens a nested mapping
            child: Dict[str, Any] = {}
            last[1][last[2]] = child
            stack.append((last[0], child, last[3]))
        last = None
        while stack and indent <= stack[-1][0]:
            stack.pop()
        if not stack:
            return None
        _, mapping, prefix = stack[-1]
        key = m.group("key").strip("\"'")
        keypath = (*prefix, key)
        lines.setdefault(keypath, (number, indent + 1))
        value = m.group("value")
        if value is None or value == "":
            mapping[key] = None
            last = (indent, mapping, key, keypath)
            continue
        scalar = _scalar(value)
        if scalar is not _UNKNOWN:
            mapping[key] = scalar
    return ConfigFile(path, root, lines)


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("{}",):
        return {}
    if text in ("[]",):
        return []
    if not text or text[0] in "{[&*!|>%@`":
        return _UNKNOWN  # flow collections, anchors, aliases, tags, block scalars: not read
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "~"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------- what a config says


def deepspeed_shaped(values: Dict[str, Any]) -> bool:
    """Keys only a DeepSpeed config has next to its precision blocks."""
    known = ("train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization", "gradient_accumulation_steps",
             "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer")
    return isinstance(values, dict) and ("fp16" in values or "bf16" in values or "zero_optimization" in values) and any(
        k in values for k in known
    )


def accelerate_shaped(values: Dict[str, Any]) -> bool:
    """The keys `accelerate config` writes."""
    return isinstance(values, dict) and "distributed_type" in values and ("compute_environment" in values or "mixed_precision" in values)


def enabled(value: Any) -> Optional[bool]:
    """A DeepSpeed `enabled` value: True/False, None for "auto" or anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None
