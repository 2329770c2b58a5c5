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
  Not a `setup.py` in a subpackage of a package (fairseq's `modules/dynamicconv_layer/setup.py`,
  which builds that folder's CUDA kernel in place): its modules belong to the package above.
* A subproject: a project strictly inside the checkout (`.git`) holding it, as microsoft/unilm
  holds several copies of fairseq (`decoding/GAD/setup.py`, `edgelm/setup.py`). Whether it
  anticipates autocast is asked of its own files (`subproject_anticipates`), not of the whole
  checkout's facts.
* A file's package: the topmost folder of the chain of `__init__.py` folders holding it,
  not above the root.
* `distributed`: the package is the root itself, or its parent folder holds packaging
  metadata (the root's `setup.py`/`pyproject.toml`, a wheel's `*.dist-info`; also `src/`
  below it): users import it, so its public Functions run under their autocast.
* `embedded`: the package's parent folder is not the root and holds no packaging metadata
  (`third_party/lib/lib`, `annotator/uniformer/mmcv`, below folders that are not packages); a
  package whose parent holds its own `setup.py` is a project of its own inside the root (a
  subproject, an sdist unpacked one folder down, a vendored copy that kept its packaging).
* `reached` (any file, `unreached`): a program that loads the file may enter a low-precision
  autocast. One module imports (directly or through others, itself included) both the file and
  a file that may enter one (`project/entries.py`: a region that may run fp16/bf16, a held
  autocast, a framework's precision; not a replay of a captured state in a `backward`); for a
  module of an embedded package, that module and that file lie outside the package (the copy's
  own autocast helpers do not count, and a copy nothing outside imports never runs). Not known,
  so reached, where the imports cannot tell the program: a module importing the file is a
  package module nothing imports (a registry, a config or the package's users load it) or loads
  modules by a computed name. Asked of the project, then of the checkout (`.git`) holding it,
  whose packages a subproject's scripts import; for a file of a subproject, a program the imports
  cannot tell counts only when it runs some code of the subproject (an autocast of a sibling
  subproject, importing its own copy of the package, never runs this one). The imports are read
  with the project model's import resolution (`project/index.py`: relative imports, `src/`
  layouts, a package's own absolute name; a package copied into several subprojects resolves to
  the copy whose folder holds the importer, a subproject's modules also by their names relative
  to it), by their text, when conditions are resolved. The project model's call graph
  cannot narrow it: a chain from a region to a Function passes registries, configs and
  wrappers (`build_model(cfg)`, `DDP(model)`) that it does not follow, so what it does not
  resolve is no proof that nothing leads there.

When the project's listing is cut at its file limit, the answer is "reached" (no finding is
dropped on a graph that may be incomplete). Text only, never imported; cached per root while
no file of it changed.
"""
from __future__ import annotations

import ast
import contextlib
import os
import re
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from ..core.roots import nearest_marked
from .precision_names import FP16_WORDS
from .texts import MAIN_GUARD, files_stamp, read_text, whole_listing

_REPOSITORY = ".git"
_PACKAGING = ("setup.py", "pyproject.toml", "setup.cfg", "PKG-INFO")
_PACKAGING_DIRS = (".dist-info", ".egg-info")
_LEVELS = 12

#: a module loaded by a name the code computes: it may be any file of the project
_LOADS_BY_NAME = ("import_module(", "__import__(", "instantiate(", "spec_from_file_location", "runpy.")

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
    return _above(filename, _project_marked)


def _project_marked(here: str) -> bool:
    """`here` holds `.git`, or packaging metadata that is no extension's build script: a
    `setup.py` in a subpackage of a package (a folder with `__init__.py` whose parent has one:
    fairseq's `fairseq/modules/dynamicconv_layer/setup.py`, building its CUDA kernel in place)
    builds no distribution of the package's modules, which belong to the package above."""
    if os.path.exists(os.path.join(here, _REPOSITORY)):
        return True
    if not _has_packaging(here):
        return False
    return not (
        os.path.isfile(os.path.join(here, "__init__.py")) and os.path.isfile(os.path.join(os.path.dirname(here), "__init__.py"))
    )


def _above(filename: str, marked: Callable[[str], bool]) -> Optional[str]:
    """The nearest folder holding the file, or above it, that is `marked` (a few levels up)."""
    return nearest_marked(os.path.dirname(os.path.abspath(filename)), marked, _LEVELS)


#: words without which a file anticipates no autocast (`facts.anticipates_autocast`: a region of
#: any state, custom_fwd/custom_bwd, an autocast-state query, a GradScaler); a framework's mixed
#: precision is `project.entries.enters_autocast`'s
_ANTICIPATING = ("autocast", "GradScaler", "custom_fwd", "custom_bwd")
_anticipating: Dict[Tuple[str, int], bool] = {}


def subproject_anticipates(filename: Optional[str], root: Optional[str] = None) -> bool:
    """The file's project anticipates autocast, asked of that project's own files when it is a
    subproject strictly inside the checkout (`decoding/GAD/setup.py` of a monorepo, whose facts
    are the whole checkout's): by their words (`_ANTICIPATING`), which every file anticipating it
    holds, or a framework's mixed precision set (`project.entries.enters_autocast`). True for a project that is the checkout or lies in none
    (the run's facts are its own), and when the listing is cut at its limit."""
    from .project.entries import enters_autocast, may_enter_autocast

    if not filename:
        return True
    base = project_base(filename, root)
    repository = checkout(filename)
    if base is None or repository is None or not base.startswith(repository.rstrip(os.sep) + os.sep):
        return True
    listing = whole_listing(base, (".py", ".ipynb"))
    if listing is None:
        return True
    key = (base, files_stamp(listing))
    found = _anticipating.get(key)
    if found is None:
        if len(_anticipating) > 64:
            _anticipating.clear()
        found = False
        for path in listing:
            text = read_text(path) or ""
            if any(w in text for w in _ANTICIPATING) or (may_enter_autocast(text) and enters_autocast(text)):
                found = True
                break
        _anticipating[key] = found
    return found


def checkout(filename: str) -> Optional[str]:
    """The nearest folder above the file holding `.git`: the repository; None outside one."""
    return _above(filename, lambda here: os.path.exists(os.path.join(here, _REPOSITORY)))


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
    if top is None or top == base:
        return None
    if os.path.dirname(top) == base or (
        os.path.basename(os.path.dirname(top)) == "src" and os.path.dirname(os.path.dirname(top)) == base
    ):
        return _nested_copy(filename, top, base)  # a top-level package of the project (also `src/`)
    if _has_packaging(os.path.dirname(top)):
        return None  # a project of its own below the root (an sdist's folder, a subproject's setup.py)
    return top


def _nested_copy(filename: str, top: str, base: str) -> Optional[str]:
    """The outermost folder strictly inside the top-level package `top` that holds the file and
    is a library copy (`library_copy`), when the project's packaging does not distribute it."""
    folder = os.path.dirname(os.path.abspath(filename))
    chain: List[str] = []
    while folder != top and (folder + os.sep).startswith(top + os.sep):
        chain.append(folder)
        folder = os.path.dirname(folder)
    for candidate in reversed(chain):
        if library_copy(candidate, base):
            if _packaged(candidate, top, base):
                return None
            return candidate
    return None


#: the folders a library keeps its own test suite in
_TEST_FOLDERS = ("tests", "test")
_library_tests: Dict[Tuple[str, int], bool] = {}


def library_test(filename: Optional[str], root: Optional[str] = None) -> bool:
    """`filename` belongs to the test suite of a separate library carried inside the checkout:
    it sits under the `tests/` (or `test/`) folder of a folder strictly below the checkout's root
    (the run's `root`, else the folder holding `.git`) that is a distribution of its own, with
    its own packaging (`setup.py`, `pyproject.toml`, `setup.cfg`, `PKG-INFO`, an `.egg-info`) and its own license file
    (`third_party/apex/{setup.py,LICENSE,tests/}`: a vendored copy keeps both). Those tests
    exercise the library (a numerics check, one optimizer step to compare two layers), and no
    program of the project runs them; the project's own tests and examples (under the root's
    `tests/`, or a subproject without a license of its own) are not such files. Unknown root:
    False."""
    if not filename:
        return False
    base = os.path.abspath(root) if root else checkout(filename)
    if base is None:
        return False
    folder = os.path.dirname(os.path.abspath(filename))
    prefix = base.rstrip(os.sep) + os.sep
    if not (folder + os.sep).startswith(prefix):
        return False
    parts = folder[len(prefix):].split(os.sep) if folder != base else []
    for i in range(1, len(parts)):
        if parts[i] not in _TEST_FOLDERS:
            continue
        owner = os.path.join(base, *parts[:i])
        try:
            key = (owner, os.stat(owner).st_mtime_ns)  # a packaging or license file added or removed changes it
        except OSError:
            continue
        found = _library_tests.get(key)
        if found is None:
            found = _library_tests[key] = _own_distribution(owner)
        if found:
            return True
    return False


def _own_distribution(folder: str) -> bool:
    """`folder` holds packaging metadata and a license file of its own."""
    if not _has_packaging(folder):
        return False
    try:
        return _has_license(folder, os.listdir(folder))
    except OSError:
        return False


def _has_license(folder: str, names: List[str]) -> bool:
    """One of `names` (the folder's entries) is a LICENSE/COPYING file."""
    return any(_MARKERS.match(n) and os.path.isfile(os.path.join(folder, n)) for n in names)


_MARKERS = re.compile(r"(LICEN[CS]E|COPYING)(\.\w+)?$", re.IGNORECASE)
_VERSION_FILES = ("version.py", "_version.py", "__version__.py")
_VERSION = re.compile(r"^__version__\s*=", re.MULTILINE)
_COPY_FILES = 400
_copies: Dict[Tuple[str, str, int], bool] = {}


def library_copy(folder: str, base: str) -> bool:
    """`folder` (a package below a top-level package of the project) is a copy of a separate
    library: it carries a library's own marker files (a LICENSE/COPYING, a `version.py` setting
    `__version__`), or its own modules import it by an absolute top-level name (`from mmcv.utils
    import ...`, `import_module("mmcv." + name)`, the folder's name) that is no top-level module
    of the project: that code was written to be installed on its own, not as this subpackage."""
    try:
        stamp = os.stat(folder).st_mtime_ns  # a marker file added or removed changes the folder
    except OSError:
        return False
    key = (folder, base, stamp)
    found = _copies.get(key)
    if found is None:
        found = _copies[key] = _is_copy(folder, base)
    return found


def _is_copy(folder: str, base: str) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    if "__init__.py" not in names:
        return False
    if _has_license(folder, names):
        return True
    for n in _VERSION_FILES:
        if n in names and _VERSION.search(read_text(os.path.join(folder, n)) or ""):
            return True
    name = os.path.basename(folder)
    if not name.isidentifier():
        return False
    for top in (base, os.path.join(base, "src")):
        if os.path.exists(os.path.join(top, name, "__init__.py")) or os.path.isfile(os.path.join(top, name + ".py")):
            return False  # the project's own top-level package of that name
    return _imports_itself(folder, name)


#: where `_imports_itself` answers are kept across runs (the engine sets it for a run that has a
#: cache: `remembered`): get(key) -> payload or None, put(key, payload)
_memo: Optional[Any] = None
#: a file or folder modified within this many seconds of when it was read is not trusted by its stat
#: (git's racy-clean rule, as the cache's)
_RACY_SECONDS = 2.0


@contextlib.contextmanager
def remembered(memo: Optional[Any]) -> Iterator[None]:
    """Keep `_imports_itself` answers in `memo` (a cache store's) while the block runs."""
    global _memo
    before, _memo = _memo, memo
    try:
        yield
    finally:
        _memo = before


def _imports_itself(folder: str, name: str) -> bool:
    """Whether one of the first `_COPY_FILES` Python files below `folder` imports `name` by its
    absolute name (`_own_imports`). Reading them is most of a warm run's facts pass (transformers'
    `models/`: 400 files, ~25 ms), so with a `_memo` the answer is kept with what it was read
    from: the mtime of each folder walked (a name added, removed or renamed in it moves it) and
    the (mtime, size) of each file read, as the cache trusts a file; kept only when none of them
    changed within `_RACY_SECONDS` of the reading, and reused while every one is as recorded."""
    key = f"{folder}\0{name}"
    memo = _memo
    if memo is not None:
        found = memo.get(key)
        if isinstance(found, dict) and _witness_holds(found.get("w")):
            return found.get("a") is True
    own = _own_imports(name)
    witness: List[Optional[list]] = []
    answer = _walk_imports(folder, own, witness)
    if memo is not None and witness and None not in witness and _not_racy(witness):
        memo.put(key, {"a": answer, "w": witness})
    return answer


def _walk_imports(folder: str, own: Callable[[str], bool], witness: List[Optional[list]]) -> bool:
    """`_imports_itself` by reading, each folder walked and file read added to `witness`."""
    seen = 0
    for where, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        _witness(witness, where, folder=True)
        for n in sorted(files):
            if not n.endswith(".py"):
                continue
            seen += 1
            if seen > _COPY_FILES:
                return False
            path = os.path.join(where, n)
            _witness(witness, path, folder=False)
            if own(read_text(path) or ""):
                return True
    return False


def _witness(witness: List[Optional[list]], path: str, folder: bool) -> None:
    """[path, mtime_ns, size (-1: a folder)]; None when it cannot be told (never kept)."""
    try:
        st = os.stat(path)
    except OSError:
        witness.append(None)
        return
    witness.append([path, st.st_mtime_ns, -1 if folder else st.st_size])


def _witness_holds(witness: Any) -> bool:
    if not isinstance(witness, list) or not witness:
        return False
    for item in witness:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            return False
        path, mtime_ns, size = item
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_mtime_ns != mtime_ns or (size != -1 and st.st_size != size):
            return False
    return True


def _not_racy(witness: List[Optional[list]]) -> bool:
    newest = max(item[1] for item in witness if item is not None) / 1e9
    return newest < time.time() - _RACY_SECONDS


def _own_imports(name: str):
    """A test of whether a text imports `name` by its absolute top-level name: a line
    `from NAME[.x] import`, `import NAME[.x]` (alone, `as`, or first of a list), or
    `import_module("NAME.`. The same answers as one `^[ \\t]*(?:from ...|import ...)|import_module`
    MULTILINE regex, whose leading anchor and alternation made `re` try every position (a
    warm transformers run spent ~0.1 s CPU on it over 400 files of `models/`): here each
    pattern starts with a literal, and a line-start match is checked by hand. A match cannot
    span a line, so one that fails the check hides no valid one on its line (that one's line
    prefix would hold the failing match's `from`/`import`)."""
    e = re.escape(name)
    lines = (
        re.compile(r"from[ \t]+%s(?:\.[\w.]+)?[ \t]+import\b" % e),
        re.compile(r"import[ \t]+%s(?:\.|[ \t]*$|[ \t]+as\b|[ \t]*,)" % e, re.MULTILINE),
    )
    dynamic = re.compile(r"import_module\(\s*[rbuf]?['\"]%s\." % e)

    def own(text: str) -> bool:
        if name not in text:
            return False
        for pattern in lines:
            for m in pattern.finditer(text):
                start = m.start()
                if not text[text.rfind("\n", 0, start) + 1 : start].strip(" \t"):
                    return True
        return dynamic.search(text) is not None

    return own


_PACKAGES_LIST = re.compile(r"\bpackages\s*=\s*\[([^\]]*)\]")


def _packaged(copy: str, top: str, base: str) -> bool:
    """The project's packaging distributes the copy: packaging metadata at the root (or above
    `src/`) that lists no explicit packages (automatic discovery takes every package below
    `top`), or an explicit setuptools `packages=[...]` list naming the copy's dotted name."""
    holder = os.path.dirname(top)
    if os.path.basename(holder) == "src" and not _has_packaging(holder):
        holder = os.path.dirname(holder)
    if not _really_packaged(holder):
        return False
    dotted = os.path.relpath(copy, os.path.dirname(top)).replace(os.sep, ".")
    for n in ("setup.py", "setup.cfg", "pyproject.toml"):
        text = read_text(os.path.join(holder, n)) or ""
        listed = _PACKAGES_LIST.search(text)
        if listed and "{" not in listed.group(1) and "find" not in listed.group(1):
            names = set(re.findall(r"['\"]([\w.]+)['\"]", listed.group(1)))
            if names:
                return dotted in names
    return True


def _really_packaged(folder: str) -> bool:
    """Metadata that builds a distribution (not a `pyproject.toml` holding only tool settings)."""
    if os.path.isfile(os.path.join(folder, "setup.py")) or os.path.isfile(os.path.join(folder, "PKG-INFO")):
        return True
    try:
        if any(e.endswith(_PACKAGING_DIRS) for e in os.listdir(folder)):
            return True
    except OSError:
        return False
    pyproject = read_text(os.path.join(folder, "pyproject.toml")) or ""
    if re.search(r"^\[(project|build-system|tool\.poetry|tool\.flit\w*|tool\.hatch\w*)\]", pyproject, re.MULTILINE):
        return True
    cfg = read_text(os.path.join(folder, "setup.cfg")) or ""
    return bool(re.search(r"^\[(metadata|options)\]", cfg, re.MULTILINE))


def unreached(filename: Optional[str], root: Optional[str] = None, anywhere: bool = False, by: str = "autocast") -> bool:
    """No fp16/bf16 autocast of the project can run the file's code (module docstring: an
    embedded copy nothing outside it imports together with such an autocast; any other file none
    of whose programs holds one); False when that is not known. `anywhere`: the precision setting
    says the project runs low precision, in code the project shows or not; `by="fp16"`: no code
    that may run fp16 (`precision_names.FP16_WORDS`) in place of an autocast."""
    if not filename or not filename.endswith(".py") or not os.path.isfile(filename):
        return False
    base = project_base(filename, root)
    if base is None:
        return False
    package = embedded_package(filename, root)
    if package is None and anywhere:
        return False
    # the project first, then the checkout holding it: a subproject's script also imports the
    # enclosing repository's packages (detectron2's `projects/TensorMask/train_net.py` its trainer)
    repository = checkout(filename)
    bases = [base] + ([repository] if repository is not None and (base + os.sep).startswith(repository + os.sep) else [])
    # a subproject strictly inside the checkout (its own packaging: `decoding/GAD/setup.py` in a
    # monorepo): a program the imports cannot tell holds its file only if it runs its code
    within = base if repository is not None and base != repository and len(bases) > 1 else None
    for where in bases:
        graph = _graph(where, package)
        if graph is None or graph.reached(os.path.abspath(filename), package, anywhere, by, within):
            return False
    return True


def runner_may_autocast(filename: Optional[str], root: Optional[str] = None) -> bool:
    """Something may run the file's entry points (its top level, a test runner's `test*`
    functions) under a low-precision autocast: the file's own code may enter one, a
    `conftest.py` in its folder or above it (up to the project root) may (an autouse fixture
    wrapping every test), or a project module imports the file (and may call its functions
    inside its own region). True when that is not known (no project root, a listing cut at its
    limit). Read when conditions are resolved."""
    from .project.entries import enters_autocast

    if not filename or not filename.endswith(".py") or not os.path.isfile(filename):
        return True
    base = project_base(filename, root)
    if base is None:
        return True
    path = os.path.abspath(filename)
    if enters_autocast(read_text(path) or ""):
        return True  # the file's own code (what a rule read may have been only a part of it)
    folder = os.path.dirname(path)
    while True:
        conftest = os.path.join(folder, "conftest.py")
        if os.path.isfile(conftest) and enters_autocast(read_text(conftest) or ""):
            return True
        if folder == base or not (folder + os.sep).startswith(base.rstrip(os.sep) + os.sep):
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    repository = checkout(filename)
    bases = [base] + ([repository] if repository is not None and (base + os.sep).startswith(repository + os.sep) else [])
    for where in bases:
        graph = _graph(where, None)
        if graph is None or path not in graph.files or graph.importers.get(path):
            return True
    return False


def unreached_embedded(filename: Optional[str], root: Optional[str] = None, by: str = "autocast") -> bool:
    """The file is a module of an embedded package that no code of the project outside it that
    may run under autocast imports (module docstring); `by="fp16"`: that may run fp16."""
    return embedded_package(filename, root) is not None and unreached(filename, root, by=by)


def definition_reached(filename: Optional[str], name: str, root: Optional[str] = None) -> bool:
    """Whether the module-level definition `name` of the file can run, when the file is a module
    of an embedded package: a library copy runs only what the project uses of it (module
    docstring, "used"). True outside one, and when the project cannot be read whole."""
    package = embedded_package(filename, root)
    if package is None or filename is None:
        return True
    base = project_base(filename, root)
    assert base is not None
    listing = whole_listing(base, (".py",))
    if listing is None:
        return True  # cut at the limit: a user may be missing
    files = sorted(set(listing) | set(_package_files(package)))
    key = (base, package, files_stamp(files))
    uses = _uses.get(key)
    if uses is None:
        if len(_uses) > 32:
            _uses.clear()
        uses = _uses[key] = _Uses(files, package)
    return uses.runs(name)


_uses: Dict[Tuple[str, str, int], "_Uses"] = {}
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


class _Uses:
    """Which module-level definitions of an embedded package's modules the project uses, by name.

    Each module-level statement of a module of the package either defines names (a `def` or
    `class` without decorators, an assignment with no call in it, an `import ... as` alias) or
    runs when the module is imported (a decorated definition: a registry's `@X.register_module()`;
    an assignment that calls; any other statement). What a used definition, a statement that
    runs, or any file outside the package names (its words, strings too: a config's
    `type="Name"`) is used, and so on: a class of a vendored mmcv that only its own unused
    sampler names never runs (lllyasviel/ControlNet's `FurthestPointSamplingWithDist`). Names,
    not modules: two definitions of one name are used together, which keeps findings."""

    def __init__(self, files: List[str], package: str) -> None:
        inside = package.rstrip(os.sep) + os.sep
        self.defined: Dict[str, Set[str]] = {}  # name -> the names its definitions name
        named: Set[str] = set()  # what runs or what code outside the package names
        outside: List[str] = []
        for path in files:
            text = read_text(path) or ""
            if not path.startswith(inside):
                outside.append(text)
                continue
            try:
                module = ast.parse(text)
            except (SyntaxError, ValueError):
                named.update(_IDENTIFIER.findall(text))  # unreadable as Python: all of it may run
                continue
            lines = text.splitlines()
            for statement in module.body:
                defines = _defines(statement)
                words = _names_in(_statement_text(lines, statement))
                if defines is None:
                    named |= words
                for n in defines or ():
                    self.defined.setdefault(n, set()).update(words)
        for text in outside:
            named.update(w for w in _IDENTIFIER.findall(text) if w in self.defined)
        self.used: Set[str] = set()
        todo = [n for n in named if n in self.defined]
        while todo:
            n = todo.pop()
            if n not in self.used:
                self.used.add(n)
                todo.extend(w for w in self.defined[n] if w in self.defined and w not in self.used)

    def runs(self, name: str) -> bool:
        return name in self.used or name not in self.defined  # a name defined no plain way: not known


def _defines(statement: ast.stmt) -> Optional[List[str]]:
    """The names a module-level statement only defines; None when it runs code on import."""
    if _exports(statement):
        return []
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None if statement.decorator_list else [statement.name]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if statement.value is None or any(isinstance(n, ast.Call) for n in ast.walk(statement.value)):
            return None
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        return [t.id for t in targets if isinstance(t, ast.Name)]
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [a.asname for a in statement.names if a.asname]  # `from m import A as B`: B names A
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return []  # a docstring
    return None


def _statement_text(lines: List[str], statement: ast.stmt) -> str:
    first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())])
    return "\n".join(lines[first - 1 : statement.end_lineno or statement.lineno])


def _names_in(text: str) -> Set[str]:
    """The words of a statement's text (names, attributes, import sources, strings, comments:
    more words only ever use more), without those of an `__all__` list: an export list only
    tells `import *` what to take, and every module has its own (one `__all__` named would use
    every module's exports)."""
    return set(_IDENTIFIER.findall(_EXPORT_LIST.sub("", text)))


_EXPORT_LIST = re.compile(r"\b__all__\s*(?:\+?=|\.extend\(|\.append\()\s*[\[(][^\])]*[\])]")


def _exports(statement: ast.stmt) -> bool:
    """`__all__ = [...]`, `__all__ += [...]`."""
    if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
    return False


def _package_files(package: str) -> List[str]:
    """The package's own `.py` files (a folder the project listing skips: `third_party/`)."""
    out = []
    for folder, dirs, names in os.walk(package):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        out.extend(os.path.join(folder, n) for n in names if n.endswith(".py"))
    return out


class _Graph:
    """The project's import graph (files -> files they import), by text, and the files that may
    enter a low-precision autocast (`project/entries.py`)."""

    def __init__(self, files: List[str], base: str) -> None:
        from .project.entries import may_enter_autocast
        from .project.index import ModuleIndex, imports_of, module_stem, text_index

        self.files: Set[str] = set(files)
        # a package copied into several subprojects resolves to the importer's own copy
        projects: Dict[str, Optional[str]] = {}

        def subproject(path: str) -> Optional[str]:
            folder = os.path.dirname(path)
            if folder not in projects:
                projects[folder] = project_base(path)
            return projects[folder]

        index = ModuleIndex(files, base, nearest=True, subproject=subproject)
        # a library copy nested in a top-level package imports itself by its own top-level name
        # (`from mmcv.utils import ...` inside `app/annotator/uniformer/mmcv/`): resolve it there
        copies: Set[str] = set()
        for path in files:
            package = embedded_package(path, base)
            if package is not None and package not in copies:
                copies.add(package)
                parent = os.path.dirname(package)
                for other in files:
                    if other.startswith(package + os.sep) and other.endswith(".py"):
                        parts = os.path.relpath(other, parent)[: -len(".py")].split(os.sep)
                        if parts[-1] == "__init__":
                            parts = parts[:-1]
                        index.by_name.setdefault(".".join(parts), other)
        self.imports: Dict[str, List[str]] = {}
        self.candidates: List[str] = []  # files that may enter autocast by their words, parsed when asked
        self.fp16: Set[str] = set()  # files whose text may run fp16 (`precision_names.FP16_WORDS`)
        self.scripts: Set[str] = set()
        self.loaders: Set[str] = set()  # files that load modules by a computed name
        stems: Dict[str, List[str]] = {}
        for path in files:
            stems.setdefault(module_stem(path), []).append(path)
        for path in files:
            text = read_text(path) or ""
            imports = imports_of(text_index(text))
            self.imports[path] = index.imported_files(path, imports) + _by_name(path, text, imports, index, stems)
            if may_enter_autocast(text):
                self.candidates.append(path)
            if FP16_WORDS.search(text):
                self.fp16.add(path)
            if "__main__" in text and MAIN_GUARD.search(text):
                self.scripts.add(path)
            if any(word in text for word in _LOADS_BY_NAME):
                self.loaders.add(path)
        self.importers: Dict[str, Set[str]] = {}
        for path, targets in self.imports.items():
            for t in targets:
                self.importers.setdefault(t, set()).add(path)
        self._ups: Dict[str, Set[str]] = {}
        self._folder_users: Dict[str, Set[str]] = {}
        self._entries: Dict[str, bool] = {}

    def _entry(self, path: str) -> bool:
        """The file may enter a low-precision autocast (`project/entries.py`; parsed once, when a
        question reaches it)."""
        found = self._entries.get(path)
        if found is None:
            from .project.entries import enters_autocast

            found = self._entries[path] = enters_autocast(read_text(path) or "")
        return found

    def reached(
        self, target: str, package: Optional[str], anywhere: bool = False, by: str = "autocast", within: Optional[str] = None
    ) -> bool:
        """Some program that loads `target` may enter a low-precision autocast: one module imports
        (directly or through others, itself included) both `target` and an entry file (`by="fp16"`:
        a file that may run fp16). For a module of the embedded `package`, that module lies outside
        the copy and so does the entry (the copy's own autocast helpers do not count; `anywhere`:
        any importer outside will do). `within`: the subproject folder holding `target`, strictly
        inside the checkout; where the imports cannot tell the program (a registry, a loader), the
        program is one that runs some code of the subproject: an entry counts only when a module
        importing it imports a file of the subproject too (an autocast in a sibling subproject,
        which imports its own copy of the package, never runs this one)."""
        if target not in self.files:
            return True  # a folder the listing skipped: who imports it is not known
        candidates, entry = (self.fp16, lambda e: True) if by == "fp16" else (self.candidates, self._entry)
        up = self._up(target)
        if package is not None:
            inside = package.rstrip(os.sep) + os.sep
            shared = {m for m in up if not m.startswith(inside)}
            if not shared or anywhere:
                return bool(shared)  # a copy nothing outside imports never runs
            return any(shared & self._up(e) and entry(e) for e in candidates if not e.startswith(inside))
        if self._loaded_by_name(up) or (up & self.loaders and any(entry(e) for e in candidates)):
            if within is None:
                return True  # which program holds it, or what else its program loads, is not known
            users = self._users(within)  # the programs that may hold it: those running the subproject's code
            return any(users & self._up(e) and entry(e) for e in candidates)
        return any(up & self._up(e) and entry(e) for e in candidates)

    def _users(self, folder: str) -> Set[str]:
        """The files below `folder` and every file importing one of them, directly or through others."""
        found = self._folder_users.get(folder)
        if found is None:
            inside = folder.rstrip(os.sep) + os.sep
            found = {p for p in self.files if p.startswith(inside)}
            stack = list(found)
            while stack:
                for importer in self.importers.get(stack.pop(), ()):
                    if importer not in found:
                        found.add(importer)
                        stack.append(importer)
            self._folder_users[folder] = found
        return found

    def _up(self, path: str) -> Set[str]:
        """`path` and every file importing it, directly or through others."""
        found = self._ups.get(path)
        if found is None:
            found = {path}
            stack = [path]
            while stack:
                for importer in self.importers.get(stack.pop(), ()):
                    if importer not in found:
                        found.add(importer)
                        stack.append(importer)
            self._ups[path] = found
        return found

    def _loaded_by_name(self, modules: Set[str]) -> bool:
        """One of `modules` that nothing imports is a module of a package, not a script: loaded
        by a name the code does not spell (a registry, a config's `_target_`, `import_module`,
        the package's users), so which program holds it is not known. A script (outside any
        package, or with a `__main__` block) is a program of its own."""
        return any(
            not self.importers.get(m) and m not in self.scripts and os.path.isfile(os.path.join(os.path.dirname(m), "__init__.py"))
            for m in modules
        )


def _by_name(path: str, text: str, imports, index, stems: Dict[str, List[str]]) -> List[str]:
    """The project files a top-level import the index does not resolve may load by module name
    (`import run_summarization` of a script that puts its folder on `sys.path`), as
    `project.index.on_path` picks among files sharing the name, not a module of another
    subproject whose folder the importer does not name (`_findable`); among several, those of the
    importer's own project (`project_base`) when it has one. Not a dotted one the index
    does not resolve (`import torch.distributed`): another distribution's module."""
    from .project.index import on_path

    out: List[str] = []
    for level, module, _ in imports:
        if level or "." in str(module) or index.resolve(path, 0, module) is not None:
            continue
        found = [f for f in stems.get(str(module), ()) if f != path]
        found = [f for f in found if on_path(path, text, f, [o for o in found if o != f])]
        if found:
            # a module of another subproject of the checkout (its own packaging, not holding the
            # importer) is found by a bare name only by its own programs, or by one that puts
            # its folder on `sys.path`, spelling it (`sys.path.append("../GAD")`)
            found = [f for f in found if _findable(path, text, f)]
        if len(found) > 1:
            # namesakes in several subprojects of a checkout (each copy's `train.py`): a program
            # of one runs from its folder and finds its own; others only when it has none
            own = project_base(path)
            found = [f for f in found if project_base(f) == own] or found
        out.extend(found)
    return out


def _findable(importer: str, text: str, target: str) -> bool:
    """A bare-name import in `importer` (its `text`) may find `target`: the target's project
    holds the importer, or is no subproject (it holds `.git`), or the text spells its folder as
    a path (`sys.path.append("../GAD")`, `"decoding/GAD"`)."""
    project = project_base(target)
    if project is None or (os.path.dirname(importer) + os.sep).startswith(project.rstrip(os.sep) + os.sep):
        return True
    if os.path.exists(os.path.join(project, _REPOSITORY)):
        return True
    # as a path (`"decoding/GAD"`, `"../GAD"`, `"GAD"`), not the import itself (`from fairseq
    # import`) nor another path ending in the name (`github.com/facebookresearch/fairseq`)
    name, parent = re.escape(os.path.basename(project)), re.escape(os.path.basename(os.path.dirname(project)))
    return re.search(r"""(?:\b%s[/\\]+|\.\.[/\\]+|['"])%s\b""" % (parent, name), text) is not None


def _graph(base: str, package: Optional[str]) -> Optional[_Graph]:
    listing = whole_listing(base, (".py",))
    if listing is None:
        return None  # cut at the limit: an importer may be missing
    files = set(listing)
    if package is not None and not any(p.startswith(package.rstrip(os.sep) + os.sep) for p in files):
        files.update(_package_files(package))  # a folder the listing skips: its imports resolve
    ordered = sorted(files)
    key = (base, files_stamp(ordered))
    graph = _graphs.get(key)
    if graph is None:
        if len(_graphs) > 32:
            _graphs.clear()
        graph = _graphs[key] = _Graph(ordered, base)
    return graph


#: texts that may name a module by its path or dotted name: code, configs, launch scripts
_NAMING_SUFFIXES = (".py", ".ipynb", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".sh")
#: the project's documentation: a module it names as a quoted value (`custom_pipeline="x"`) is loaded
_DOC_SUFFIXES = (".md", ".rst")


def never_loaded(filename: Optional[str], root: Optional[str] = None) -> bool:
    """No program of the project can load the file: a module below the project root (a root
    module is an entry point, or one the packaging ships) outside any package (no
    `__init__.py` beside it: no package's users or registry import it as a package module),
    that is no script (no `__main__` block, only definitions at module level: imports, `def`,
    `class`, assignments that call nothing, a docstring), that no project file imports (the import graph of
    `unreached`, by-name imports of scripts that put folders on `sys.path` included), whose
    dotted or path tail (`baselines.transformer`, `baselines/transformer`, `transformer.py`) no
    code, config or launch script of the project spells (a registry's or a config's `_target_`
    string, a `python x/y.py` line), that no documentation page (`.md`, `.rst`) shows loaded by
    name as a quoted value (`custom_pipeline="x"`: diffusers' community pipelines), whose name no
    config or shell script holds as a word (`model:
    transformer`; not a Hydra defaults-list entry picking a config file of the project, `- /model:
    transformer` beside `configs/model/transformer.yaml`), and that no file loading modules by a computed name may pick: one quoting its
    name (`import_module(name)` with `"transformer"` beside it) or a module of its folder
    (`import_module(f"baselines.{name}")`, also below a dotted prefix: `f"zoedepth.trainers.{name}"`).
    A file that imports or names it does not count when it is itself never loaded by the same
    test (a folder of unused modules that import each other: x-flux's copy of ZoeDepth's
    `trainers/`, whose trainers import `zoedepth.trainers.loss` and are imported by nothing; at
    most `_CLOSURE_LIMIT` files are followed). An
    unused file of a library copy vendored as plain folders (VMamba's `convnexts4nd/src/models/
    baselines/transformer.py`, s4's models nobody registers). False when the listing is cut at
    its limit or the file cannot be read."""
    return _unloaded(filename, root, script=False, tests=False)


def never_runs(filename: Optional[str], definition: Optional[str], root: Optional[str] = None) -> bool:
    """The module-level `def` or `class` named `definition` of the file never runs: no program
    of the project loads the file (`never_loaded`), except that the file may be a script of its
    own, run by its path, whose `__main__` block (its only statement besides definitions) does
    not name `definition`, directly or through the module's other definitions it names
    (ZoeDepth's `trainers/loss.py`: its `__main__` block tests `DiscreteNLLLoss`, and
    `SILogLoss` runs nowhere). `definition` None (the module's top level): `never_loaded`."""
    if definition is None:
        return _unloaded(filename, root, script=False, tests=True)
    if not _unloaded(filename, root, script=True, tests=True):
        return False
    text = read_text(os.path.abspath(filename or ""))
    if text is None:
        return False
    return definition not in _script_uses(text)


#: how many files `never_loaded` follows through importers that are themselves never loaded
_CLOSURE_LIMIT = 16


def _unloaded(filename: Optional[str], root: Optional[str], script: bool, tests: bool) -> bool:
    """`never_loaded` (`script`: the file itself may hold a `__main__` block; `tests`: a test
    file, which a test runner collects, is a program of its own too, as every file that imports
    or names it is)."""
    if not filename or not filename.endswith(".py") or not os.path.isfile(filename):
        return False
    base = project_base(filename, root)
    if base is None:
        return False
    base = os.path.abspath(base)
    path = os.path.abspath(filename)
    if not _plain_module(path, base, script, tests):
        return False
    graph = _graph(base, None)
    if graph is None:
        return False
    listing = whole_listing(base, _NAMING_SUFFIXES)
    if listing is None:
        return False
    listing = listing + (whole_listing(base, _DOC_SUFFIXES) or [])  # documentation cut at its limit: not read
    seen, todo = {path}, [path]
    while todo:
        here = todo.pop()
        if here != path and not _plain_module(here, base, False, True):
            return False
        if here not in graph.files:
            return False
        referrers = _referrers(here, graph, listing)
        if referrers is None:
            return False
        for other in referrers:
            if other not in seen:
                if len(seen) >= _CLOSURE_LIMIT:
                    return False
                seen.add(other)
                todo.append(other)
    return True


def _plain_module(path: str, base: str, script: bool, tests: bool) -> bool:
    """A `.py` file below the root, outside any package, only defining at module level
    (`script`: a `__main__` block allowed besides). `tests`: also not a file a test runner
    collects, nor a module of a folder without `__init__.py` inside a package the project's
    packaging distributes (a namespace subpackage its users import: ColBERT's
    `colbert.distillation.scorer`); asked of every file that imports or names the module, and
    of the module itself where the question is whether its code runs at all (`never_runs`)."""
    if not path.endswith(".py"):
        return False  # a config, a launch script, a notebook naming the module: it is loaded
    folder = os.path.dirname(path)
    if os.path.isfile(os.path.join(folder, "__init__.py")):
        return False
    if folder == base:
        return False  # a module at the root: an entry point, or a `py_modules` module users import
    name = os.path.basename(path)
    if tests and (name.startswith("test") or name.endswith("_test.py") or name == "conftest.py"):
        return False  # pytest / unittest collect it
    if tests and _distributed_namespace(folder, base):
        return False
    text = read_text(path)
    if text is None:
        return False
    key = (text, script)  # the text decides the rest: the path's parts were read above
    found = _plain.get(key)
    if found is None:
        if "__main__" in text and MAIN_GUARD.search(text):
            found = script and _only_definitions(text, main=True)
        else:
            found = _only_definitions(text)
        if len(_plain) > 512:
            _plain.clear()
        _plain[key] = found
    return found


def _distributed_namespace(folder: str, base: str) -> bool:
    """`folder` (no `__init__.py`) lies inside a regular package whose top the project's
    packaging metadata distributes (a `setup.py` or a building `pyproject.toml` beside it, or
    above its `src/`): Python imports its modules as a namespace subpackage of it."""
    here = os.path.dirname(folder)
    while (here + os.sep).startswith(base.rstrip(os.sep) + os.sep) and here != base:
        if os.path.isfile(os.path.join(here, "__init__.py")):
            top = package_top(os.path.join(here, "__init__.py"), base) or here
            holder = os.path.dirname(top)
            if os.path.basename(holder) == "src" and not _has_packaging(holder):
                holder = os.path.dirname(holder)
            return _really_packaged(holder)
        here = os.path.dirname(here)
    return False


#: `_plain_module`'s reading of a text (a condition asks it once per finding of the file)
_plain: Dict[Tuple[str, bool], bool] = {}


def _referrers(path: str, graph: "_Graph", listing: List[str]) -> Optional[List[str]]:
    """The files that import `path` or spell its name as `never_loaded` reads them; None when
    one cannot be read."""
    folder = os.path.dirname(path)
    stem = os.path.basename(path)[: -len(".py")]
    parent = os.path.basename(folder)
    tail = re.compile(r"\b%s[./\\]+%s\b|\b%s\.py\b" % (re.escape(parent), re.escape(stem), re.escape(stem)))
    quoted = re.compile(r"['\"]%s['\"]" % re.escape(stem))
    word = re.compile(r"(?:[:=][ \t]*['\"]?|['\"/.])%s\b" % re.escape(stem))  # a value, not prose
    # `f"models.{name}"`, `f"pkg.models.{name}"`: a computed module of the folder
    prefix = re.compile(r"['\"](?:[\w.]*\.)?%s[./](?:\{|['\"])" % re.escape(parent))
    # documentation showing the module loaded by name (`custom_pipeline="clip_guided_..."`)
    documented = re.compile(r"[=:(][ \t]*['\"]%s['\"]" % re.escape(stem))
    found = sorted(graph.importers.get(path, ()))
    for other in listing:
        if other == path:
            continue
        body = read_text(other)
        if body is None:
            return None
        if other.endswith(_DOC_SUFFIXES):
            if stem in body and documented.search(body):
                found.append(other)
            continue
        if other in graph.loaders and prefix.search(body):
            found.append(other)
        elif stem not in body:
            continue
        elif tail.search(body):
            found.append(other)
        elif not other.endswith((".py", ".ipynb")) and _names_as_value(body, word, stem, listing):
            found.append(other)  # a config or launch script naming it (`model: transformer`)
        elif other in graph.loaders and quoted.search(body):
            found.append(other)
    return found


#: a Hydra defaults-list entry (`- /model: transformer`, `- override layer: transformer`,
#: `- model@encoder: transformer`): the group and the option it picks
_DEFAULTS_ENTRY = re.compile(r"^\s*-\s*(?:override\s+)?/?([\w/]+)(?:@[\w.]+)?\s*:\s*['\"]?(\w+)['\"]?\s*(?:#.*)?$")


def _names_as_value(body: str, word: "re.Pattern[str]", stem: str, listing: List[str]) -> bool:
    """A config or launch script holds the module's name as a value (`word`), other than as a
    Hydra defaults-list entry picking a config file of the project (`- /model: transformer`
    when `configs/model/transformer.yaml` exists): that entry loads the YAML, not the module
    (s4's `configs/experiment/lm/transformer-wt103.yaml`)."""
    for match in word.finditer(body):
        start = body.rfind("\n", 0, match.start()) + 1
        end = body.find("\n", match.end())
        entry = _DEFAULTS_ENTRY.match(body[start : end if end >= 0 else len(body)])
        if entry is None or entry.group(2) != stem or not _config_file(entry.group(1), stem, listing):
            return True
    return False


def _config_file(group: str, option: str, listing: List[str]) -> bool:
    """A project YAML file `<group>/<option>.yaml` (below any folder: Hydra's config root, or the
    group of the config holding a relative entry)."""
    tails = tuple(os.sep + os.path.join(*group.split("/"), option) + ext for ext in (".yaml", ".yml"))
    return any(path.endswith(tails) for path in listing)


def _script_uses(text: str) -> Set[str]:
    """The names a script's `__main__` block uses, directly or through the module-level
    definitions it names (their words, as `_Uses` reads them)."""
    module = ast.parse(text)
    lines = text.splitlines()
    defined: Dict[str, Set[str]] = {}
    used: Set[str] = set()
    for statement in module.body:
        if _main_block(statement):
            used |= _names_in(_statement_text(lines, statement))
            continue
        for n in _defines(statement) or _plain_names(statement):
            defined.setdefault(n, set()).update(_names_in(_statement_text(lines, statement)))
    todo = [n for n in used if n in defined]
    while todo:
        for w in defined.get(todo.pop(), ()):
            if w not in used:
                used.add(w)
                todo.append(w)
    return used


def _plain_names(statement: ast.stmt) -> List[str]:
    """The names a decorated definition binds (its body runs only when called)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    return []


def _main_block(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (no `else`)."""
    if not isinstance(statement, ast.If) or statement.orelse:
        return False
    test = statement.test
    return (
        isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
        and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__"
    )


def _only_definitions(text: str, main: bool = False) -> bool:
    """The module's top level only defines (module docstring of `never_loaded`; `main`: besides
    `if __name__ == "__main__":` blocks); a module that cannot be parsed is not known."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    for statement in module.body:
        if main and _main_block(statement):
            continue
        if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and not _calls(statement.value):
            continue  # a constant, a table: `model = model.half()` runs code (a script run by its path)
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue
        if isinstance(statement, ast.Try) and all(
            isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or (isinstance(s, ast.Assign) and not _calls(s.value))
            for s in ast.walk(statement) if isinstance(s, ast.stmt) and s is not statement
        ):
            continue  # `try: import x / except ImportError: x = None`
        return False
    return True


def _calls(node: Optional[ast.AST]) -> bool:
    return node is not None and any(isinstance(n, ast.Call) for n in ast.walk(node))
