"""Launch commands a project ships outside its Python code: the precision a launcher sets.

A training script's precision is often chosen where the script is started, not in its code:
`accelerate launch --mixed_precision bf16 --num_processes 1 open_instruct/finetune.py` in a
shell script, `accelerate launch --mixed_precision=fp16 src/train.py` in a README's command
block, `deepspeed train.py --deepspeed ds.json --bf16` for a Hugging Face script whose
`TrainingArguments` come from the command line (`HfArgumentParser`). This module reads those
commands (issue 22/23's launcher facts), over text only:

* which files: the shell scripts (`.sh`), Makefiles and Markdown files (fenced code blocks
  only) the run's walk met inside the project (`WalkRecord.configs`: not excluded, not
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
arguments, each with where it is written. Nothing here runs anything or imports torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ...core.safe_read import read_bytes

#: the largest launcher file read
MAX_BYTES = 256 * 1024
#: the most launcher files one project pass reads
MAX_LAUNCHERS = 256
#: the files that may hold launch commands (a Makefile by its name)
LAUNCHER_SUFFIXES = (".sh", ".md")
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

    def option(self, name: str) -> Optional[Tuple[str, int, int]]:
        """(value, row, column) of a launcher option (the last one given), None when absent."""
        found = None
        for n, value, row, col in self.options:
            if n == name:
                found = (value, row, col)
        return found

    @property
    def mixed_precision(self) -> Optional[str]:
        """accelerate's `--mixed_precision` ("no" | "fp16" | "bf16" | "fp8"), None when not given
        or not a literal."""
        found = self.option("mixed_precision") if self.kind == "accelerate" else None
        if found is None:
            return None
        value = found[0].lower()
        return value if value in ("no", "fp16", "bf16", "fp8") else None

    @property
    def distributed_plugin(self) -> Optional[bool]:
        """Whether the launch may put DeepSpeed, FSDP or Megatron-LM behind accelerate: True
        when an option says so, None when a config file (this one or accelerate's default) may
        decide, False when the command rules them out. accelerate's default config file
        (`accelerate config`, outside the project) is not known: only a command that also fixes
        the process layout (`--num_processes`, `--multi_gpu`, `--cpu`) is read as complete."""
        if self.kind != "accelerate":
            return None
        names = {n for n, _, _, _ in self.options}
        if names & {"use_deepspeed", "use_fsdp", "use_megatron_lm", "deepspeed_config_file", "zero_stage"}:
            return True
        if any(n.startswith(("fsdp_", "deepspeed_", "megatron_lm_")) for n in names):
            return True
        if "config_file" in names:
            return None
        return False if names & {"num_processes", "multi_gpu", "cpu", "num_machines"} else None

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
                found = (value, row, col)
            elif i + 1 < len(args) and not args[i + 1][0].startswith("-"):
                found = (args[i + 1][0], row, col)
            else:
                found = ("", row, col)
        return found


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
    for tokens in commands(text, markdown=path.lower().endswith(".md")):
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
            options.append((name, value, row, col))
            i += 1
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
