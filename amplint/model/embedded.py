"""Packages a project distributes, and packages that only sit inside it (AMP501's "library code").

A public autograd Function of a package runs under its *users'* autocast: that is why AMP501
reports one even where the package opens no region itself (`facts.AUTOCAST_OR_LIBRARY`). That
holds for a package the project distributes, not for one an application merely carries: a copy
of a library vendored into it (`annotator/uniformer/mmcv/ops/`, `third_party/<lib>/<lib>/`),
whose only possible callers are the project's own code. Such a copy often is not imported by
anything outside it at all (or cannot be: its compiled extension is the original library's
build), and then none of its Functions ever runs, under autocast or not.

* The project root: the `root` a run was given (the folder of its config), else the nearest
  folder above the file holding `.git` or packaging metadata (`setup.py`, `pyproject.toml`,
  `setup.cfg`, `PKG-INFO`, a `*.dist-info`/`*.egg-info`: a wheel or sdist), as the rest of
  amplint finds a project (a vendored copy that kept its own `setup.py` is a project of its
  own, as `engine/crossfile.py` sees it); else unknown, and nothing here changes a finding.
* A file's package: the topmost folder of the chain of `__init__.py` folders holding it,
  not above the root.
* `distributed`: the package is the root itself, or its parent folder holds packaging
  metadata (the root's `setup.py`/`pyproject.toml`, a wheel's `*.dist-info`; also `src/`
  below it): users import it, so its public Functions run under their autocast.
* `embedded`: the package's parent folder is not the root and holds no packaging metadata
  (`third_party/lib/lib`, `annotator/uniformer/mmcv`, below folders that are not packages); a
  package whose parent holds its own `setup.py` is a project of its own inside the root (a
  subproject, an sdist unpacked one folder down, a vendored copy that kept its packaging).
* `reached`: some project module outside the embedded package imports the file's module
  (directly or through others, also through the package's own modules), and the modules those
  importers import include one, outside the package, that may run under autocast (an
  autocast region, a GradScaler, a framework precision setting, custom_fwd/custom_bwd or a
  query of the autocast state: `index.text_index` role "a" and the like). The importers are
  read with the project model's import resolution (`project/index.py`: relative imports,
  `src/` layouts, a package's own absolute name), by their text, when conditions are resolved.

When the project's listing is cut at its file limit, the answer is "reached" (no finding is
dropped on a graph that may be incomplete). Text only, never imported; cached per root while
no file of it changed.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Set, Tuple

from .texts import _MAX_FILES, project_files, read_text

_REPOSITORY = ".git"
_PACKAGING = ("setup.py", "pyproject.toml", "setup.cfg", "PKG-INFO")
_PACKAGING_DIRS = (".dist-info", ".egg-info")
_LEVELS = 12
#: what anticipates autocast in a module's text, beyond `index.text_index`'s role "a"
_ANTICIPATES = re.compile(r"custom_fwd|custom_bwd|is_autocast_enabled|get_autocast_\w*dtype")

_graphs: Dict[Tuple[str, int], "_Graph"] = {}


def _has_packaging(folder: str) -> bool:
    if any(os.path.isfile(os.path.join(folder, name)) for name in _PACKAGING):
        return True
    try:
        return any(e.endswith(_PACKAGING_DIRS) for e in os.listdir(folder))
    except OSError:
        return False


def project_base(filename: str, root: Optional[str] = None) -> Optional[str]:
    """The project root (module docstring); None when nothing marks one."""
    if root:
        return os.path.abspath(root)
    here = os.path.dirname(os.path.abspath(filename))
    for _ in range(_LEVELS):
        if os.path.exists(os.path.join(here, _REPOSITORY)) or _has_packaging(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return None


def package_top(filename: str, base: str) -> Optional[str]:
    """The topmost `__init__.py` folder holding `filename`, not above `base` (None: no package)."""
    folder = os.path.dirname(os.path.abspath(filename))
    top = None
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        top = folder
        if folder == base:
            break
        parent = os.path.dirname(folder)
        if parent == folder or not (parent + os.sep).startswith(base.rstrip(os.sep) + os.sep):
            break
        folder = parent
    return top


def distributed(filename: Optional[str], root: Optional[str] = None) -> bool:
    """The file's package is one the project distributes (its users import it); True when
    the project root is unknown (as before this distinction was made)."""
    if not filename:
        return False
    base = project_base(filename, root)
    if base is None:
        return True
    top = package_top(filename, base)
    if top is None:
        return False
    if top == base:
        return True
    parent = os.path.dirname(top)
    if _has_packaging(parent):
        return True
    return os.path.basename(parent) == "src" and (os.path.dirname(parent) == base or _has_packaging(os.path.dirname(parent)))


def embedded_package(filename: Optional[str], root: Optional[str] = None) -> Optional[str]:
    """The package folder when the file is a module of a package that only sits inside the
    project (its parent folder is not the root); else None."""
    if not filename or not filename.endswith(".py"):
        return None
    base = project_base(filename, root)
    if base is None:
        return None
    top = package_top(filename, base)
    if top is None or top == base or os.path.dirname(top) == base:
        return None
    if _has_packaging(os.path.dirname(top)):
        return None  # a project of its own below the root (an sdist's folder, a subproject's setup.py)
    if os.path.basename(os.path.dirname(top)) == "src" and os.path.dirname(os.path.dirname(top)) == base:
        return None  # a `src/` layout
    return top


def unreached_embedded(filename: Optional[str], root: Optional[str] = None) -> bool:
    """The file is a module of an embedded package that no code of the project outside it
    that may run under autocast imports (module docstring)."""
    package = embedded_package(filename, root)
    if package is None or filename is None:
        return False
    base = project_base(filename, root)
    assert base is not None
    graph = _graph(base, package)
    if graph is None:
        return False
    return not graph.reached(os.path.abspath(filename), package)


class _Graph:
    """The project's import graph (files -> files they import), by text."""

    def __init__(self, files: List[str], base: str) -> None:
        from .project.index import ModuleIndex, imports_of, text_index

        self.files: Set[str] = set(files)
        index = ModuleIndex(files, base)
        self.imports: Dict[str, List[str]] = {}
        self.aware: Set[str] = set()
        for path in files:
            text = read_text(path) or ""
            found = text_index(text)
            self.imports[path] = index.imported_files(path, imports_of(found))
            if "a" in found["r"] or _ANTICIPATES.search(text):
                self.aware.add(path)
        self.importers: Dict[str, Set[str]] = {}
        for path, targets in self.imports.items():
            for t in targets:
                self.importers.setdefault(t, set()).add(path)

    def reached(self, target: str, package: str) -> bool:
        inside = package.rstrip(os.sep) + os.sep
        seen = {target}
        stack = [target]
        outside: List[str] = []
        while stack:
            for importer in self.importers.get(stack.pop(), ()):
                if importer not in seen:
                    seen.add(importer)
                    stack.append(importer)
                    if not importer.startswith(inside):
                        outside.append(importer)
        if not outside:
            return False
        closure = set(outside)
        stack = list(outside)
        while stack:
            path = stack.pop()
            if not path.startswith(inside) and path in self.aware:
                return True
            for t in self.imports.get(path, ()):
                if t not in closure:
                    closure.add(t)
                    stack.append(t)
        return False


def _signature(files) -> int:
    """The files' names, times and sizes: a graph is reused while none changed (a server, a test
    rewriting a file within the listing's freshness)."""
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return hash(tuple(out))


def _graph(base: str, package: str) -> Optional[_Graph]:
    listing = project_files(base, (".py",))
    if len(listing) >= _MAX_FILES:
        return None  # cut at the limit: an importer may be missing
    inside = package.rstrip(os.sep) + os.sep
    files = set(listing)
    if not any(p.startswith(inside) for p in files):
        # a folder the listing skips (`third_party/`): its own files, so its imports resolve
        for folder, dirs, names in os.walk(package):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            files.update(os.path.join(folder, n) for n in names if n.endswith(".py"))
    ordered = sorted(files)
    key = (base, _signature(ordered))
    graph = _graphs.get(key)
    if graph is None:
        if len(_graphs) > 32:
            _graphs.clear()
        graph = _graphs[key] = _Graph(ordered, base)
    return graph
