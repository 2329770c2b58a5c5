"""What a file's text says before it is parsed: its project roles and its imports.

The project model parses (with `ast`) only the files a question leads to. To
choose them without parsing the project, every file gets a text index, cheap
enough to compute for each file of a large repository and cached with the
other per-file results:

* roles: "s" -- the file holds something only another file can make wrong
  (a BCE loss, a cast of weights to fp16: the seeds of cross-file findings);
  "a" -- it may set precision (autocast, a framework's precision flag, a
  GradScaler);
* imports: (level, module, names) for every import statement, read by a
  regular expression (strings holding `import` lines can only add files to
  look at, never hide one).

`universe` then takes the seeds, the files that import them (transitively,
a bounded number of levels), and the precision-setting files those import.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

_SEED = re.compile(r"binary_cross_entropy\s*\(|BCELoss\b|\.half\(\s*\)|float16")
_PRECISION = re.compile(r"autocast|precision|fp16|bf16|GradScaler")
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]+)", re.M)

#: how many importer levels above a seed file the universe reaches, and its size
UP_LEVELS = 6
MAX_FILES = 300

Import = Tuple[int, str, Tuple[str, ...]]


def text_index(source: str) -> Dict[str, object]:
    """{"r": roles, "i": imports} of one file's text (JSON-able)."""
    roles = ("s" if _SEED.search(source) else "") + ("a" if _PRECISION.search(source) else "")
    imports: List[List[object]] = []
    if "import" in source:
        for m in _FROM.finditer(source):
            names = [n.strip().split(" as ")[0].strip() for n in m.group(3).strip("()").replace("\\\n", " ").split(",")]
            imports.append([len(m.group(1)), m.group(2), [n for n in names if n.isidentifier()]])
        for m in _IMPORT.finditer(source):
            for part in m.group(1).split(","):
                name = part.strip().split(" as ")[0].strip()
                if name and all(p.isidentifier() for p in name.split(".")):
                    imports.append([0, name, []])
    return {"r": roles, "i": imports}


def module_names(path: str, root: Optional[str]) -> List[str]:
    """The dotted names a file may be imported as: relative to the project root, and to
    `root/src` (a `src/` layout)."""
    if root is None:
        return []
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return []
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else rel.split(os.sep)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts:
        return []
    out = [".".join(parts)]
    if parts[0] == "src" and len(parts) > 1:
        out.append(".".join(parts[1:]))
    return out




class ModuleIndex:
    """Module names -> project files, for imports spelled in a given file."""

    def __init__(self, files: Iterable[str], root: Optional[str]) -> None:
        self.files: Set[str] = set(files)
        self.by_name: Dict[str, str] = {}
        for path in sorted(self.files):
            for name in module_names(path, root):
                self.by_name.setdefault(name, path)

    def resolve(self, importer: str, level: int, module: str) -> Optional[str]:
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            target = os.path.join(base, module.replace(".", os.sep)) if module else base
            return self._file_at(target)
        near = self._file_at(os.path.join(os.path.dirname(importer), module.replace(".", os.sep)))
        return near if near is not None else self.by_name.get(module)

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


def universe(files: Sequence[str], root: Optional[str], index: Callable[[str], Dict[str, object]]) -> List[str]:
    """The files the project model needs: none unless some file is a seed; else the seeds,
    their importers up to `UP_LEVELS` levels, and the precision-setting files any of
    those import. Sorted; the same for any subset of the project that asks."""
    seeds = [f for f in files if "s" in str(index(f)["r"])]
    if not seeds:
        return []
    modules = ModuleIndex(files, root)
    imports: Dict[str, List[str]] = {f: modules.imported_files(f, index(f)["i"]) for f in files}  # type: ignore[arg-type]
    importers: Dict[str, List[str]] = {}
    for f in files:
        for target in imports[f]:
            importers.setdefault(target, []).append(f)
    chosen: Set[str] = set(seeds)
    level = list(seeds)
    for _ in range(UP_LEVELS):
        following = sorted({i for f in level for i in importers.get(f, ()) if i not in chosen})
        if not following or len(chosen) + len(following) > MAX_FILES:
            break
        chosen.update(following)
        level = following
    for f in sorted(chosen):
        for target in imports[f]:
            if target not in chosen and "a" in str(index(target)["r"]) and len(chosen) < MAX_FILES:
                chosen.add(target)
    return sorted(chosen)
