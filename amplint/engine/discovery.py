"""Which files a run lints: walk folders like ruff does.

Folders are walked in a stable order, skipping hidden folders, virtualenvs,
the `exclude`/`extend-exclude` globs and (by default) whatever the project's
`.gitignore` files and `.git/info/exclude` ignore. Files named on the command
line are always linted, unless `force_exclude` (pre-commit passes every
staged file by name) and they match an exclude glob.

The gitignore matcher is a small pure-Python implementation of git's rules
(anchoring, `**`, `!` negation, directory-only patterns, deeper files taking
precedence), so discovery needs neither git nor a subprocess and prunes
ignored folders instead of walking them. Global git excludes
(`core.excludesFile`) are not read: results must not depend on the machine.

As in git, a pattern never hides a file the checkout tracks: where the work tree's index
is readable (`engine/gitindex.py`), a tracked file is linted and a folder holding one is
walked even when a pattern matches them (untracked files inside such a folder stay
ignored). Without an index the patterns alone decide.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from ..core.roots import nearest_marked
from ..core.safe_read import read_text
from .gitindex import Tracked, tracked

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Config

#: file suffixes a folder walk picks up
LINTABLE_SUFFIXES = (".py", ".pyi", ".ipynb")
#: files a walk notes for the project model without linting them (`WalkRecord.configs`): DeepSpeed
#: JSON, accelerate config YAML, and the launchers that may start a script with a precision
#: (`model/project/launchers.py`: shell scripts, Markdown command blocks, Makefiles by name; a
#: notebook, which the walk lints, is noted as a launcher too)
CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".sh", ".md")
CONFIG_NAMES = frozenset(("Makefile", "makefile", "GNUmakefile"))


# ------------------------------------------------------------------ gitignore


@dataclass(frozen=True)
class IgnorePattern:
    body: str  # the regex text
    regex: "re.Pattern[str]"
    negate: bool
    dir_only: bool
    basename: bool  # no `/` in the pattern: matches the last path component at any depth


def _translate(glob: str) -> str:
    """A gitignore glob (already stripped of `!`, a leading `/` and a trailing `/`) -> regex body."""
    out: List[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            if glob.startswith("**", i):
                before_ok = i == 0 or glob[i - 1] == "/"
                after = glob[i + 2 : i + 3]
                if before_ok and after == "/":  # "**/": zero or more folders
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                if before_ok and i + 2 == n:  # trailing "/**" (or a lone "**"): everything inside
                    out.append(".*")
                    i += 2
                    continue
                out.append("[^/]*")  # "a**b" is two single stars
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and glob[j] in "!^":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_gitignore(text: str) -> List[IgnorePattern]:
    patterns: List[IgnorePattern] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        # trailing spaces are ignored unless escaped with a backslash
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        line = line.rstrip("/") if dir_only else line
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        patterns.append(IgnorePattern(body, re.compile(body, re.DOTALL), negate, dir_only, not anchored))
    return patterns


class IgnoreFile:
    """The patterns of one .gitignore (or info/exclude), relative to `base` (an absolute folder).

    Combined regexes answer the usual "no pattern matches" case with one or two
    match calls per path: patterns without a `/` are matched against the last
    path component only (which is what git's "at any depth" means).
    """

    def __init__(self, base: str, patterns: Tuple[IgnorePattern, ...]):
        self.base = base
        self.patterns = patterns
        self._prefix = base.rstrip(os.sep) + os.sep

        def combined(items: Sequence[IgnorePattern]) -> "Optional[re.Pattern[str]]":
            return re.compile("|".join(f"(?:{p.body})" for p in items), re.DOTALL) if items else None

        self._quick = {
            is_dir: (
                combined([p for p in patterns if p.basename and (is_dir or not p.dir_only)]),
                combined([p for p in patterns if not p.basename and (is_dir or not p.dir_only)]),
            )
            for is_dir in (False, True)
        }

    def match(self, abspath: str, is_dir: bool) -> Optional[bool]:
        """True: ignored, False: re-included by a `!` pattern, None: no pattern matches."""
        if not abspath.startswith(self._prefix):
            return None
        rel = abspath[len(self._prefix) :]
        if os.sep != "/":
            rel = rel.replace(os.sep, "/")
        name = rel.rsplit("/", 1)[-1]
        by_name, by_path = self._quick[is_dir]
        if (by_name is None or by_name.fullmatch(name) is None) and (by_path is None or by_path.fullmatch(rel) is None):
            return None
        for p in reversed(self.patterns):  # the last matching pattern wins
            if p.dir_only and not is_dir:
                continue
            if p.regex.fullmatch(name if p.basename else rel):
                return not p.negate
        return None


def _read_ignore_file(path: str, base: str) -> Optional[IgnoreFile]:
    try:
        patterns = parse_gitignore(read_text(path))
    except OSError:
        return None
    return IgnoreFile(base, tuple(patterns)) if patterns else None


def git_root(folder: str) -> Optional[str]:
    """The work tree root above `folder` (a folder holding `.git`, a folder or a worktree file)."""
    return nearest_marked(os.path.abspath(folder), lambda here: os.path.exists(os.path.join(here, ".git")))


def _git_dir(root: str) -> Optional[str]:
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    try:  # a worktree or submodule: "gitdir: <path>"
        line = read_text(dot_git).split("\n", 1)[0].strip()
    except OSError:
        return None
    if line.startswith("gitdir:"):
        target = line[len("gitdir:") :].strip()
        return os.path.normpath(os.path.join(root, target))
    return None


class _LazyIndex:
    """A work tree's tracked paths, read from its index on first use: most walks meet no
    ignored path that exists (or only `__pycache__`-like folders), and a large monorepo's
    index costs ~2 ms per 1,000 entries to read."""

    __slots__ = ("root", "git_dir", "_read", "_tracked")

    def __init__(self, root: str, git_dir: Optional[str]):
        self.root, self.git_dir = root, git_dir
        self._read = False
        self._tracked: Optional[Tracked] = None

    def get(self) -> Optional[Tracked]:
        if not self._read:
            self._tracked, self._read = tracked(self.root, self.git_dir), True
        return self._tracked


class GitIgnore:
    """The ignore files that apply in one folder: a stack, deepest last."""

    def __init__(self, files: Tuple[IgnoreFile, ...] = (), index: Optional["_LazyIndex"] = None, beneath: bool = False):
        self.files = files
        #: the work tree's index, read the first time a pattern ignores something (None: not a checkout)
        self.index = index
        #: inside a folder the patterns ignore, walked only for the tracked files it holds
        self.beneath = beneath

    @property
    def tracked(self) -> Optional[Tracked]:
        """What the work tree's index tracks (None: no readable index, patterns alone decide)."""
        return self.index.get() if self.index is not None else None

    @classmethod
    def for_folder(cls, folder: str) -> "GitIgnore":
        """The ignore files in force at `folder`: info/exclude and every .gitignore from the root down.

        Outside a git work tree only the `.gitignore` of `folder` itself applies
        (the walk adds those of subfolders as it goes).
        """
        folder = os.path.abspath(folder)
        root = git_root(folder)
        files: List[IgnoreFile] = []
        known: Optional[_LazyIndex] = None
        if root is None:
            chain = [folder]
        else:
            git_dir = _git_dir(root)
            known = _LazyIndex(root, git_dir)
            common = git_dir
            if git_dir is not None and os.path.isfile(os.path.join(git_dir, "commondir")):
                try:
                    common = os.path.normpath(os.path.join(git_dir, read_text(os.path.join(git_dir, "commondir")).strip()))
                except OSError:
                    pass
            if common is not None:
                info = _read_ignore_file(os.path.join(common, "info", "exclude"), root)
                if info:
                    files.append(info)
            chain = []
            current = folder
            while True:
                chain.append(current)
                if current == root:
                    break
                parent = os.path.dirname(current)
                if parent == current:
                    break
                current = parent
            chain.reverse()
        for f in chain:
            found = _read_ignore_file(os.path.join(f, ".gitignore"), f)
            if found:
                files.append(found)
        ignore = cls(tuple(files), known)
        return ignore

    def enter(self, folder: str) -> "GitIgnore":
        """The stack for a subfolder (adds its .gitignore, if any)."""
        found = _read_ignore_file(os.path.join(folder, ".gitignore"), os.path.abspath(folder))
        return GitIgnore(self.files + (found,), self.index, self.beneath) if found else self

    def inside_ignored(self) -> "GitIgnore":
        """The stack for a folder the patterns ignore that holds tracked files."""
        return self if self.beneath else GitIgnore(self.files, self.index, True)

    def holds_tracked(self, folder: str) -> bool:
        """Whether the index tracks a file under `folder` (absolute)."""
        return self.tracked is not None and folder in self.tracked.folders

    def ignored(self, path: str, is_dir: bool, absolute: bool = False) -> bool:
        """Whether git ignores `path`: a tracked file never; inside an ignored folder every
        untracked path; elsewhere the deepest pattern that matches decides. A folder holding
        tracked files may answer True: the walk enters it all the same (`holds_tracked`)."""
        abspath = path if absolute else os.path.abspath(path)
        if not self.beneath and not self._patterns_ignore(abspath, is_dir):
            return False  # no pattern hides it: the index need not be read
        known = self.tracked
        return is_dir or known is None or abspath not in known.files

    def _patterns_ignore(self, abspath: str, is_dir: bool) -> bool:
        for f in reversed(self.files):  # deeper files take precedence
            verdict = f.match(abspath, is_dir)
            if verdict is not None:
                return verdict
        return False


# ------------------------------------------------------------------ exclude globs


class Excluder:
    """The exclude globs, compiled once: a glob matches a name, or a path relative to `root`.

    Same answers as `fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(rel, glob)
    or fnmatch.fnmatch(rel, glob + "/*")`. A glob without `*?[` (all the default
    excludes) matches only by equality, or as a leading part of `rel` (`glob/*`):
    set lookups, with no regex to compile; the others share one regex per test.
    """

    def __init__(self, patterns: Sequence[str], root: Optional[str]):
        self.root = os.path.abspath(root) if root else None
        self._prefix = (self.root.rstrip(os.sep) + os.sep) if self.root else None
        norm = [os.path.normcase(p) for p in patterns]
        globs = [p for p in norm if any(c in p for c in "*?[")]
        plain = [p for p in norm if p not in globs]
        self._any = bool(norm)
        self._plain = frozenset(plain)  # a name or a rel path equal to one
        # `plain/*` matches a rel path that starts with `plain/`: by its first part, or
        # (a plain glob holding a `/`) by a prefix
        self._first = frozenset(p.rstrip("/") for p in plain if "/" not in p.rstrip("/"))
        self._prefixes = tuple(p.rstrip("/") + "/" for p in plain if "/" in p.rstrip("/"))
        self._name = self._rel = None
        if globs:
            import fnmatch

            self._name = re.compile("|".join(fnmatch.translate(p) for p in globs))
            self._rel = re.compile("|".join(fnmatch.translate(p) for p in (*globs, *(p.rstrip("/") + "/*" for p in globs))))
        #: whether a file inside an already-checked folder can match: not when every glob is a
        #: plain name or path (no `*?[`) that no lintable file is called, as the defaults are:
        #: such a glob matches a file only by being its name, or through a folder above it
        #: (`build/*`), and that folder was pruned
        self.reaches_files = bool(globs) or any(p.endswith(LINTABLE_SUFFIXES) for p in norm)

    def rel(self, abspath: str) -> str:
        if self._prefix is not None and abspath.startswith(self._prefix):
            rel = abspath[len(self._prefix) :]
        else:  # outside the project: its absolute path
            rel = abspath
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    def __call__(self, abspath: str, name: Optional[str] = None) -> bool:
        if not self._any:
            return False
        name = os.path.normcase(name if name is not None else os.path.basename(abspath.rstrip(os.sep)))
        if name in self._plain or (self._name is not None and self._name.match(name)):
            return True
        rel = os.path.normcase(self.rel(abspath))
        if rel in self._plain or (self._rel is not None and self._rel.match(rel)):
            return True
        first, slash, _ = rel.partition("/")
        return bool(slash) and first in self._first or (bool(self._prefixes) and rel.startswith(self._prefixes))


def excluded(path: str, patterns: Sequence[str], root: Optional[str]) -> bool:
    """Whether `path` matches an exclude glob, by name or by its path relative to `root`."""
    return Excluder(patterns, root)(os.path.abspath(path), os.path.basename(path.rstrip(os.sep)))


def excluded_with_parents(path: str, patterns: Sequence[str], root: Optional[str]) -> bool:
    """`excluded` for the file or any folder above it (up to `root`): what --force-exclude checks."""
    check = Excluder(patterns, root)
    current = os.path.abspath(path)
    if check(current, os.path.basename(path.rstrip(os.sep))):
        return True
    stop = check.root
    while True:
        parent = os.path.dirname(current)
        if parent == current or (stop is not None and (parent == stop or not parent.startswith(stop + os.sep))):
            return False
        if check(parent):
            return True
        current = parent


# ------------------------------------------------------------------ the walk


class WalkRecord:
    """What a run's walk saw, kept for the cross-file pass so it asks the file system nothing
    twice (tests/test_discovery_reuse.py proves the answers equal asking again).

    `names`: for each folder listed (absolute), which of the names in `watch` it holds,
    present as `os.path.exists` says (`holds_any`); `tops`: for each folder given and
    walked to the end (absolute), the key of the ignore files in force there (`_stack_key`)
    and every file its walk found (absolute; `discover`'s `reuse` stands them in for a walk
    of that folder where that walk would apply the same ignore files); `absolute`: the
    absolute path of each file it yielded (on POSIX, where that is the joined names);
    `configs`: the config files (`CONFIG_SUFFIXES`: a DeepSpeed JSON the code never names,
    launched by a shell script or an accelerate YAML) the walk met where it would have linted
    a Python file (not excluded, not ignored, no link leading out), absolute, in walk order.
    """

    def __init__(self, watch: Sequence[str] = ()) -> None:
        self.watch = frozenset(watch)
        self.names: Dict[str, FrozenSet[str]] = {}
        self.tops: Dict[str, Tuple[Optional[tuple], List[str]]] = {}
        #: each file the walk yielded -> `os.path.abspath` of it (the walk built it anyway)
        self.absolute: Dict[str, str] = {}
        self.configs: List[str] = []

    def holds_any(self, folder: str, names: Sequence[str]) -> bool:
        """Whether `os.path.exists` says `folder` holds one of `names`: from the listing where
        the walk made one and watched them all, else asked."""
        found = self.names.get(folder)
        if found is None or not self.watch.issuperset(names):
            return any(os.path.exists(os.path.join(folder, name)) for name in names)
        return not found.isdisjoint(names)

    def abspath(self, path: str) -> str:
        """`os.path.abspath(path)`, without asking again for a file the walk yielded."""
        return self.absolute.get(path) or os.path.abspath(path)


def _stack_key(ignore: Optional[GitIgnore]) -> Optional[tuple]:
    """What decides a walk's gitignore answers: each ignore file's folder and patterns, in order."""
    if ignore is None:
        return None
    key = tuple((f.base, f.patterns) for f in ignore.files)
    return key + (("", "beneath"),) if ignore.beneath else key


def discover(
    paths: Sequence[str],
    config: "Config",
    force_exclude: bool = False,
    respect_gitignore: Optional[bool] = None,
    problems: Optional[List[Tuple[str, str]]] = None,
    record: Optional[WalkRecord] = None,
    reuse: Optional[WalkRecord] = None,
    outside: Optional[List[str]] = None,
) -> Iterator[str]:
    """Lintable files under `paths`, in a stable order, each once. Folders the walk cannot
    read are appended to `problems` as (folder, reason). `record`: filled with what the
    walk saw; `reuse`: a record whose folders walked to the end stand in for walking them
    again (their files come as absolute paths; give absolute `paths` with it).

    A file met in a folder walk that is a symbolic link whose real path lies outside the
    folder walked and outside the project's root (`config.root`) is not linted (a repository
    cannot make amplint read, and print, a file of the machine: `key.py -> ~/.cache/...`); its
    path is appended to `outside`. A file named on the command line is linted wherever its
    link points."""
    patterns = (*config.exclude, *config.extend_exclude)
    root = config.root or os.getcwd()
    force_exclude = force_exclude or getattr(config, "force_exclude", False)
    if respect_gitignore is None:
        respect_gitignore = getattr(config, "respect_gitignore", True)
    check = Excluder(patterns, root)
    seen: set = set()
    for given in paths:
        if os.path.isdir(given):
            if force_exclude and os.path.abspath(given) != check.root and excluded_with_parents(given, patterns, root):
                continue
            ignore = GitIgnore.for_folder(given) if respect_gitignore else None
            found: Optional[List[str]] = [] if record is not None else None
            inside = _inside(given, config.root)
            yield from _walk(given, check, ignore, seen, problems, record, reuse, found, inside, outside)
            if record is not None and found is not None:
                record.tops[os.path.abspath(given)] = (_stack_key(ignore), found)
        else:
            if force_exclude and excluded_with_parents(given, patterns, root):
                continue
            if given not in seen:
                seen.add(given)
                yield given


def _walk(
    top: str,
    check: Excluder,
    ignore: Optional[GitIgnore],
    seen: set,
    problems: Optional[List[Tuple[str, str]]] = None,
    record: Optional[WalkRecord] = None,
    reuse: Optional[WalkRecord] = None,
    found: Optional[List[str]] = None,
    inside: Tuple[str, ...] = (),
    outside: Optional[List[str]] = None,
) -> Iterator[str]:
    """The files under `top` in os.walk's order (a folder's files, then its subfolders, each
    sorted), pruning hidden, excluded, ignored and virtualenv folders, and (as os.walk) never
    following a link to a folder; `ignore` already holds `top`'s .gitignore. One `scandir`
    per folder and no other system call for most: its listing says whether the folder is a
    virtualenv (holds `pyvenv.cfg`) and holds a `.gitignore`. `found`: gets every file that
    passes (absolute), those already yielded from another path too."""
    top_abs = os.path.abspath(top)
    posix = os.sep == "/"
    # (on Windows abspath also drops trailing dots and spaces: not recorded there)
    absolute = record.absolute if record is not None and posix else None
    stack: List[Tuple[str, str, Optional[GitIgnore], Optional[List[str]]]] = [(top, top_abs, ignore, None)]
    while stack:
        dirpath, here_abs, here, known = stack.pop()
        if known is not None:  # a folder another walk went through, under the same rules
            for full in known:
                if found is not None:
                    found.append(full)
                if full not in seen:
                    seen.add(full)
                    yield full
            continue
        listed = _listing(dirpath, problems, top, record.watch if record is not None else frozenset())
        if listed is None:
            continue
        if record is not None:
            record.names[here_abs] = frozenset(listed.present)
        prefix = here_abs if here_abs.endswith(os.sep) else here_abs + os.sep
        if listed.venv and here_abs != top_abs and os.path.exists(prefix + "pyvenv.cfg"):
            continue  # a virtualenv below the folder given
        if here is not None and here_abs != top_abs and listed.gitignore:
            here = here.enter(dirpath)
        below = []
        links = listed.links
        for d in sorted(listed.dirnames):
            full_abs = prefix + d
            if d.startswith(".") or check(full_abs, d):
                continue
            sub = here
            if here is not None and here.ignored(full_abs, True, absolute=True):
                if not here.holds_tracked(full_abs):
                    continue
                sub = here.inside_ignored()  # walked for the tracked files it holds
            if d in links:
                continue
            other = reuse.tops.get(full_abs) if reuse is not None else None
            if other is not None and _same_rules(sub, full_abs, other[0]) and not os.path.exists(full_abs + os.sep + "pyvenv.cfg"):
                below.append(("", full_abs, sub, other[1]))
            else:
                below.append((os.path.join(dirpath, d), full_abs, sub, None))
        spelled = (dirpath if not dirpath or dirpath.endswith("/") else dirpath + "/") if posix else None
        configs = record.configs if record is not None else None
        for f in sorted(listed.filenames):
            if not f.endswith(LINTABLE_SUFFIXES):
                if configs is not None and (f.endswith(CONFIG_SUFFIXES) or f in CONFIG_NAMES):
                    _note_config(configs, prefix + f, f, check, here, listed, inside)
                continue
            full_abs = prefix + f
            if (check.reaches_files or here_abs == top_abs) and check(full_abs, f):
                continue
            if here is not None and here.files and here.ignored(full_abs, False, absolute=True):
                continue
            if f in listed.file_links and inside and not _within(os.path.realpath(full_abs), inside):
                if outside is not None:
                    outside.append(os.path.join(dirpath, f))
                continue
            if found is not None:
                found.append(full_abs)
            if configs is not None and f.endswith(".ipynb"):
                configs.append(full_abs)  # linted, and a launcher too: its command blocks (`launchers.py`)
            full = spelled + f if spelled is not None else os.path.join(dirpath, f)
            if full not in seen:
                seen.add(full)
                if absolute is not None:
                    absolute[full] = full_abs
                yield full
        stack.extend(reversed(below))


def _note_config(
    configs: List[str], full_abs: str, name: str, check: Excluder, here: Optional[GitIgnore], listed: "_Listing",
    inside: Tuple[str, ...],
) -> None:
    """Note a config file as the walk would take a lintable one: excluded or ignored files and
    links that may lead out of the project are left out."""
    if check(full_abs, name):
        return
    if here is not None and here.files and here.ignored(full_abs, False, absolute=True):
        return
    if name in listed.file_links and (not inside or not _within(os.path.realpath(full_abs), inside)):
        return
    configs.append(full_abs)


def _inside(top: str, root: Optional[str]) -> Tuple[str, ...]:
    """The real folders a walk of `top` may read files from: `top`, and the project root
    holding it."""
    real = os.path.realpath(top)
    roots = [real]
    if root:
        project = os.path.realpath(root)
        if _within(real, (project,)):
            roots.append(project)
    return tuple(roots)


def _within(path: str, roots: Tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _same_rules(here: Optional[GitIgnore], folder: str, key: Optional[tuple]) -> bool:
    """Whether a walk at `folder`'s parent, with ignore files `here`, would apply inside
    `folder` the ignore files another walk started at `folder` applied (`key`): that key
    with `folder`'s own .gitignore, if it has one, taken off is `here`'s."""
    if here is None or key is None:
        return here is None and key is None
    own = key[-1:] if key and key[-1][0] == folder else ()
    return _stack_key(here) + own == key


def _listing(folder: str, problems: Optional[List[Tuple[str, str]]], top: str, watch: FrozenSet[str]) -> Optional["_Listing"]:
    """The folder's entries as os.walk sorts them (a link to a folder is a folder; an entry
    that cannot be stat'ed is not), or None, the reason added to `problems`, when the folder
    cannot be read."""
    out = _Listing()
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    out.dirnames.append(name)
                    if _is_link(entry):
                        out.links.add(name)
                    if name in watch:
                        out.present.add(name)  # a folder exists (a link's target, is_dir said)
                else:
                    out.filenames.append(name)
                    if _is_link(entry):
                        out.file_links.add(name)
                    if name == ".gitignore":
                        out.gitignore = True
                    if name in watch and (_is_file(entry) or os.path.exists(entry.path)):
                        out.present.add(name)
                if name == "pyvenv.cfg":
                    out.venv = True
    except OSError as exc:
        if problems is not None:
            problems.append((exc.filename or top, exc.strerror or str(exc)))
        return None
    return out


class _Listing:
    """One folder's entries. `gitignore`: a `.gitignore` among its files (not folders);
    `venv`: a `pyvenv.cfg` of any kind (confirmed by `os.path.exists`, as before the listing);
    `present`: the watched names `os.path.exists` says it holds."""

    __slots__ = ("dirnames", "filenames", "links", "file_links", "gitignore", "venv", "present")

    def __init__(self) -> None:
        self.dirnames: List[str] = []
        self.filenames: List[str] = []
        self.links: set = set()
        self.file_links: set = set()  # the files (not folders) that are symbolic links
        self.gitignore = False
        self.venv = False
        self.present: set = set()


def _is_link(entry: "os.DirEntry[str]") -> bool:
    try:
        return entry.is_symlink()
    except OSError:  # as os.path.islink, which os.walk asked
        return False


def _is_file(entry: "os.DirEntry[str]") -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False
