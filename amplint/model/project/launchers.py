"""Launch commands a project ships outside its Python code: the precision a launcher sets.

A training script's precision is often chosen where the script is started, not in its code:
`accelerate launch --mixed_precision bf16 --num_processes 1 open_instruct/finetune.py` in a
shell script, `accelerate launch --mixed_precision=fp16 src/train.py` in a README's command
block, `deepspeed train.py --deepspeed ds.json --bf16` for a Hugging Face script whose
`TrainingArguments` come from the command line (`HfArgumentParser`). This module reads those
commands (issue 22/23's launcher facts), over text only:

* which files: the shell scripts (`.sh`), Makefiles, Markdown files (fenced code blocks
  only) and Jupyter notebooks (their Markdown cells' fenced blocks, their code cells' `!`
  shell escapes and `%%bash` cells) the run's walk met inside the project (`WalkRecord.configs`: not excluded, not
  ignored, no link leading out), at most `MAX_LAUNCHERS`, only regular files of at most
  `MAX_BYTES` through `core/safe_read.py`, and only those whose bytes name a launcher;
* what is read: each command (a logical line: backslash-newline continues it, so does a
  newline inside quotes; `;`, `&&`, `||`, `|` and `&` end it) that runs `accelerate launch`
  (also `python -m accelerate.commands.launch`), `torchrun`, `deepspeed` or `python` on a
  `.py` file. Quotes are dropped rather than grouped (`LAUNCH_CMD="accelerate launch \\
  ..."` is read as the command it holds); a token holding a shell expansion (`$SCRIPT`) is
  unknown, never guessed;
* which script: the `.py` path resolved against the project root, the launcher's folder and
  the folders between them; it must name exactly one file, inside the project (a launcher
  fact only applies to the script it launches).

Each command is a `Launch`: the launcher's options (`--mixed_precision`, `--use_deepspeed`,
`--config_file`, `--deepspeed_config_file`, ...; `-` and `_` spelled alike) and the script's
arguments, each with where it is written. An `accelerate launch --config_file cfg.yaml` whose
YAML names exactly one project file that reads as accelerate's config also carries what that
file sets (`LaunchConfig`, attached by the project view: `ScaleView.launches`): its
`mixed_precision` and the plugins its `distributed_type` puts behind accelerate. accelerate
reads a given config file instead of its default one and lets the command line win over it,
so the launch's precision and plugins are then known; a `--config_file` that names no project
file (the user's own, outside the repository) leaves them unknown, as accelerate's default
config does. Nothing here runs anything or imports torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from ...core.safe_read import read_bytes

#: the largest launcher file read
MAX_BYTES = 256 * 1024
#: the most launcher files one project pass reads
MAX_LAUNCHERS = 256
#: the files that may hold launch commands (a Makefile by its name)
LAUNCHER_SUFFIXES = (".sh", ".md", ".ipynb")
LAUNCHER_NAMES = ("Makefile", "makefile", "GNUmakefile")
#: a launcher file names one of these (a file holding none is not tokenized)
_NEEDLES = (b"accelerate", b"torchrun", b"deepspeed", b"--fp16", b"--bf16")

#: accelerate launch options that take no value (others take the next token)
_ACCELERATE_FLAGS = frozenset((
    "cpu", "multi_gpu", "tpu", "ipex", "use_xpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "debug", "quiet", "q",
    "m", "module", "no_python", "same_network", "enable_cpu_affinity", "tpu_use_cluster", "tpu_use_sudo", "downcast_bf16",
    "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation", "h", "help", "rdzv_conf_flag",
))
#: torchrun / deepspeed launcher options that take no value
_OTHER_FLAGS = frozenset((
    "standalone", "no_python", "m", "module", "run_path", "no_local_rank", "no_ssh_check", "force_multi", "autotuning_flag",
    "enable_each_rank_log_flag", "bind_cores_to_rank", "elastic_training", "no_ssh", "save_pid",
))

Token = Tuple[str, int, int]  # (text, row, column), 1-based

#: the precisions accelerate's launcher and config take
_PRECISIONS = ("no", "fp16", "bf16", "fp8")
#: accelerate's `distributed_type` values that put a plugin behind `prepare` (the others: DDP,
#: one process, TPU, CPU; none of them a plugin scaling on its own)
_PLUGIN_TYPES = {"DEEPSPEED": "deepspeed", "FSDP": "fsdp", "MEGATRON_LM": "megatron_lm"}
_PLAIN_TYPES = frozenset(("NO", "MULTI_GPU", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA",
                          "MULTI_MUSA", "MULTI_HPU", "XLA", "TPU"))
#: launcher options that name a plugin (each a prefix too: `--deepspeed_config_file`, `--fsdp_sharding_strategy`)
_PLUGIN_OPTIONS = {"use_deepspeed": "deepspeed", "deepspeed_config_file": "deepspeed", "zero_stage": "deepspeed",
                   "use_fsdp": "fsdp", "use_megatron_lm": "megatron_lm"}
_PLUGIN_PREFIXES = (("deepspeed_", "deepspeed"), ("fsdp_", "fsdp"), ("megatron_lm_", "megatron_lm"))
#: launcher options that fix the process layout: accelerate then reads no `distributed_type` from a config
_LAYOUT_FLAGS = frozenset(("multi_gpu", "tpu", "tpu_use_cluster"))


@dataclass(frozen=True)
class LaunchConfig:
    """What the accelerate config YAML a launch names (`--config_file cfg.yaml`) sets: its
    `mixed_precision` ("no" | "fp16" | "bf16" | "fp8"; "no" when the key is absent, as
    accelerate reads it; None when written but not a literal), the plugins its
    `distributed_type` puts behind `prepare` (None when that is not one accelerate knows), its
    `use_cpu`, and where each is written (`rows`: key -> line)."""

    path: str
    mixed_precision: Optional[str]
    plugins: Optional[FrozenSet[str]]
    cpu: Optional[bool]
    rows: Tuple[Tuple[str, int], ...] = ()

    def row(self, key: str) -> int:
        return dict(self.rows).get(key, 1)


def launch_config(path: str, values: Dict[str, Any], lines: Dict[Tuple[str, ...], Tuple[int, int]]) -> Optional[LaunchConfig]:
    """The launch facts of one parsed accelerate config (`configs.ConfigFile` values and key
    lines); None when it is not accelerate's (no `distributed_type` next to
    `compute_environment` or `mixed_precision`)."""
    if not isinstance(values, dict) or "distributed_type" not in values or not (
        "compute_environment" in values or "mixed_precision" in values
    ):
        return None
    mp: Optional[str] = "no"
    if "mixed_precision" not in values and values.get("fp16") is True:
        mp = "fp16"  # an older accelerate's `fp16: true` (accelerate still reads it so)
    elif "mixed_precision" in values:
        raw = values["mixed_precision"]
        if raw is False or raw is None:
            mp = "no"  # `mixed_precision: no` reads as YAML's false
        elif isinstance(raw, str) and raw.strip().lower() in _PRECISIONS:
            mp = raw.strip().lower()
        else:
            mp = None
    kind = values.get("distributed_type")
    plugins: Optional[FrozenSet[str]] = None
    if isinstance(kind, str):
        kind = kind.strip().upper()
        if kind in _PLUGIN_TYPES:
            plugins = frozenset((_PLUGIN_TYPES[kind],))
        elif kind in _PLAIN_TYPES:
            plugins = frozenset()
    elif kind is False:  # `distributed_type: NO` written lower-case reads as false
        plugins = frozenset()
    cpu = values.get("use_cpu")
    rows = tuple((k, lines[(k,)][0]) for k in ("mixed_precision", "distributed_type", "use_cpu") if (k,) in lines)
    return LaunchConfig(path, mp, plugins, cpu if isinstance(cpu, bool) else (False if cpu is None else None), rows)


@dataclass(frozen=True)
class Launch:
    """One command starting a project script: `kind` ("accelerate" | "torchrun" | "deepspeed" |
    "python"), where it is written (`path`, `row`, `col`: the launcher's first word), the
    script it runs (absolute), the launcher's options and the script's arguments."""

    kind: str
    path: str
    row: int
    col: int
    script: str
    options: Tuple[Tuple[str, str, int, int], ...]  # (name with `_`, value or "", row, col)
    args: Tuple[Token, ...]
    #: the accelerate config YAML `--config_file` names, read (attached by the project view)
    config: Optional[LaunchConfig] = None

    def option(self, name: str) -> Optional[Tuple[str, int, int]]:
        """(value, row, column) of a launcher option (the last one given), None when absent."""
        found = None
        for n, value, row, col in self.options:
            if n == name:
                found = (value, row, col)
        return found

    @property
    def mixed_precision(self) -> Optional[str]:
        """accelerate's precision for the launch ("no" | "fp16" | "bf16" | "fp8"): its
        `--mixed_precision`, else the `mixed_precision` of the config YAML its `--config_file`
        names (`config`); None when neither states a literal (a shell expansion, a config
        outside the project, accelerate's default config)."""
        if self.kind != "accelerate":
            return None
        found = self.option("mixed_precision")
        if found is not None:
            value = found[0].lower()
            return value if value in _PRECISIONS else None
        if self.config is not None and self.config.cpu is False:
            return self.config.mixed_precision
        return None

    @property
    def precision_from_config(self) -> bool:
        """Whether `mixed_precision` comes from the launched config YAML (no `--mixed_precision`)."""
        return self.kind == "accelerate" and self.option("mixed_precision") is None and self.mixed_precision is not None

    @property
    def plugins(self) -> Optional[FrozenSet[str]]:
        """The plugins ("deepspeed", "fsdp", "megatron_lm") the launch may put behind
        accelerate's `prepare`: those its options name; else, with `--config_file`, those the
        YAML's `distributed_type` names (none when the command fixes the process layout:
        `--multi_gpu`, `--tpu`), None when that YAML is not known; without one, none when the
        command fixes the process layout (`--num_processes`, `--multi_gpu`, `--cpu`), else None
        (accelerate's default config file, outside the project, may add one)."""
        if self.kind != "accelerate":
            return None
        names = {n for n, _, _, _ in self.options}
        named = {kind for n in names for kind in [_PLUGIN_OPTIONS.get(n)] if kind}
        named |= {kind for n in names for prefix, kind in _PLUGIN_PREFIXES if n.startswith(prefix)}
        if named:
            return frozenset(named)
        if "config_file" in names:
            if names & _LAYOUT_FLAGS:
                return frozenset()
            return self.config.plugins if self.config is not None else None
        return frozenset() if names & {"num_processes", "multi_gpu", "cpu", "num_machines"} else None

    @property
    def distributed_plugin(self) -> Optional[bool]:
        """Whether the launch may put DeepSpeed, FSDP or Megatron-LM behind accelerate: True
        when an option or the launched config YAML says so, None when a config file outside the
        project (this one or accelerate's default) may decide, False when the command (with its
        config YAML) rules them out. accelerate's default config file (`accelerate config`,
        outside the project) is not known: only a command that also fixes the process layout
        (`--num_processes`, `--multi_gpu`, `--cpu`) or names a config YAML of the project is
        read as complete."""
        plugins = self.plugins
        return None if plugins is None else bool(plugins)

    def arg(self, *names: str) -> Optional[Tuple[str, int, int]]:
        """A script argument's value (the token after `--name`, or after `=`), with where the
        option is written: ("", row, col) for a flag followed by another option or nothing."""
        found = None
        args = self.args
        for i, (text, row, col) in enumerate(args):
            if not text.startswith("--"):
                continue
            name, eq, value = text[2:].partition("=")
            if name.replace("-", "_") not in names:
                continue
            if eq:
                found = (value or quoted_value(args, i), row, col)
            elif i + 1 < len(args) and not args[i + 1][0].startswith("-"):
                found = (args[i + 1][0], row, col)
            else:
                found = ("", row, col)
        return found


def quoted_value(tokens: Sequence[Token], i: int) -> str:
    """The quoted value of `--name="fp16"` (the tokenizer drops quotes and splits there: the
    word `--name=` is followed, right after the quote, by `fp16`); "" when the next word is not
    written right after one quote character on the same row."""
    text, row, col = tokens[i]
    if i + 1 < len(tokens):
        nxt, nrow, ncol = tokens[i + 1]
        if nrow == row and ncol == col + len(text) + 1 and not nxt.startswith("-"):
            return nxt
    return ""


def command_line_bool(text: str) -> Optional[bool]:
    """A boolean command-line value as HfArgumentParser reads it (`--fp16`, `--fp16 true`,
    `--bf16 0`); None for anything else (a shell expansion, a word it would refuse)."""
    lowered = text.lower()
    if lowered in ("", "true", "1", "yes", "y", "t"):
        return True
    if lowered in ("false", "0", "no", "n", "f"):
        return False
    return None


def launcher_file(path: str) -> bool:
    """A file that may hold launch commands (by its name)."""
    name = os.path.basename(path)
    return name.endswith(LAUNCHER_SUFFIXES) or name in LAUNCHER_NAMES


def read_launches(path: str, root: str) -> List[Launch]:
    """The launch commands of one launcher file whose scripts resolve inside `root`; [] when the
    file cannot be read, is too large, or names no launcher."""
    try:
        if os.stat(path).st_size > MAX_BYTES:
            return []
        data = read_bytes(path)
    except OSError:
        return []
    if len(data) > MAX_BYTES or not any(n in data for n in _NEEDLES):
        return []
    text = data.decode("utf-8", "replace")
    out: List[Launch] = []
    found = notebook_commands(text) if path.lower().endswith(".ipynb") else commands(text, markdown=path.lower().endswith(".md"))
    for tokens in found:
        found = parse_command(tokens, path, root)
        if found is not None:
            out.append(found)
    return out


# --------------------------------------------------------------------------- tokens

_FENCE = re.compile(r"^\s*(```|~~~)")


def commands(text: str, markdown: bool = False) -> Iterator[List[Token]]:
    """The commands of a shell text (a Markdown file: of its fenced code blocks only), each a
    list of (word, row, column)."""
    if markdown:
        lines = text.split("\n")
        block: List[str] = []
        start = 0
        inside = False
        for number, line in enumerate(lines):
            if _FENCE.match(line):
                if inside:
                    yield from _shift(_commands("\n".join(block)), start)
                    block = []
                else:
                    start = number + 1
                inside = not inside
            elif inside:
                block.append(re.sub(r"^(\s*)\$ ", r"\1  ", line))  # a `$ ` prompt
        return
    yield from _commands(text)


def notebook_commands(text: str) -> Iterator[List[Token]]:
    """The commands of a Jupyter notebook's JSON: its Markdown cells' fenced code blocks (as a
    Markdown file's), its code cells' shell escapes (`!torchrun ...` lines, a `%%bash` or
    `%%sh` cell); rows are the notebook file's (nbformat writes a cell's source one line to a
    row), the cell's first row when its source cannot be found there. Nothing else of a code
    cell is a command: its Python is linted as the notebook."""
    import json

    try:
        nb = json.loads(text)
    except ValueError:
        return
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        return
    at = 0
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source")
        lines = source.splitlines(True) if isinstance(source, str) else [l for l in source or () if isinstance(l, str)]
        if not lines:
            continue
        first = 0
        for ascii_only in (False, True):
            spelled = json.dumps(lines[0], ensure_ascii=ascii_only)
            found = text.find(spelled, at)
            if found >= 0:
                at = found + len(spelled)
                first = text.count("\n", 0, found)
                break
        body = "".join(lines)
        kind = cell.get("cell_type")
        if kind == "markdown":
            yield from _shift(commands(body, markdown=True), first)
        elif kind == "code":
            if lines[0].startswith(("%%bash", "%%sh")):
                yield from _shift(_commands("\n" + "".join(lines[1:])), first)
                continue
            escaped = "".join(re.sub(r"^(\s*)!", r"\1 ", l) if l.lstrip().startswith("!") else "\n" for l in lines)
            yield from _shift(_commands(escaped), first)


def _shift(found: Iterator[List[Token]], rows: int) -> Iterator[List[Token]]:
    for tokens in found:
        yield [(t, r + rows, c) for t, r, c in tokens]


def _commands(text: str) -> Iterator[List[Token]]:
    tokens: List[Token] = []
    word: List[str] = []
    at: Optional[Tuple[int, int]] = None
    row, col = 1, 0
    quote: Optional[str] = None
    i, n = 0, len(text)

    def end_word() -> None:
        nonlocal word, at
        if word:
            assert at is not None
            tokens.append(("".join(word), at[0], at[1]))
        word, at = [], None

    while i < n:
        ch = text[i]
        col += 1
        if ch == "\n":
            row, col = row + 1, 0
        if quote is None and ch == "#" and not word:
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "\\" and i + 1 < n and (quote != "'"):
            nxt = text[i + 1]
            i += 2
            if nxt == "\n":
                row, col = row + 1, 0
                end_word()
                continue
            if at is None:
                at = (row, col)
            word.append(nxt)
            col += 1
            continue
        if ch in "\"'" and (quote is None or quote == ch):
            quote = None if quote else ch
            end_word()  # quotes are dropped, not grouped: `LAUNCH_CMD="accelerate launch ..."`
            i += 1
            continue
        if ch.isspace():
            end_word()
            if ch == "\n" and quote is None:
                if tokens:
                    yield tokens
                tokens = []
            i += 1
            continue
        if quote is None and ch in ";|&":
            end_word()
            if tokens:
                yield tokens
            tokens = []
            i += 1
            continue
        if at is None:
            at = (row, col)
        word.append(ch)
        i += 1
    end_word()
    if tokens:
        yield tokens


# --------------------------------------------------------------------------- commands


def parse_command(tokens: Sequence[Token], path: str, root: str) -> Optional[Launch]:
    """The launch a command's words spell, if it runs a `.py` file of the project."""
    words = [t[0] for t in tokens]
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if base == "accelerate" and i + 1 < len(words) and words[i + 1] == "launch":
            return _launch("accelerate", tokens, i, i + 2, _ACCELERATE_FLAGS, path, root)
        if base == "accelerate-launch":
            return _launch("accelerate", tokens, i, i + 1, _ACCELERATE_FLAGS, path, root)
        if word == "-m" and i + 1 < len(words) and words[i + 1] == "accelerate.commands.launch":
            return _launch("accelerate", tokens, i, i + 2, _ACCELERATE_FLAGS, path, root)
        if base == "torchrun" or (word == "-m" and i + 1 < len(words) and words[i + 1] in ("torch.distributed.run", "torch.distributed.launch")):
            return _launch("torchrun", tokens, i, i + (1 if base == "torchrun" else 2), _OTHER_FLAGS, path, root)
        if base == "deepspeed" and i + 1 < len(words) and not words[i + 1].startswith("."):
            return _launch("deepspeed", tokens, i, i + 1, _OTHER_FLAGS, path, root)
        if re.fullmatch(r"python(?:3(?:\.\d+)?)?", base) and i + 1 < len(words) and words[i + 1].endswith(".py"):
            return _launch("python", tokens, i, i + 1, frozenset(), path, root)
    return None


def _launch(kind: str, tokens: Sequence[Token], first: int, start: int, flags: frozenset, path: str, root: str) -> Optional[Launch]:
    options: List[Tuple[str, str, int, int]] = []
    i = start
    while i < len(tokens):
        text, row, col = tokens[i]
        if text.endswith(".py") and not text.startswith("-"):
            script = resolve_script(text, path, root)
            if script is None:
                return None
            return Launch(kind, path, tokens[first][1], tokens[first][2], script, tuple(options), tuple(tokens[i + 1:]))
        if not text.startswith("-"):
            return None  # a module (`-m pkg.train`), a program, or an expansion: not a project script
        name, eq, value = text.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in ("m", "module") and kind != "python":
            return None  # `accelerate launch -m pkg.train`: a module, not a file
        if eq or name in flags:
            quoted = quoted_value(tokens, i) if eq and not value else ""
            options.append((name, value or quoted, row, col))
            i += 2 if quoted else 1
            continue
        nxt = tokens[i + 1][0] if i + 1 < len(tokens) else ""
        if nxt.startswith("-") or nxt.endswith(".py") or not nxt:
            options.append((name, "", row, col))  # a flag this reader does not know as one
            i += 1
            continue
        options.append((name, nxt, row, col))
        i += 2
    return None


def resolve_script(literal: str, launcher: str, root: str) -> Optional[str]:
    """The project file a launcher's `.py` word names: tried against the launcher's folder, the
    folders above it up to the project root, and the root; exactly one distinct file, inside
    the (real) root, else None (an expansion such as `$DIR/train.py` is unknown)."""
    if not literal or "$" in literal or "`" in literal or "*" in literal or len(literal) > 300 or os.path.isabs(literal) or literal.startswith("~"):
        return None
    fence = os.path.realpath(root)
    prefix = fence.rstrip(os.sep) + os.sep
    folder = os.path.dirname(os.path.realpath(launcher))
    bases: List[str] = []
    while True:
        bases.append(folder)
        if folder == fence or not folder.startswith(prefix):
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if fence not in bases:
        bases.append(fence)
    found = set()
    for base in bases:
        candidate = os.path.realpath(os.path.join(base, literal))
        if candidate.startswith(prefix) and os.path.isfile(candidate):
            found.add(candidate)
    return found.pop() if len(found) == 1 else None


def resolve_config(literal: str, launcher: str, root: str) -> Optional[str]:
    """A config file (`.json`, `.yaml`, `.yml`) a launch command names, resolved as its script."""
    if not literal.lower().endswith((".json", ".yaml", ".yml")):
        return None
    return resolve_script(literal, launcher, root)


def launches_of(candidates: Sequence[str], root: str) -> Tuple[List[Launch], List[str]]:
    """The launches of the launcher files among `candidates` (the walk's, in order), and the
    files read (their bytes decide findings)."""
    out: List[Launch] = []
    read: List[str] = []
    fence = os.path.realpath(root).rstrip(os.sep) + os.sep
    for path in [p for p in candidates if launcher_file(p)][:MAX_LAUNCHERS]:
        real = os.path.realpath(path)
        if not real.startswith(fence) or not os.path.isfile(real):
            continue
        read.append(real)
        out.extend(read_launches(real, root))
    return out, read


def by_script(launches: Sequence[Launch]) -> Dict[str, List[Launch]]:
    out: Dict[str, List[Launch]] = {}
    for launch in launches:
        out.setdefault(launch.script, []).append(launch)
    return out
