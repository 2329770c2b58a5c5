"""What a file's text says before it is parsed: its project roles and its imports.

The project model parses (with `ast`) only the files a question leads to. To
choose them without parsing the project, every file gets a text index, cheap
enough to compute for each file of a large repository and cached with the
other per-file results:

* roles: "b" -- the file calls a BCE loss, which only its callers' autocast
  (maybe in other files) makes wrong; "o" -- it builds a torch optimizer,
  whose module may have been made fp16 by what the file imports; "a" -- it
  may set precision (autocast, a framework's precision flag, a GradScaler);
  "h" -- it may hold an autocast in a `partial` and enter it later (a `partial(`
  whose first argument names autocast, or a name the file binds to it:
  `ac = torch.autocast`, `autocast as ac`), or enter one a helper makes (`autocast =
  get_autocast(args.precision)`, then `with autocast():`);
  "g" -- it builds a GradScaler (another file may call that per epoch, or
  save the checkpoint without it); "f" -- it sets a framework's mixed
  precision (Lightning `Trainer(precision=...)`, `Accelerator(mixed_precision=...)`,
  `TrainingArguments(fp16=True)`), which runs the hooks of the model it is given;
  "w" -- it casts a module to a dtype held in a name next to an optimizer's parameters
  (`unet.to(weight_dtype)`), a dtype another file may pick (AMP201);
  "e" -- it registers something to a registry (a decorator spelled with `register`:
  `@MODELS.register_module()`, `@register_model("unet")`, or such a call at column 0:
  `ARCH_REGISTRY.register(UNet)`), which a call elsewhere may build by name;
  "d" -- it may wrap a model for distributed training or set precision outside autocast
  (FSDP, `fully_shard`, DeepSpeed, DDP comm hooks, Fabric: `scale.ANCHORS`); "c" -- it
  clips gradients or runs a backward (what the wrapper rules ask about such a model);
  `scale_universe` adds them, and the importers joining the two, only where a "d" file is;
  "q" -- it constructs a class named for a torch optimizer but not one (`FP16FusedAdam(model.parameters())`),
  maybe a project `torch.optim.Optimizer` subclass (AMP201 reads its methods, `cast_training.project_optimizer`);
  "l" -- a top-level function of it imports a module by name and takes an attribute of it
  (`getattr(importlib.import_module(...), name)`: a class looked up by name; the index's "l"
  lists those functions, whose importers the dispatch view reads with the registering files);
  "k" -- it registers a per-parameter gradient hook (`register_post_accumulate_grad_hook`):
  code that runs once per parameter inside the backward (`accelerate_hooks.py`);
  "p" -- it is a config module setting a precision at column 0 (`mixed_precision = "fp16"`),
  which a framework built from a config loaded at run time reads (put in the universe when a
  framework-precision file "f" is there);
  "n" -- it builds an accelerate `Accelerator(` without a `mixed_precision` in the call, whose
  precision a launch command the project ships may set (`accelerate launch --mixed_precision
  fp16`, a `--config_file` YAML: `launchers.py`), which the file's code never says;
* imports: (level, module, names) for every import statement, read by a
  regular expression (strings holding `import` lines can only add files to
  look at, never hide one), packed into one string (`imports_of` unpacks it):
  every file's index is in the cache store a warm run loads, and one string
  per file parses several times faster than nested lists.

`universe` then takes the BCE files, the files that import them (transitively,
a bounded number of levels), the precision-setting files those import, and
the optimizer files, the GradScaler files with their direct importers, and
files holding an autocast in a `partial` or setting a framework's precision;
what these import is loaded when a name leads there (`graph.Project`, whose
`reached` follows calls out of autocast regions into the modules they lead to).
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..precision_names import CONFIG_KEYS
from .scale import ANCHORS

# Every pattern starts with a literal, which `re` finds at memchr speed; a word boundary
# before it is checked on the few matches (`_word_start`): a leading `\b` or an alternation
# makes `re` try every position (40-70x slower on the big model files of a repository).
_BCE = re.compile(r"binary_cross_entropy\s*\(|BCELoss\b")
#: a torch optimizer class called (as a word): `Adam(`, `torch.optim.AdamW (`; each name holds one of
#: these literals, searched first
_OPTIMIZERS = ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta", "LBFGS", "SparseAdam", "ASGD", "Rprop")
_OPTIMIZER_CALLS = tuple(
    (literal, re.compile("|".join(re.escape(n) + r"\s*\(" for n in _OPTIMIZERS if literal in n)))
    for literal in ("Adam", "SGD", "RMSprop", "Adagrad", "Adadelta", "LBFGS", "Rprop")
)
#: a project class named for a torch optimizer (`FP16FusedAdam(`), given parameters: it may derive
#: from `torch.optim.Optimizer` (`cast_training.project_optimizer` decides)
_PROJECT_OPTIMIZER_CALL = re.compile(r"\b[A-Z]\w*(?:" + "|".join(_OPTIMIZERS) + r")\(\s*[\w.]*parameters\(")
#: `unet.to(weight_dtype)`, `m.to(device, dtype=d)`: a module cast to a dtype held in a name
#: (role "w": the dtype may come from a project helper in another file, AMP201)
_CHOSEN_CAST = re.compile(r"\.to\(\s*(?:[\w.]+\s*,\s*)?(?:dtype\s*=\s*)?[A-Za-z_]\w*dtype\w*\s*\)")
#: code that sets precision, not prose about it: an autocast, a scaler, a framework's setting
#: (literal, pattern, whether the match must start a word)
_SETS_PRECISION = (
    ("autocast", re.compile(r"autocast\s*\("), False),
    ("GradScaler", re.compile(r"GradScaler\s*\("), False),
    ("precision", re.compile(r"precision\s*="), False),
    ("fp16", re.compile(r"fp16\s*=\s*True"), True),
    ("bf16", re.compile(r"bf16\s*=\s*True"), True),
    ("partial", re.compile(r"partial\s*\(\s*[\w.]*autocast\b"), False),  # an autocast held for later
)
#: a framework's mixed-precision setting in its constructor call (literal first, then the call)
_FRAMEWORKS = (
    ("Trainer", re.compile(r"Trainer\s*\([^)]*\bprecision\s*=")),
    ("Accelerator", re.compile(r"Accelerator\s*\([^)]*\bmixed_precision\s*=")),
    ("TrainingArguments", re.compile(r"TrainingArguments\s*\([^)]*\b(?:fp16|bf16)\s*=\s*True")),
)
#: an `Accelerator(` call (a word): one without `mixed_precision=` takes the launcher's precision (role "n")
_BARE_ACCELERATOR = re.compile(r"Accelerator\(")
#: a config module's precision setting at column 0 (`mixed_precision = "fp16"` in an mmcv/mmengine
#: style Python config), which a run-time `Config.fromfile(...)` hands to `Accelerator(mixed_precision=
#: config.mixed_precision)` (role "p", `summary.config_settings`)
_CONFIG_SETTING = re.compile(r"^(?:" + "|".join(CONFIG_KEYS) + r")[ \t]*=[ \t]*['\"]", re.M)
#: `partial(X`
_PARTIAL = re.compile(r"partial\s*\(\s*([\w.]+)")
#: what may stand before `register` on a registering line: a decorator (`@MODELS.`, `@`) or,
#: at column 0, a call's dotted start (`ARCH_REGISTRY.`, ``); and after it, at column 0: `_module(`
_DECORATOR_HEAD = re.compile(r"[ \t]*@[ \t]*[\w.]*")
_CALL_HEAD = re.compile(r"[\w.]*")
_CALL_TAIL = re.compile(r"\w*[ \t]*\(")
#: the standard library's top-level modules: no project holds one, and leaving their imports
#: out keeps the cached index small
_EXTERNAL = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
#: an import statement (`from` and `import` forms), matched at the start of a line holding "import"
_IMPORTS = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]+))", re.M
)

#: `import_module(`, a top-level `def NAME`, and the next top-level statement (where its body ends)
_IMPORT_MODULE = re.compile(r"import_module\s*\(")
_DEF_NAME = re.compile(r"def[ \t]+(\w+)")
_TOP_LEVEL = re.compile(r"^[^\s#)\]}]", re.M)

#: how many importer levels above a seed file the universe reaches, and its size
UP_LEVELS = 6
MAX_FILES = 300
#: how many registering files the dispatch view (`dispatch.py`) reads at most
MAX_REGISTERING = 500

Import = Tuple[int, str, Tuple[str, ...]]


def text_index(source: str) -> Dict[str, str]:
    """{"r": roles, "i": imports (packed)} of one file's text (JSON-able)."""
    # substring tests first (C speed), each word searched once per text (`gating.holds`: the
    # gates asked the same file about many of them); the regexes run only on the few files that pass
    from ...core.gating import words_of

    found = words_of(source)

    def has(word: str) -> bool:
        hit = found.get(word)
        if hit is None:
            hit = found[word] = word in source
        return hit

    roles = ""
    if (has("binary_cross_entropy") or has("BCELoss")) and _BCE.search(source):
        roles += "b"
    if has("optim") and has("parameters(") and any(
        has(literal) and _found(pattern, source, word=True) for literal, pattern in _OPTIMIZER_CALLS
    ):
        roles += "o"
    if any(has(literal) and _found(pattern, source, word) for literal, pattern, word in _SETS_PRECISION):
        roles += "a"
        if has("autocast") and ((has("partial") and _holds_autocast(source)) or _enters_made_autocast(source)):
            roles += "h"  # an autocast held in a `partial` or made by a helper, maybe entered later
        if has("GradScaler("):
            roles += "g"
        if any(has(literal) and _found(pattern, source, word=True) for literal, pattern in _FRAMEWORKS):
            roles += "f"  # a framework runs the project's hooks under this precision
    if has("optim") and has("param") and has(".to(") and has("dtype") and _CHOSEN_CAST.search(source):
        roles += "w"
    if has("register") and _registers(source):
        roles += "e"
    if any(has(word) for word in ANCHORS):
        roles += "d"
    if has("clip_grad") or has(".backward("):
        roles += "c"
    if has("post_accumulate_grad_hook"):
        roles += "k"
    if has("Accelerator(") and "f" not in roles and _found(_BARE_ACCELERATOR, source, word=True):
        roles += "n"
    if any(has(key) for key in CONFIG_KEYS) and _CONFIG_SETTING.search(source):
        roles += "p"
    lookups = _lookup_functions(source) if has("import_module") else []
    if lookups:
        roles += "l"
    if "o" not in roles and has("parameters(") and any(has(literal) for literal, _ in _OPTIMIZER_CALLS) and _PROJECT_OPTIMIZER_CALL.search(source):
        roles += "q"  # `FP16FusedAdam(model.parameters(), ...)`: maybe a project optimizer class (AMP201 across files)
    imports = import_list(source)
    out = {"r": roles, "i": "\n".join(f"{level}\t{module}\t{' '.join(names)}" for level, module, names in imports)}  # type: ignore[str-bytes-safe]
    if lookups:
        out["l"] = " ".join(lookups)
    return out


def _lookup_functions(source: str) -> List[str]:
    """The top-level functions that import a module by name and take an attribute of it
    (`getattr(importlib.import_module(...), name)`, role "l"): a class looked up by name, which
    their callers build (`get_model(config["model"])(config)`); in source order."""
    out: List[str] = []
    for m in _IMPORT_MODULE.finditer(source):
        start = source.rfind("\ndef ", 0, m.start())
        if start == -1 and source.startswith("def "):
            start = -1
        elif start == -1:
            continue
        head = _DEF_NAME.match(source, start + 1)
        if head is None:
            continue
        end = _TOP_LEVEL.search(source, head.end())
        body = source[head.end(): end.start() if end is not None else len(source)]
        if m.start() < head.end() + len(body) and "getattr(" in body and head.group(1) not in out:
            out.append(head.group(1))
    return out


def import_list(source: str, stdlib: bool = False) -> List[List[object]]:
    """(level, module, names) of every import statement of `source` (not those of the standard
    library's modules unless `stdlib`: a project module of such a name shadows it only next to a
    script): `from ..a.b import c, d` is (2, "a.b", ["c", "d"]), `import a.b` is (0, "a.b", [])."""
    external = frozenset() if stdlib else _EXTERNAL
    imports: List[List[object]] = []
    if "import" in source:
        for m in _import_statements(source):
            if m.group(4) is None:
                if not m.group(1) and m.group(2).split(".")[0] in external:
                    continue
                names = [n.strip().split(" as ")[0].strip() for n in m.group(3).strip("()").replace("\\\n", " ").split(",")]
                imports.append([len(m.group(1)), m.group(2), [n for n in names if n.isidentifier()]])
                continue
            for part in m.group(4).split(","):
                name = part.strip().split(" as ")[0].strip()
                if name and all(p.isidentifier() for p in name.split(".")) and name.split(".")[0] not in external:
                    imports.append([0, name, []])
    return imports


def imports_of(index: Dict[str, str]) -> List[List[object]]:
    """The (level, module, names) of an index's import statements."""
    out: List[List[object]] = []
    for line in index["i"].split("\n") if index["i"] else ():
        level, module, names = line.split("\t")
        out.append([int(level), module, names.split(" ") if names else []])
    return out


def _word_start(source: str, at: int) -> bool:
    """Whether a word starts at `at` (what `\\b` before a word character asks)."""
    return at == 0 or not (source[at - 1].isalnum() or source[at - 1] == "_")


def _found(pattern: "re.Pattern[str]", source: str, word: bool) -> bool:
    if not word:
        return pattern.search(source) is not None
    return any(_word_start(source, m.start()) for m in pattern.finditer(source))


def _import_statements(source: str) -> Iterable["re.Match[str]"]:
    """What `_IMPORTS.finditer(source)` finds, trying only the lines that hold "import" (a
    match starts at a line start and holds "import" on its first line); a line inside the
    previous match (a parenthesised name list) is skipped, as `finditer` does."""
    end = pos = 0
    while True:
        at = source.find("import", pos)
        if at == -1:
            return
        start = source.rfind("\n", 0, at) + 1
        if start >= end:
            m = _IMPORTS.match(source, start)
            if m is not None:
                end = m.end()
                yield m
        newline = source.find("\n", at)
        if newline == -1:
            return
        pos = max(newline + 1, end)


def _registers(source: str) -> bool:
    """A registration: a decorator spelled with `register` (`@MODELS.register_module()`,
    `@register_model`), or a call of one at the start of a line (`ARCH_REGISTRY.register(Net)`,
    `register_loss(name=...)(nn.MSELoss)`); `self.register_buffer(...)` is neither. Only the
    lines holding "register" are read."""
    at = source.find("register")
    while at != -1:
        start = source.rfind("\n", 0, at) + 1
        head = source[start:at]
        if _DECORATOR_HEAD.fullmatch(head) or (_CALL_HEAD.fullmatch(head) and _CALL_TAIL.match(source, at + 8)):
            return True
        at = source.find("register", at + 8)
    return False


def _holds_autocast(source: str) -> bool:
    """A `partial(...)` of an autocast: its first argument is spelled with `autocast`
    (`torch.autocast`, `amp.autocast`) or is a name the file binds to one. Most files holding
    both words use `partial` for something else (a big model file with an autocast region)."""
    targets = {m.group(1) for m in _PARTIAL.finditer(source)}
    if any("autocast" in t for t in targets):
        return True
    return any(_autocast_alias(source, name) for name in {t.rsplit(".", 1)[-1] for t in targets})


#: a name spelled with autocast bound to a call's result (`autocast = get_autocast(args.precision)`)
_MADE_AUTOCAST = re.compile(r"^[ \t]*(\w*autocast\w*)[ \t]*=[ \t]*[\w.]+\(", re.MULTILINE)


def _enters_made_autocast(source: str) -> bool:
    """Whether the file enters, by calling it in a `with` line, a name spelled with autocast that
    it binds to a call's result (`autocast = get_autocast(args.precision)`, then `with autocast():`):
    a helper of the project may return an autocast class, which the project model reads."""
    for name in {m.group(1) for m in _MADE_AUTOCAST.finditer(source)}:
        if re.search(r"^[ \t]*(?:async[ \t]+)?with\b[^\n]*\b" + re.escape(name) + r"[ \t]*\(", source, re.MULTILINE):
            return True
    return False


def _autocast_alias(source: str, name: str) -> bool:
    """Whether the file binds `name` to an autocast: `autocast as name`, `name = torch.autocast`."""
    if not name:
        return False
    for m in re.finditer(r"autocast\s+as\s+" + re.escape(name) + r"\b", source):
        if _word_start(source, m.start()):
            return True
    for m in re.finditer(re.escape(name) + r"\s*=\s*([\w.]*)", source):
        if _word_start(source, m.start()) and "autocast" in m.group(1).split("."):
            return True
    return False


def module_names(path: str, root: Optional[str], files: Optional[Set[str]] = None, tops: Optional[Dict[str, Optional[str]]] = None) -> List[str]:
    """The dotted names a file may be imported as: relative to the project root, to
    `root/src` (a `src/` layout), and from its topmost package folder (the folders
    above it holding an `__init__.py` among `files`), so a package linted on its
    own, with no project root, still resolves its absolute imports."""
    out: List[str] = []
    if root is not None:
        rel = _below(path, root)
        if rel is not None:
            parts = _parts(rel)
            if parts:
                out.append(".".join(parts))
                if parts[0] == "src" and len(parts) > 1:
                    out.append(".".join(parts[1:]))
    if files is not None:
        top = _package_top(os.path.dirname(path), files, tops if tops is not None else {})
        if top is not None:
            parts = _parts(_below(path, os.path.dirname(top)) or "")
            if parts and ".".join(parts) not in out:
                out.append(".".join(parts))
    return out


def _below(path: str, folder: str) -> Optional[str]:
    """`path` relative to `folder` when it lies below it (both absolute and normalised)."""
    prefix = folder.rstrip(os.sep) + os.sep
    return path[len(prefix):] if path.startswith(prefix) else None


def _package_top(folder: str, files: Set[str], tops: Dict[str, Optional[str]]) -> Optional[str]:
    """The topmost folder of the package chain holding `folder` (None: not in a package)."""
    if folder in tops:
        return tops[folder]
    top: Optional[str] = None
    if os.path.join(folder, "__init__.py") in files:
        parent = os.path.dirname(folder)
        top = (_package_top(parent, files, tops) if parent != folder else None) or folder
    tops[folder] = top
    return top


def _shared(folder: str, other: str) -> int:
    """How many leading folders the two paths share."""
    n = 0
    for x, y in zip(folder.rstrip(os.sep).split(os.sep), other.rstrip(os.sep).split(os.sep)):
        if x != y:
            break
        n += 1
    return n


def _anchor(path: str, name: str) -> str:
    """The folder the dotted `name` of the file `path` is found below (its `sys.path` entry)."""
    module = path[: -len(".py")] if path.endswith(".py") else path
    if os.path.basename(module) == "__init__":
        module = os.path.dirname(module)
    for _ in name.split("."):
        module = os.path.dirname(module)
    return module


def _parts(rel: str) -> List[str]:
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else rel.split(os.sep)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return parts


class ModuleIndex:
    """Module names -> project files, for imports spelled in a given file."""

    #: the last index built, by (root, files): the universe and the project model of one run
    #: ask for the same one (building it names every file of the project)
    _last: Optional[Tuple[Tuple[Optional[str], Tuple[str, ...]], "ModuleIndex"]] = None

    @classmethod
    def of(cls, files: Iterable[str], root: Optional[str]) -> "ModuleIndex":
        """The index of `files` under `root`, built once for the same arguments in a row."""
        key = (root, tuple(files))
        last = cls._last
        if last is not None and last[0] == key:
            return last[1]
        made = cls(key[1], root)
        cls._last = (key, made)
        return made

    def __init__(
        self, files: Iterable[str], root: Optional[str], nearest: bool = False,
        subproject: Optional[Callable[[str], Optional[str]]] = None,
    ) -> None:
        self.files: Set[str] = set(files)
        self.by_name: Dict[str, str] = {}
        #: `nearest`: a top-level name several folders hold a package or module of (the same
        #: package copied into subprojects of a monorepo, `a/fairseq/` and `b/fairseq/`) -> those
        #: folders (its `sys.path` entries); `subproject(path)`, the folder of the project holding a
        #: file (its own packaging below `root`), is one more entry for its files, found only by its
        #: own files (`a/tests/test_x.py`'s `import train` is `a/train.py`)
        self._anchors: Dict[str, List[str]] = {}
        self._resolved: Dict[Tuple[str, int, str], Optional[str]] = {}
        self._folders: Dict[str, str] = {}  # importer -> its folder (asked for every import it has)
        tops: Dict[str, Optional[str]] = {}
        for path in sorted(self.files):
            for name in module_names(path, root, self.files, tops):
                self.by_name.setdefault(name, path)
                if nearest:
                    self._anchor_name(name, _anchor(path, name))
            folder = subproject(path) if subproject is not None and root is not None else None
            if folder is not None and folder != root and _below(path, root) is not None:
                parts = _parts(_below(path, folder) or "")
                if parts:
                    self._anchor_name(".".join(parts), folder)

    def _anchor_name(self, name: str, anchor: str) -> None:
        anchors = self._anchors.setdefault(name.split(".", 1)[0], [])
        if anchor not in anchors:
            anchors.append(anchor)

    def resolve(self, importer: str, level: int, module: str) -> Optional[str]:
        folder = self._folders.get(importer)
        if folder is None:
            folder = self._folders[importer] = os.path.dirname(importer)
        key = (folder, level, module)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(importer, level, module)
        return self._resolved[key]

    def _resolve(self, importer: str, level: int, module: str) -> Optional[str]:
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            target = os.path.join(base, module.replace(".", os.sep)) if module else base
            return self._file_at(target)
        near = self._file_at(os.path.join(os.path.dirname(importer), module.replace(".", os.sep)))
        if near is not None:
            return near
        anchors = self._anchors.get(module.split(".", 1)[0])
        if anchors:
            # several copies of the package: a program run from a folder holding one (`b/`, whose
            # `b/fairseq` is first on its path) imports that one's modules, and no other copy's
            # (a module that copy lacks is an alias it sets at run time, or missing)
            folder = os.path.dirname(importer) + os.sep
            holding = [a for a in anchors if folder.startswith(a.rstrip(os.sep) + os.sep)]
            if holding:
                for anchor in sorted(holding, key=len, reverse=True):
                    found = self._file_at(os.path.join(anchor, *module.split(".")))
                    if found is not None:
                        return found
                return None
            if len(anchors) > 1:
                # an importer outside every copy (a script using an installed fairseq): the copy
                # nearest it (`kosmos-2/unilm/` finds `kosmos-2/fairseq/`); copies equally near
                # leave the one installed unknown: none is picked by its name's order, nor by
                # which of them holds the module
                best = max(_shared(a, folder) for a in anchors)
                nearest = [a for a in anchors if _shared(a, folder) == best]
                return self._file_at(os.path.join(nearest[0], *module.split("."))) if len(nearest) == 1 else None
        return self.by_name.get(module)

    def _file_at(self, base: str) -> Optional[str]:
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if candidate in self.files:
                return candidate
        return None

    def imported_files(self, importer: str, imports: Sequence[Sequence[object]]) -> List[str]:
        """The project files an import list names (modules, and submodules imported by name)."""
        out: List[str] = []
        for level, module, names in imports:
            assert isinstance(level, int) and isinstance(module, str)
            target = self.resolve(importer, level, module)
            if target is not None:
                out.append(target)
            for name in names or ():  # `from pkg import losses` may name a submodule
                sub = self.resolve(importer, level, f"{module}.{name}" if module else str(name))
                if sub is not None:
                    out.append(sub)
        return out


def universe(files: Sequence[str], root: Optional[str], index: Callable[[str], Dict[str, str]]) -> List[str]:
    """The files the project model starts from: the BCE files, their importers up to
    `UP_LEVELS` levels, the precision-setting files any of those import, the
    optimizer files, files holding an autocast in a `partial` or setting a
    framework's mixed precision, and the files building a GradScaler with their
    direct importers. Empty when none is there.
    Sorted; the same for any subset of the project that asks."""
    seeds = [f for f in files if "b" in str(index(f)["r"])]
    optimizers = [f for f in files if any(r in str(index(f)["r"]) for r in "ohgfwknq")]
    scale = scale_universe(files, root, index)
    if not seeds and not optimizers and not scale:
        return []
    chosen: Set[str] = set(seeds) | set(optimizers) | set(scale)
    if any("f" in str(index(f)["r"]) for f in optimizers):
        # the config modules whose settings a framework's precision may read (`config.mixed_precision`)
        chosen.update(sorted(f for f in files if "p" in str(index(f)["r"]))[:MAX_FILES // 4])
    scalers = [f for f in optimizers if "g" in str(index(f)["r"])]
    if seeds or scalers:
        modules = ModuleIndex.of(files, root)
        entries = _Entries(index)
        for f in sorted(_importers(scalers, files, entries, modules)) if scalers else ():
            if len(chosen) < MAX_FILES:
                chosen.add(f)  # who calls a function that builds a GradScaler
    if seeds:
        reached: Set[str] = set(seeds)
        level = list(seeds)
        for _ in range(UP_LEVELS):
            following = sorted({i for i in _importers(level, files, entries, modules) if i not in reached})
            if not following or len(chosen | set(following)) > MAX_FILES:
                break
            reached.update(following)
            chosen.update(following)
            level = following
        for f in sorted(chosen):
            for target in modules.imported_files(f, entries[f]):  # type: ignore[arg-type]
                if target not in chosen and "a" in str(index(target)["r"]) and len(chosen) < MAX_FILES:
                    chosen.add(target)
    return sorted(chosen)


def registering(files: Sequence[str], index: Callable[[str], Dict[str, str]]) -> List[str]:
    """The files that register something to a registry (role "e"), when the project calls a
    BCE loss somewhere (role "b"): what a call through a registry may reach (`dispatch.py`
    reads them only for that). Empty otherwise; sorted; at most `MAX_REGISTERING`."""
    if not any("b" in str(index(f)["r"]) for f in files):
        return []
    chosen = sorted(f for f in files if "e" in str(index(f)["r"]))[:MAX_REGISTERING]
    # a function looking a class up by name (role "l"), and the files importing it by name: its
    # callers build what it gives (`get_model(config["model"])(config)`), which none of them registers
    lookups = {f: str(index(f).get("l", "")).split() for f in files if "l" in str(index(f)["r"])}
    names = {n for found in lookups.values() for n in found}
    if names:
        added = set(lookups)
        for f in files:
            if f not in added and any(names.intersection(imported[2]) for imported in imports_of(index(f))):  # type: ignore[arg-type]
                added.add(f)
        chosen = sorted(set(chosen) | set(sorted(added)[: MAX_REGISTERING // 2]))
    return chosen
def scale_universe(files: Sequence[str], root: Optional[str], index: Callable[[str], Dict[str, str]]) -> List[str]:
    """The files the wrapper rules (issue 23) start from, only in a project where some file may
    wrap a model for distributed training (role "d"): those files, the files that clip gradients
    or run a backward (role "c"), and the glue between them: a direct importer of a "d" file
    that also imports a "c" file holding no distributed API itself (`model = wrap(...)`, then
    `Trainer(model, ...)`); at most `MAX_FILES`. Empty, at the cost of one role test per file,
    for a project without these APIs."""
    anchors = [f for f in files if "d" in str(index(f)["r"])]
    if not anchors:
        return []
    clips = {f for f in files if "c" in str(index(f)["r"])}
    chosen: Set[str] = set(anchors)
    trainers = clips - chosen  # steps that get their model from elsewhere
    for f in sorted(clips):
        if len(chosen) < MAX_FILES:
            chosen.add(f)
    modules = ModuleIndex.of(files, root)
    entries = _Entries(index)
    trainer_names = _module_names_of(trainers)
    for f in sorted(_importers(anchors, files, entries, modules)):
        if len(chosen) >= MAX_FILES:
            break
        if f in chosen:
            continue
        if trainers.intersection(modules.imported_files(f, _naming(entries[f], trainer_names))):  # type: ignore[arg-type]
            chosen.add(f)
    return sorted(chosen)


def scale_lazy(chosen: Sequence[str], files: Sequence[str], root: Optional[str], index: Callable[[str], Dict[str, str]]) -> Set[str]:
    """The files of the universe that only the wrapper rules asked for and whose project summary
    can wait until a name in them is resolved: a distributed API ("d") and no other role, no
    clip or backward, and no import of a file that clips or runs a backward (so no call from
    them hands a model to a training step elsewhere). Their scale summaries are read; their
    project summaries are built only on demand."""
    clips = {f for f in files if "c" in str(index(f)["r"])}
    modules = ModuleIndex.of(files, root)
    out: Set[str] = set()
    for f in chosen:
        roles = str(index(f)["r"])
        if roles.replace("d", "") or f in clips:
            continue
        if clips.intersection(modules.imported_files(f, imports_of(index(f)))):  # type: ignore[arg-type]
            continue
        out.add(f)
    return out


class _Entries(dict):
    """file -> its import statements (`imports_of` its index), unpacked on first use: most
    files' packed imports never pass `_importers`' substring test."""

    def __init__(self, index: Callable[[str], Dict[str, str]]) -> None:
        super().__init__()
        self.index = index

    def __missing__(self, path: str) -> List[List[object]]:
        found = self[path] = imports_of(self.index(path))
        return found


def _module_names_of(targets: Iterable[str]) -> Set[str]:
    """The last dotted part of the module each target file is imported as (its name, or its
    package's for an `__init__.py`): an import can resolve to the file only if it spells it."""
    names: Set[str] = set()
    for t in targets:
        base = os.path.basename(t)
        names.add(os.path.basename(os.path.dirname(t)) if base == "__init__.py" else base[:-3])
    return names


def _naming(imports: Sequence[Sequence[Any]], names: Set[str]) -> List[Sequence[Any]]:
    """The import statements that may resolve to a file whose module ends with one of `names`:
    the module's last part or an imported name is one, or a bare relative import (`from . import
    x`, which resolves to its package's `__init__.py` whatever it spells). The others resolve to
    other files only (`ModuleIndex.resolve` ends in the module's last part)."""
    return [e for e in imports if str(e[1]).rsplit(".", 1)[-1] in names or any(n in names for n in e[2]) or (not e[1] and e[0])]


def _importers(targets: Sequence[str], files: Sequence[str], entries: _Entries, modules: "ModuleIndex") -> Set[str]:
    """The files that import any of `targets`. Only import statements naming a target's
    module or package name (its last dotted part) are resolved, and only the files whose
    packed imports hold one of those names, or a bare relative import (`from . import x`:
    an empty module, "\t\t" in the packed text), are unpacked: cheap string tests first."""
    names = _module_names_of(targets)
    wanted = set(targets)
    out: Set[str] = set()
    for f in files:
        packed = entries.index(f)["i"]
        if not packed or ("\t\t" not in packed and not any(n in packed for n in names)):
            continue
        relevant = _naming(entries[f], names)
        if relevant and wanted.intersection(modules.imported_files(f, relevant)):
            out.add(f)
    return out


# ------------------------------------------------------------------ imports by module name
# What an import means where the project's own resolution (`ModuleIndex`) cannot tell: a script
# run with its folder (or a folder it adds) on `sys.path` imports a module by its bare name.


def module_stem(path: str) -> str:
    """The name a file is imported by: its own, or its folder's for a package's `__init__.py`."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.basename(os.path.dirname(path)) if stem == "__init__" else stem


def may_import(importer: str, text: str, target: str, namesakes: Sequence[str]) -> bool:
    """Whether `importer` (its `text`) has an import that may load `target`, by module name:
    one names it (`_loads_name`), and where other project files share the name (`namesakes`),
    Python finds the one on `sys.path` -- in the importer's own folder, else in a folder the
    importer names (`sys.path.append(".../seq2seq")`, `from seq2seq.run_summarization import
    ...`). microsoft/LoRA's examples/test_examples.py puts seq2seq/ on the path and imports its
    run_summarization, not bertabs'. Undecided (it names both folders, or neither): it may."""
    return _loads_name(text, module_stem(target), os.path.basename(target) == "__init__.py", importer, target) and (
        on_path(importer, text, target, namesakes)
    )


def on_path(importer: str, text: str, target: str, namesakes: Sequence[str]) -> bool:
    """Whether an import by `target`'s module name in `importer` (its `text`) may find `target`
    rather than one of its `namesakes` on `sys.path` (`may_import`)."""
    if not namesakes:
        return True
    here = os.path.dirname(importer)
    if _module_folder(target) == here:
        return True
    if any(_module_folder(n) == here for n in namesakes):
        return False
    return _names_folder(text, target) or not any(_names_folder(text, n) for n in namesakes)


def _loads_name(text: str, stem: str, package: bool, importer: Optional[str] = None, target: Optional[str] = None) -> bool:
    """An import statement of `text` may load a module named `stem`: the last part of the module
    it imports (any part, for a package: `from stem.sub import x`), or a name it imports from a
    package (`from pkg import stem`, `from . import stem`); `from gluonnlp.model.bert import X`
    does not load a module `model.py`. Given the `target` file (and its `importer`), the dotted
    name must also spell the target's folders: `groundingdino.util.misc` is some
    `groundingdino/util/misc.py` on `sys.path`, never `train/utils/misc.py` (`_spells_path`), and
    a relative import is resolved from the importer's folder."""
    for level, module, names in import_list(text, stdlib=True):
        parts = str(module).split(".") if module else []
        candidates: List[List[str]] = []
        if parts and parts[-1] == stem:
            candidates.append(parts)
        if package and stem in parts:
            candidates.append(parts[: parts.index(stem) + 1])
        if stem in names:  # type: ignore[operator]
            candidates.append(parts + [stem])
        if target is None or importer is None:
            if candidates:
                return True
            continue
        if any(_spells_path(int(level), spelled, importer, target) for spelled in candidates):  # type: ignore[call-overload]
            return True
    return False


def _spells_path(level: int, parts: Sequence[str], importer: str, target: str) -> bool:
    """The module spelled `parts` (relative `level`, from `importer`) may be the file `target`:
    a relative one is the file below the importer's folder (`level - 1` folders up); an
    absolute one is found below some `sys.path` folder, so the target's path ends in its parts
    (`a/b/c.py`, or `a/b/c/__init__.py`)."""
    module = os.path.splitext(os.path.abspath(target))[0]
    if os.path.basename(module) == "__init__":
        module = os.path.dirname(module)
    if level:
        start = os.path.dirname(os.path.abspath(importer))
        for _ in range(level - 1):
            start = os.path.dirname(start)
        return os.path.join(start, *parts) == module
    return module.split(os.sep)[-len(parts):] == list(parts) if parts else False


def _module_folder(path: str) -> str:
    """The folder a module is found in (a package's: the folder above it)."""
    folder = os.path.dirname(path)
    return os.path.dirname(folder) if os.path.basename(path) == "__init__.py" else folder


def _names_folder(text: str, path: str) -> bool:
    name = os.path.basename(_module_folder(path))
    return bool(name) and re.search(rf"\b{re.escape(name)}\b", text) is not None
