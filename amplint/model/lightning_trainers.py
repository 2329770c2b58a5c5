"""The precisions a project's Lightning `Trainer`s run: whether one of them scales the loss.

A LightningModule under manual optimization (`self.automatic_optimization = False`) calls
`self.manual_backward(loss)`, which under `precision="16-mixed"` (or `"16"`, `16`) is the
precision plugin's `scaler.scale(loss).backward()`: the gradients stay scaled until the
plugin's `optimizer.step()` unscales them, and only `self.clip_gradients(...)` unscales first.
The module's file rarely builds the Trainer: a script elsewhere in the project does
(`pl.Trainer(precision=args.precision)`). This module reads, with `ast`, every project file
that may build one and answers whether some Trainer's precision is fp16 mixed
(`fp16_trainer`), on the path the project configures:

* a literal `precision="16-mixed"` / `"16"` / `16`;
* `precision=args.precision` whose option the same file defines with argparse and a literal
  `default=` that is fp16 mixed (the default run);
* `precision=args.precision` of a namespace no argparse option of that file defines, where a
  `.ini` defaults file at the project root sets the key (`precision = "16-mixed"` in
  `defaults.ini`: prefigure's `get_all_args()` and its kin read the run's defaults from there).

Precision first: a Trainer with `plugins=`, no explicit `precision=`, `accelerator="cpu"` or a DeepSpeed /
FSDP strategy spelled as a literal or a strategy class (their own precision plugins) does not
count; nor does a precision decided any other way (unknown: the rule stays silent). bf16 and
32 never count. Read when conditions are resolved (a condition, `facts.LIGHTNING_FP16`).
"""
from __future__ import annotations

import ast
import os
import re
from typing import Dict, List, Optional, Tuple

from .precision_names import lightning_precision

#: a text that may build a Lightning Trainer with a precision
_MAY_BUILD = re.compile(r"Trainer\s*\(")
#: Lightning's Trainer classes, by qualified name
_TRAINERS = frozenset((
    "lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer",
    "lightning.pytorch.trainer.Trainer", "pytorch_lightning.trainer.Trainer",
    "lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer",
))
#: the precisions whose plugin scales the loss with a GradScaler
_FP16_MIXED = "16-mixed"
_cache: Dict[Tuple[str, int], Optional[str]] = {}


def fp16_trainer(filename: Optional[str], root: Optional[str] = None) -> bool:
    """Some Lightning Trainer of the project `filename` belongs to runs fp16 mixed precision
    on the path the project configures (module docstring)."""
    return fp16_trainer_site(filename, root) is not None


def fp16_trainer_site(filename: Optional[str], root: Optional[str] = None) -> Optional[str]:
    """`train.py:148` for the first such Trainer (the listing's order), else None."""
    from .texts import files_stamp, project_files, project_root, read_text

    if not filename:
        return None
    base = project_root(filename, root)
    if base is None:
        return None
    listing = sorted(project_files(base, (".py", ".ini")))
    key = (base, files_stamp(listing))
    if key in _cache:
        return _cache[key]
    if len(_cache) > 32:
        _cache.clear()
    defaults: Optional[Dict[str, str]] = None
    found: Optional[str] = None
    for path in listing:
        if not path.endswith(".py"):
            continue
        text = read_text(path)
        if not text or "lightning" not in text or not _MAY_BUILD.search(text):
            continue
        for row, precision, option in _trainer_precisions(text):
            value = precision
            if value is None and option is not None:
                if defaults is None:
                    defaults = _ini_defaults(base, listing)
                value = defaults.get(option)
            if value is not None and lightning_precision(value) == _FP16_MIXED:
                found = f"{os.path.relpath(path, base).replace(os.sep, '/')}:{row}"
                break
        if found:
            break
    _cache[key] = found
    return found


def _trainer_precisions(text: str) -> List[Tuple[int, Optional[str], Optional[str]]]:
    """(row, precision, ini option) of each Trainer the file builds: the precision when the file
    fixes it (a literal, an argparse default), else the option name a defaults file may set
    (`args.precision` of a namespace the file's argparse does not define), else neither."""
    from ..core.pyast import parse
    from .project.astutil import dotted
    from .project.summary import import_reader

    tree = parse(text)
    if tree is None:
        return []
    reader = import_reader(text, tree)
    options = _argparse_defaults(tree)
    out: List[Tuple[int, Optional[str], Optional[str]]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or reader.qualname(dotted(node.func)) not in _TRAINERS:
            continue
        if node.args:
            continue  # positional arguments: not the spelling Lightning documents
        # `**kwargs` next to an explicit `precision=` cannot pass another precision (a repeated
        # keyword raises), so the precision is read; what else they pass is not known
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "plugins" in keywords or not _plain_strategy(keywords.get("strategy")):
            continue
        accelerator = keywords.get("accelerator")
        if isinstance(accelerator, ast.Constant) and accelerator.value == "cpu":
            continue
        value = keywords.get("precision")
        if value is None:
            continue  # Lightning's default: "32-true"
        if isinstance(value, ast.Constant) and isinstance(value.value, (str, int)) and not isinstance(value.value, bool):
            out.append((node.lineno, str(value.value), None))
            continue
        spelled = dotted(value)
        if not spelled or spelled.count(".") != 1:
            continue
        option = spelled.split(".", 1)[1]
        if option in options:
            default = options[option]
            if default is not None:
                out.append((node.lineno, default, None))
            continue  # an option without a literal default: decided at run time
        out.append((node.lineno, None, option))
    return out


def _plain_strategy(node: Optional[ast.AST]) -> bool:
    """No strategy, or one that keeps Lightning's plain MixedPrecision plugin: not a DeepSpeed
    or FSDP literal or strategy class (a name may be either: kept)."""
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return not (isinstance(node.value, str) and re.search(r"deepspeed|fsdp", node.value, re.I))
    if isinstance(node, ast.Call):
        from .project.astutil import dotted

        name = (dotted(node.func) or "").rsplit(".", 1)[-1]
        return not re.search(r"DeepSpeed|FSDP", name)
    return True


def _argparse_defaults(tree: ast.Module) -> Dict[str, Optional[str]]:
    """dest -> the literal string/integer default of each `add_argument` of the file (None: no
    literal default)."""
    out: Dict[str, Optional[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = keywords.get("dest")
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            name = dest.value
        else:
            long = next((f for f in flags if f.startswith("--")), None) or next(iter(flags), None)
            if long is None:
                continue
            name = long.lstrip("-").replace("-", "_")
        default = keywords.get("default")
        value = default.value if isinstance(default, ast.Constant) and isinstance(default.value, (str, int)) and not isinstance(default.value, bool) else None
        out[name] = None if name in out and out[name] != value else (str(value) if value is not None else None)
    return out


_INI_LINE = re.compile(r"""^\s*([A-Za-z_][\w-]*)\s*=\s*["']?([^"'\s#;]+)["']?\s*(?:[#;].*)?$""")


def _ini_defaults(base: str, listing: List[str]) -> Dict[str, str]:
    """key -> value of the `.ini` files at the project root (a run's defaults file); a key two
    of them set differently is not known."""
    from .texts import read_text

    out: Dict[str, str] = {}
    clashes = set()
    for path in listing:
        if not path.endswith(".ini") or os.path.dirname(path) != base:
            continue
        for line in (read_text(path) or "").splitlines():
            m = _INI_LINE.match(line)
            if not m:
                continue
            key, value = m.group(1).replace("-", "_"), m.group(2)
            if key in out and out[key] != value:
                clashes.add(key)
            out[key] = value
    for key in clashes:
        del out[key]
    return out


def own_trainer_precision(source: str) -> Optional[bool]:
    """Whether the Trainers the file itself builds scale the loss: True when one runs fp16 mixed
    (a literal, an argparse default), False when every one the file fixes runs another precision,
    None when the file builds none it fixes (the project decides: `fp16_trainer`)."""
    if "Trainer" not in source:
        return None
    fixed = [lightning_precision(p) for _, p, _ in _trainer_precisions(source) if p is not None]
    if not fixed:
        return None
    return _FP16_MIXED in fixed
