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
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple

from ..core.safe_read import read_text

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Config

#: file suffixes a folder walk picks up
LINTABLE_SUFFIXES = (".py", ".pyi", ".ipynb")


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
    current = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


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


class GitIgnore:
    """The ignore files that apply in one folder: a stack, deepest last."""

    def __init__(self, files: Tuple[IgnoreFile, ...] = ()):
        self.files = files

    @classmethod
    def for_folder(cls, folder: str) -> "GitIgnore":
        """The ignore files in force at `folder`: info/exclude and every .gitignore from the root down.

        Outside a git work tree only the `.gitignore` of `folder` itself applies
        (the walk adds those of subfolders as it goes).
        """
        folder = os.path.abspath(folder)
        root = git_root(folder)
        files: List[IgnoreFile] = []
        if root is None:
            chain = [folder]
        else:
            git_dir = _git_dir(root)
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
        return cls(tuple(files))

    def enter(self, folder: str) -> "GitIgnore":
        """The stack for a subfolder (adds its .gitignore, if any)."""
        found = _read_ignore_file(os.path.join(folder, ".gitignore"), os.path.abspath(folder))
        return GitIgnore(self.files + (found,)) if found else self

    def ignored(self, path: str, is_dir: bool, absolute: bool = False) -> bool:
        abspath = path if absolute else os.path.abspath(path)
        for f in reversed(self.files):  # deeper files take precedence
            verdict = f.match(abspath, is_dir)
            if verdict is not None:
                return verdict
        return False


# ------------------------------------------------------------------ exclude globs


class Excluder:
    """The exclude globs, compiled once: a glob matches a name, or a path relative to `root`.

    Same answers as `fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(rel, glob)
    or fnmatch.fnmatch(rel, glob + "/*")`, in one regex call each.
    """

    def __init__(self, patterns: Sequence[str], root: Optional[str]):
        self.root = os.path.abspath(root) if root else None
        self._prefix = (self.root.rstrip(os.sep) + os.sep) if self.root else None
        norm = [os.path.normcase(p) for p in patterns]
        self._name = re.compile("|".join(fnmatch.translate(p) for p in norm)) if norm else None
        self._rel = re.compile("|".join(fnmatch.translate(p) for p in (*norm, *(p.rstrip("/") + "/*" for p in norm)))) if norm else None
        #: whether a file inside an already-checked folder can match: not when every glob is a
        #: plain name or path (no `*?[`) that no lintable file is called, as the defaults are:
        #: such a glob matches a file only by being its name, or through a folder above it
        #: (`build/*`), and that folder was pruned
        self.reaches_files = any(any(c in p for c in "*?[") or p.endswith(LINTABLE_SUFFIXES) for p in norm)

    def rel(self, abspath: str) -> str:
        if self._prefix is not None and abspath.startswith(self._prefix):
            rel = abspath[len(self._prefix) :]
        else:  # outside the project: its absolute path
            rel = abspath
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    def __call__(self, abspath: str, name: Optional[str] = None) -> bool:
        if self._name is None:
            return False
        name = name if name is not None else os.path.basename(abspath.rstrip(os.sep))
        if self._name.match(os.path.normcase(name)):
            return True
        return self._rel.match(os.path.normcase(self.rel(abspath))) is not None


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


def discover(
    paths: Sequence[str],
    config: "Config",
    force_exclude: bool = False,
    respect_gitignore: Optional[bool] = None,
    problems: Optional[List[Tuple[str, str]]] = None,
) -> Iterator[str]:
    """Lintable files under `paths`, in a stable order, each once. Folders the walk cannot
    read are appended to `problems` as (folder, reason)."""
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
            yield from _walk(given, check, ignore, seen, problems)
        else:
            if force_exclude and excluded_with_parents(given, patterns, root):
                continue
            if given not in seen:
                seen.add(given)
                yield given


def _walk(top: str, check: Excluder, ignore: Optional[GitIgnore], seen: set, problems: Optional[List[Tuple[str, str]]] = None) -> Iterator[str]:
    """os.walk, pruning excluded and ignored folders; `ignore` already holds `top`'s .gitignore."""
    top_abs = os.path.abspath(top)
    parents = {top_abs: ignore}

    def unreadable(exc: OSError) -> None:
        if problems is not None:
            problems.append((exc.filename or top, exc.strerror or str(exc)))

    for dirpath, dirnames, filenames in os.walk(top, onerror=unreadable):
        here_abs = os.path.abspath(dirpath)
        here = parents.pop(here_abs, None)
        if here is not None and here_abs != top_abs and ".gitignore" in filenames:
            here = here.enter(dirpath)
        kept = []
        for d in sorted(dirnames):
            full_abs = here_abs + os.sep + d
            if d.startswith(".") or check(full_abs, d) or os.path.exists(os.path.join(full_abs, "pyvenv.cfg")):
                continue
            if here is not None and here.ignored(full_abs, True, absolute=True):
                continue
            kept.append(d)
            parents[full_abs] = here
        dirnames[:] = kept
        for f in sorted(filenames):
            if not f.endswith(LINTABLE_SUFFIXES):
                continue
            full = os.path.join(dirpath, f)
            full_abs = here_abs + os.sep + f
            if full in seen or ((check.reaches_files or here_abs == top_abs) and check(full_abs, f)):
                continue
            if here is not None and here.ignored(full_abs, False, absolute=True):
                continue
            seen.add(full)
            yield full
