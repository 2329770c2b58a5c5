"""Cross-file findings: the project model (`amplint.model.project`) run over a lint run.

Each linted file belongs to a project: the nearest folder above it holding a
`pyproject.toml`, `setup.py`, `setup.cfg` or `.git` (else, inside a package,
the folder holding its topmost package). The project model of
that folder is built from *all* of its files (found by the same discovery as
a run over the folder), whatever subset the run was asked to lint, so
`amplint changed_file.py` (as pre-commit runs it) reports for that file what
`amplint .` reports for it. Only the files the model needs are parsed
(`index.universe`); their text indexes and summaries are cached by content
hash next to the lint results, so a one-file run in a warm project reads
nothing but that file.

Rules opt in with a `check_project(project)` method yielding diagnostics; the
engine drops one that repeats a per-file finding at the same place.
"""
from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic, Related
from ..core.roots import ROOT_MARKERS, holds_any
from ..core.safe_read import read_bytes

if TYPE_CHECKING:  # pragma: no cover
    from .cache import Cache
    from .discovery import WalkRecord

_PACKAGE = ("__init__.py",)
#: what `project_root` asks of a folder: the run's walk notes them as it lists (`WalkRecord`)
ROOT_NAMES = (*ROOT_MARKERS, *_PACKAGE)


def _parent(path: str) -> str:
    """`os.path.dirname(path)`, cheaper where the last `/` has no other before it (on POSIX,
    what dirname then returns): Projects asks it of every file of a run and every folder
    up to a project root."""
    i = path.rfind("/") if os.sep == "/" else -1
    return path[:i] if i > 0 and path[i - 1] != "/" else os.path.dirname(path)


def project_root(path: str) -> Optional[str]:
    """The nearest folder above `path` (absolute) that holds a project marker; else, for a
    file inside a package, the folder holding its topmost package (an unpacked wheel or
    sdist); else None."""
    return _Roots().root(path)


class _Roots:
    """`project_root` for many files: each folder is asked about once (whether it holds a
    marker, an `__init__.py`), through `walk` (the run's `WalkRecord`: from the listings
    its walk made) or the file system."""

    def __init__(self, walk: "Optional[WalkRecord]" = None) -> None:
        self.holds_any = walk.holds_any if walk is not None else holds_any
        self._marked: Dict[str, Optional[str]] = {}  # folder -> the nearest marked folder at or above it
        self._top: Dict[str, Optional[str]] = {}  # folder -> the topmost package holding it (None: no package)

    def root(self, path: str) -> Optional[str]:
        folder = _parent(path)
        marked = self._marked_root(folder)
        if marked is not None:
            return marked
        top = self._package_top(folder)
        return _parent(top) if top is not None else None

    def _marked_root(self, folder: str) -> Optional[str]:
        seen: List[str] = []
        root: Optional[str] = None
        while True:
            if folder in self._marked:
                root = self._marked[folder]
                break
            seen.append(folder)
            if self.holds_any(folder, ROOT_MARKERS):
                root = folder
                break
            parent = _parent(folder)
            if parent == folder:
                break
            folder = parent
        for f in seen:
            self._marked[f] = root
        return root

    def _package_top(self, folder: str) -> Optional[str]:
        """The highest folder of the unbroken run of packages (`__init__.py`) from `folder` up."""
        chain: List[str] = []
        above: Optional[str] = None  # the answer for the folder above the chain
        current = folder
        while True:
            if current in self._top:
                above = self._top[current]
                break
            if not self.holds_any(current, _PACKAGE):
                self._top[current] = None
                break
            chain.append(current)
            parent = _parent(current)
            if parent == current:
                break
            current = parent
        top = above if above is not None else (chain[-1] if chain else None)
        for f in chain:
            self._top[f] = top
        return top


def project_rules(rules: Sequence[Any]) -> List[Any]:
    """The selected rules that check the project. A rule given as a spec is imported only
    when its module's text defines `check_project`: such modules import no libcst at module
    level (tests/test_speed_project_rules.py), while importing any other rule module would
    import libcst and the per-file model."""
    out = []
    for spec in rules:
        if hasattr(spec, "load"):
            if not _defines_check_project(spec.module):
                continue
            spec = spec.load()
        if hasattr(spec, "check_project"):
            out.append(spec)
    return out


def reads_scale(rules: Sequence[Any]) -> bool:
    """Whether a selected rule's `check_project` reads the scale view (the wrapper rules,
    `wrappers.project_view`): the cross-file pass then summarises every file that may use a
    distributed API (text index role "d") both ways (`_Store.summary`, `_Store.scale`)."""
    return any(_module_says(getattr(r, "module", None) or r.__module__, "scale_project_diagnostics(") for r in rules)


#: `FileResult.summaries[0]` of a file whose project summary the lint did not make
#: (`summaries_of`): the cross-file pass makes it if it asks
LATER = "later"


def summaries_of(source: str, roles: str = "") -> Tuple[Any, Any]:
    """(summary, scale summary) of a text from one parse (`FileResult.summaries`): a lint
    worker computes them for a file with role "d" when `reads_scale`, so the cross-file pass,
    which runs in one process after the pool, reads them instead of parsing each such file
    again (on transformers 76 files, 5 MB: most of that pass's CPU time). Nothing reads them
    before that pass, so `summaries_ahead` hands them over packed (`packed`: one bytes object,
    which the collector never traverses while the lint goes on).

    A file whose only role is "d" (`roles`: its text index's) gets its scale summary only,
    and `LATER` for the other: the cross-file pass reads every such file's scale summary but
    asks the project summary of few (`index.scale_lazy`: only when a name leads there; on
    transformers 6 of 61), and making it was 40% of the pair's cost."""
    from ..model.project import scale

    if roles == "d":
        return LATER, scale.summarize(source)
    return scale.summarize_both(source)


#: text index roles that put a file in its project's universe whatever the other files say
#: (`index.universe`: the BCE seeds and the optimizer, scaler and framework files)
_SEED_ROLES = frozenset("bohgfwn")


def summaries_ahead(source: str, roles: str, rules: Sequence[Any]) -> Any:
    """What a lint worker summarises of a file for the cross-file pass (`FileResult.summaries`),
    from its text index `roles`, so that the pass, one process after the pool, parses little:
    a file that may use a distributed API ("d") or clips gradients or runs a backward ("c"),
    when a selected rule reads the scale view, both summaries (`summaries_of`); a file whose
    roles put it in the universe whatever the project holds, its project summary; either
    `packed` (`unpacked` reads the pair back). None: the pass summarises the file itself if it
    ever asks."""
    from ..core.pyast import forget
    from .pipeline import gc_paused

    if ("d" in roles or "c" in roles) and reads_scale(rules):
        with gc_paused():  # an `ast` tree of the whole file, freed by reference counting
            made = packed(summaries_of(source, roles))
            forget()  # the lint's last reader of the file's tree: freed before the collector looks
            return made
    if _SEED_ROLES.intersection(roles):
        from ..model.project import summarize

        with gc_paused():
            made = packed((summarize(source), None))  # (the scale summary, if asked, is made then)
            forget()
            return made
    return None


def packed(pair: Tuple[Any, Any]) -> Any:
    """The summaries handed to the cross-file pass as one `bytes` object in marshal's format
    (`unpacked` reads them back; the cache stores the same data in the same format). Made
    inside `gc_paused`, so that the summary's objects die by reference counting before the
    collector looks: as live lists and dicts (10,000-40,000 objects for a model file) each
    summary was traversed by the young-generation collection ending its file's summaries,
    again by every older-generation collection while the lint went on, and was pickled
    object by object out of a pool worker; a bytes object is untracked by the collector and
    pickled whole. The pair itself when marshal cannot write it (never seen: summaries are
    plain data)."""
    import marshal

    try:
        return marshal.dumps(pair)
    except ValueError:
        return pair


def unpacked(made: Any) -> Any:
    """`FileResult.summaries` as the pair (summary, scale summary): `packed`'s bytes read back."""
    if isinstance(made, bytes):
        import marshal

        return marshal.loads(made)
    return made


@lru_cache(maxsize=None)
def _module_says(module: str, text: str) -> bool:
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
        with open(found.origin, encoding="utf-8") as fh:  # type: ignore[union-attr, arg-type]
            return text in fh.read()
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return False


def _defines_check_project(module: str) -> bool:
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
        with open(found.origin, encoding="utf-8") as fh:  # type: ignore[union-attr, arg-type]
            return "def check_project(" in fh.read()
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return True  # cannot tell without importing it


class Projects:
    """The projects a run's files belong to, and each project's files.

    A project's files are found by the same discovery as a run over its root;
    when the run was given the root (or a folder above it) they are the run's
    own files, so only a subset run walks the project again, and then not into
    the folders the run walked already (`walk`, the run's `WalkRecord`), whose
    files it knows, nor does it ask again what the run's listings answered.
    """

    def __init__(self, paths: Sequence[str], files: Sequence[str], config: Config, walk: "Optional[WalkRecord]" = None) -> None:
        self.config = config
        self._given = [os.path.abspath(p) for p in paths]
        self._spelled = list(paths)
        self._walk = walk
        roots = _Roots(walk)
        by_folder: Dict[str, Optional[str]] = {}  # folder -> its project root: asked once per folder
        #: root -> {absolute path: the path as the run spells it}
        self.groups: Dict[Optional[str], Dict[str, str]] = {}
        absolute = walk.abspath if walk is not None else os.path.abspath
        group: Dict[str, str] = {}
        last = None  # the folder of the file before: a walk gives a folder's files together
        for f in files:
            if f.endswith(".py"):
                full = absolute(f)
                folder = _parent(full)
                if folder != last:
                    root = by_folder[folder] if folder in by_folder else by_folder.setdefault(folder, roots.root(full))
                    group = self.groups.setdefault(root, {})
                    last = folder
                group[full] = f
        self._files: Dict[Optional[str], List[str]] = {}
        self._configs: Dict[str, List[str]] = {}

    def files(self, root: Optional[str]) -> List[str]:
        """Every Python file of the project at `root` (absolute paths, sorted)."""
        found = self._files.get(root)
        if found is None:
            members = self.groups.get(root, {})
            if root is None or any(root == g or root.startswith(g.rstrip(os.sep) + os.sep) for g in self._given):
                found = sorted(members)
            else:
                from .discovery import WalkRecord, discover

                # (root is absolute and normalized, so is every path found under it)
                record = WalkRecord()
                walked = {p for p in discover([root], self.config, reuse=self._walk, record=record) if p.endswith(".py")}
                found = sorted(walked | set(members))
                if root is not None:
                    # the config files this walk met, and those of the folders the run walked itself
                    prefix = root.rstrip(os.sep) + os.sep
                    mine = self._walk.configs if self._walk is not None else []
                    self._configs[root] = sorted(set(record.configs) | {p for p in mine if p.startswith(prefix)})
            self._files[root] = found
        return found

    def configs(self, root: Optional[str]) -> Optional[List[str]]:
        """The config files (`WalkRecord.configs`) the run's walk met inside the project at
        `root`, sorted: a DeepSpeed JSON the project ships and launches from outside its Python
        code (a shell script, an accelerate YAML, a README command). A finding in such a file is
        reported only by a run over a folder holding it (`spell_config`). A subset run (single
        files, a folder below the root) walks the project for its Python files (`files`) and
        notes the config files that walk meets: a launcher the project ships decides findings
        in the files it was given as in the whole run."""
        if root is None:
            return None
        if not any(root == g or root.startswith(g.rstrip(os.sep) + os.sep) for g in self._given):
            self.files(root)
            return self._configs.get(root)
        if self._walk is None:
            return None
        found = self._configs.get(root)
        if found is None:
            prefix = root.rstrip(os.sep) + os.sep
            found = self._configs[root] = sorted(p for p in self._walk.configs if p.startswith(prefix))
        return found

    def spell_config(self, path: str) -> Optional[str]:
        """How the run spells a config file (a DeepSpeed JSON, an accelerate YAML) one of its
        projects read for a finding: below a folder the run was given, else None (a run over
        single files reports only those files)."""
        for given, spelled in zip(self._given, self._spelled):
            if path.startswith(given.rstrip(os.sep) + os.sep) and os.path.isdir(given):
                return os.path.join(spelled, os.path.relpath(path, given))
        return None

    def others(self) -> List[str]:
        """The files of the run's projects that the run was not given."""
        out: List[str] = []
        for root, members in sorted(self.groups.items(), key=lambda kv: kv[0] or ""):
            out.extend(f for f in self.files(root) if f not in members)
        return out


def project_diagnostics(
    projects: Projects,
    rules: Sequence[Any],
    codes: FrozenSet[str],
    cache: Any = None,
    indexes: Optional[Dict[str, Dict[str, Any]]] = None,
    suppressed: Optional[List[Diagnostic]] = None,
    made: Optional[Dict[str, Any]] = None,
) -> List[Diagnostic]:
    """The cross-file diagnostics of the run's files (spelled as the run spells them), noqa
    applied. `indexes`: the text indexes the lint pass already computed, by absolute path;
    `made`: the summaries it computed (`FileResult.summaries`), by absolute path;
    `suppressed` gets the findings a `# noqa` silenced (for AMP900: `unused_noqa.discount`)."""
    out: List[Diagnostic] = []
    store = _Store(cache, indexes or {}, made)
    store.file_timeout = projects.config.file_timeout
    for root in sorted(projects.groups, key=lambda r: r or ""):
        members = projects.groups[root]
        for d in _project_findings(root, projects.files(root), rules, store, members, projects.configs(root)):
            spelled = members.get(d.filename)
            if spelled is None and d.data.get("config_file"):
                spelled = projects.spell_config(d.filename)
            if spelled is not None and d.code in codes:
                d.filename = spelled
                out.append(d)
    return _suppressed(out, projects.config, suppressed)


def _project_findings(
    root: Optional[str], files: List[str], rules: Sequence[Any], store: "_Store", members: Dict[str, str],
    configs: Optional[List[str]] = None,
) -> List[Diagnostic]:
    """Every cross-file finding of one project (absolute paths), reused from the cache when no
    file the model read last time has changed and, where the model looks for config files the
    code does not name, the walk met the same ones (`configs`: `Projects.configs`, None: not
    known) (a warm run then loads no rule, parses nothing and imports no module of the model)."""
    chosen, key = store.universe(root, files)
    if not chosen:
        return []
    reused = store.findings(root, chosen, configs)
    if reused is not None:
        return reused
    from ..model.project import Project

    anchored = any("d" in str(store.index(f)["r"]) for f in chosen)
    store.scale_wanted = {f for f in chosen if any(r in str(store.index(f)["r"]) for r in "dc")} if anchored else set()
    if anchored:
        from ..model.project.index import scale_lazy

        lazy = scale_lazy(chosen, files, root, store.index)  # summarised when a name in them is asked
    else:
        lazy = set()
    summaries = {}
    for f in chosen:
        if f in lazy:
            continue
        s = store.summary(f)
        if s is not None:
            summaries[f] = s
    found: List[Diagnostic] = []
    project = None
    for rule_cls in project_rules(rules):
        try:
            if project is None:
                project = Project(root, summaries, files=files, load=store.summary, registering=store.registering(root))
                project.scale_source = store.scale  # the wrapper rules' scale summaries, through the cache
                # the files that may use a distributed API: without one the wrapper rules read nothing
                project.scale_anchors = [f for f in chosen if "d" in str(store.index(f)["r"])]
                project.scale_files = sorted(store.scale_wanted)
                project.config_candidates = configs  # config files the code may not name (wrappers.py)
            found.extend(rule_cls().check_project(project))
        except Exception as exc:  # a bug must not stop the run: reported like a per-file one
            from .pipeline import internal_error

            found.append(internal_error(min(members), f"rule {rule_cls.code} ({rule_cls.name}) on the project model", exc))
            return found  # not cached: the next run reports it again
    read = sorted(set(project.summaries) | project.viewed | set(_configs_read(project))) if project is not None else chosen
    view = getattr(project, "_scale_view", None) if project is not None else None
    store.remember(root, chosen, key, read, found, configs, wanted=bool(getattr(view, "wants_configs", False)))
    if project is not None:
        _unlinked(project)
    return found


def _unlinked(project: Any) -> None:
    """Drop what the project model holds once its findings are made: the model and the wrapper
    rules' view point at each other (and the model's memos at both), so without this its
    summaries, memos and graph (on transformers ~190,000 lists, dicts and tuples) outlived the
    pass as a cycle, left for the collector to find by traversing every one of them."""
    for holder in (getattr(project, "_scale_view", None), project):
        attrs = getattr(holder, "__dict__", None)
        if isinstance(attrs, dict):
            attrs.clear()


def _configs_read(project: Any) -> List[str]:
    """The config files (DeepSpeed JSON, accelerate YAML) and sources the wrapper rules read:
    their bytes decide findings, so a change to one makes the recorded findings stale like a
    source edit."""
    view = getattr(project, "_scale_view", None)
    if view is None:
        return []
    # and the sources whose scale summaries were read without a project summary (`scale_lazy`)
    return sorted(view.configs_read | {p for p, s in view._scales.items() if s is not None})


def _suppressed(diagnostics: List[Diagnostic], config: Config, silenced: Optional[List[Diagnostic]] = None) -> List[Diagnostic]:
    """`# noqa` and per-file ignores, as for per-file findings; `silenced` gets what a `# noqa` dropped."""
    from .pipeline import apply_noqa, known_codes, read_file

    by_file: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(d.filename, []).append(d)
    out: List[Diagnostic] = []
    for path, found in by_file.items():
        ignored = config.ignored_for(path, known_codes()) if config.per_file_ignores else frozenset()
        found = [d for d in found if d.code not in ignored]
        source, _ = read_file(path)
        if source is not None:
            found = _underlined(found, source)
        kept = apply_noqa(found, source) if source is not None else found
        if silenced is not None and len(kept) < len(found):
            ids = {id(d) for d in kept}
            silenced.extend(d for d in found if id(d) not in ids)
        out.extend(kept)
    return out


def _underlined(found: List[Diagnostic], source: str) -> List[Diagnostic]:
    """The project model's spans (a whole call, from the summary) cut to the first row, as a
    per-file finding's are (`core.text.first_row_span`)."""
    if not any(d.end_location.row > d.location.row for d in found):
        return found
    from ..core.text import first_row_span, split_lines

    lines = split_lines(source)
    return [
        replace(d, end_location=first_row_span(lines[d.location.row - 1], d.location, d.end_location))
        if d.end_location.row > d.location.row and d.location.row <= len(lines) else d
        for d in found
    ]


def merge(per_file: Iterable[Diagnostic], cross: Iterable[Diagnostic]) -> List[Diagnostic]:
    """Per-file diagnostics plus the cross-file ones that do not repeat one at the same place.

    One bug, one finding, two ways:
    - a per-file finding that held only through a project-wide condition ("the project runs
      fp16 somewhere") and a cross-file one at the same place: the cross-file one, which names
      the actual cause, takes its message and related sites; the per-file fix and help stay;
    - a cross-file finding naming the same bug (`data["bug"]`) as a per-file one of the same
      rule in the same file (a resume helper that skips the scaler a per-file finding already
      says is never saved) joins it as a related site, with its `data["as_related"]` note."""
    kept = list(per_file)
    seen = {(d.filename, d.code, d.location): i for i, d in enumerate(kept)}
    bugs = {(d.filename, d.code, d.data.get("bug")): i for i, d in enumerate(kept) if d.data.get("bug")}
    for d in cross:
        key = (d.filename, d.code, d.location)
        i = seen.get(key)
        same_bug = bugs.get((d.filename, d.code, d.data.get("bug"))) if d.data.get("bug") else None
        if i is None and same_bug is not None:
            local = kept[same_bug]
            note = Related(d.location, d.end_location, str(d.data.get("as_related") or "another site"))
            kept[same_bug] = replace(local, related=(*local.related, note))
        elif i is None:
            seen[key] = len(kept)
            kept.append(d)
        elif kept[i].condition is not None and d.condition is None:
            local = kept[i]
            kept[i] = replace(
                local, message=d.message, severity=d.severity, related=d.related, condition=None,
                data={**local.data, **d.data}, help=local.help or d.help,
            )
        elif d.data.get("supersedes_local") and len(d.related) > len(kept[i].related):
            # the same finding, seen with the rest of the project: its wrapper or config in
            # another file (the wrapper rules, issue 23) adds related sites; the local fix stays
            local = kept[i]
            kept[i] = replace(local, message=d.message, severity=d.severity, related=d.related, data={**local.data, **d.data})
    return kept


def drop_unreached(
    diagnostics: List[Diagnostic], projects: "Projects", absolute: Callable[[str], str], cache: "Optional[Cache]" = None,
) -> List[Diagnostic]:
    """The diagnostics without those at a site that never runs (issue 22, `model/project/reach`:
    a branch a constant or a never-passed parameter's default excludes, an autocast such a
    value switches off, a file whose import of a project module fails). Calls count in every
    file of the run's projects. With a `cache`, the verdict is recorded under a key of every
    project file's bytes and of the findings asked about, so a warm run of an unchanged
    project parses nothing."""
    from .pipeline import SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE, read_file

    from .excerpt import PIECE_BYTES

    checked = [d for d in diagnostics if d.code not in (SYNTAX_ERROR_CODE, UNUSED_NOQA_CODE, "AMP000") and d.filename.endswith(".py")
               and _size(absolute(d.filename)) <= PIECE_BYTES]  # a huge file's CPython tree costs ~5 KB a line: its findings stay
    if not checked:
        return diagnostics
    root_of: Dict[str, Optional[str]] = {}
    files: Set[str] = set()
    for root, members in projects.groups.items():
        files.update(projects.files(root))
        for full in members:
            root_of[full] = root
    asked = [(absolute(d.filename), d.location.row, region_row_of(d)) for d in checked]
    key = _reach_key(cache, sorted(files), root_of, asked) if cache is not None else None
    entry = cache.get_raw("reach", "") if key is not None else None
    if entry and entry.get("key") == key and isinstance(entry.get("dropped"), list):
        gone = set(entry["dropped"])
        dropped = {id(d) for i, d in enumerate(checked) if i in gone}
    else:
        from ..model.project.reach import Reach

        reach = Reach(sorted(files), lambda p: read_file(p)[0])
        dropped = set()
        gone = set()
        for i, (d, (full, row, region)) in enumerate(zip(checked, asked)):
            try:
                why = reach.of(full, root_of.get(full)).why(row, region)
            except (RecursionError, MemoryError, ValueError, OSError):  # undecided: the finding stays
                why = None
            if why:
                dropped.add(id(d))
                gone.add(i)
        if key is not None:
            cache.put_raw("reach", "", {"key": key, "dropped": sorted(gone)})
    return [d for d in diagnostics if id(d) not in dropped] if dropped else diagnostics


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def region_row_of(d: Diagnostic) -> Optional[int]:
    """The row of the autocast a finding's cause is (`data["region_row"]`), if it names one."""
    row = d.data.get("region_row") if isinstance(d.data, dict) else None
    return row if isinstance(row, int) else None


def _reach_key(cache: "Cache", files: List[str], root_of: Dict[str, Optional[str]], asked: List[Tuple[str, int, Optional[int]]]) -> Optional[str]:
    """A digest of every project file's path, project and bytes (as the cache knows them now)
    and of the sites asked about; None when one file's bytes are not known."""
    from ..core.digest import blake2b

    h = blake2b(digest_size=16)
    for path in files:
        digest = cache.current_digest("lint", path)
        if digest is None:
            rel = os.path.relpath(path)
            digest = cache.current_digest("lint", rel) if rel != path else None
        if digest is None:
            return None
        h.update(f"{path}\0{root_of.get(path)}\0{digest}\0".encode("utf-8", "surrogateescape"))
    for full, row, region in asked:
        h.update(f"{full}\0{row}\0{region}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class _Store:
    """Text indexes and summaries by absolute path, through the run's cache when it has one."""

    #: seconds a big file's summary may take (the run's `file-timeout`; 0: no limit)
    file_timeout: float = 120.0

    def __init__(self, cache: Any, indexes: Dict[str, Dict[str, Any]], made: Optional[Dict[str, Any]] = None) -> None:
        self.cache = cache
        self._index: Dict[str, Dict[str, Any]] = dict(indexes)
        #: path -> (summary, scale summary) the lint pass computed for the file's text (marshalled
        #: where a wrapper rule's view read them: `wrappers.made_for`)
        self._made: Dict[str, Any] = dict(made or {})
        #: root -> the files registering to a registry (`index.registering`), found with its universe
        self._registering: Dict[Optional[str], List[str]] = {}
        #: the files whose scale summaries the wrapper rules will read (set per project): their
        #: summaries and scale summaries come from one parse
        self.scale_wanted: Set[str] = set()
        self._scale_made: Dict[str, Any] = {}

    def registering(self, root: Optional[str]) -> List[str]:
        return self._registering.get(root, [])

    def index(self, path: str) -> Dict[str, Any]:
        found = self._index.get(path)
        if found is None:
            from ..model.project import text_index

            found = self._linted(path) or self._cached("pindex", path, text_index) or {"r": "", "i": ""}
            self._index[path] = found
        return found

    def universe(self, root: Optional[str], files: List[str]) -> Tuple[List[str], Optional[str]]:
        """(the files the project model starts from, a key of every project file's bytes).
        `index.universe` reads the text index of every file; when no file of the project
        changed since the project's findings were recorded (same key), the universe recorded
        with them is the one it would compute, and no index is read (a warm run)."""
        key = self._files_key(files)
        entry = self.cache.get_raw("project", root or "") if self.cache is not None and key is not None else None
        if entry and entry.get("key") == key and isinstance(entry.get("universe"), list):
            self._registering[root] = list(entry.get("registering") or [])
            return entry["universe"], key
        from ..model.project import registering, universe

        chosen = universe(files, root, self.index)
        self._registering[root] = registering(files, self.index) if chosen else []
        return chosen, key if key is not None else self._files_key(files)

    def _files_key(self, files: List[str]) -> Optional[str]:
        """A digest of every file's path and bytes as the cache knows them now; None when
        one file's bytes are not known (not linted by this run, changed, never cached)."""
        if self.cache is None:
            return None
        from ..core.digest import blake2b

        h = blake2b(digest_size=16)
        for path in files:
            digest = self.cache.current_digest("lint", path)
            if digest is None:
                rel = os.path.relpath(path)
                digest = self.cache.current_digest("lint", rel) if rel != path else None
            if digest is None:
                return None
            h.update(f"{path}\0{digest}\0".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def findings(self, root: Optional[str], chosen: List[str], configs: Optional[List[str]] = None) -> Optional[List[Diagnostic]]:
        """The findings recorded for this project when it started from the same files, its walk
        met the same config files, and none of the files its model read has changed since."""
        if self.cache is None:
            return None
        from .cache import RACY_SECONDS, decode_diagnostic, file_digest, stat_key

        entry = self.cache.get_raw("project", root or "")
        if not entry or entry.get("universe") != chosen or (entry.get("registering") or []) != self.registering(root):
            return None
        if "configs" in entry and configs is not None and entry["configs"] != configs:
            return None  # a config file came or went (or was not known): one the code never names may decide a finding
        for path, (mtime_ns, size, read_at, digest) in entry["files"].items():
            try:
                st = stat_key(os.stat(path))
                if st != (mtime_ns, size) or mtime_ns / 1e9 >= read_at - RACY_SECONDS:
                    if file_digest(read_bytes(path)) != digest:  # touched, or too recent: the bytes decide
                        return None
            except OSError:
                return None
        try:
            return [decode_diagnostic(d) for d in entry["diagnostics"]]
        except (KeyError, TypeError, ValueError):
            return None

    def remember(
        self, root: Optional[str], chosen: List[str], key: Optional[str], read: List[str], found: List[Diagnostic],
        configs: Optional[List[str]] = None, wanted: bool = False,
    ) -> None:
        """`wanted`: the model looked for the config files the code does not name; the entry
        then records those the walk met (`configs`; None: not known), which a later run must
        meet again to reuse it."""
        if self.cache is None:
            return
        from .cache import encode_diagnostic, file_digest, now, stat_key

        files = {}
        for path in read:
            try:
                st = stat_key(os.stat(path))
                files[path] = [*st, now(), file_digest(read_bytes(path))]
            except OSError:
                return
        try:
            diagnostics = [encode_diagnostic(d) for d in found]
        except Exception:  # a diagnostic the cache cannot hold: recompute next time
            return
        entry = {"universe": chosen, "key": key, "files": files, "diagnostics": diagnostics}
        if self.registering(root):
            entry["registering"] = self.registering(root)
        if wanted:
            entry["configs"] = list(configs) if configs is not None else None
        self.cache.put_raw("project", root or "", entry)

    def _linted(self, path: str) -> Optional[Dict[str, Any]]:
        """The index an earlier run's lint of the unchanged file recorded."""
        if self.cache is None:
            return None
        from .cache import stat_key

        for spelled in (path, os.path.relpath(path)):
            try:
                hit, _ = self.cache.lookup("lint", spelled, stat_key(os.stat(path)), count=False)
            except OSError:
                return None
            if hit is not None and hit.index is not None:
                return hit.index
        return None

    def _made_pair(self, path: str) -> Optional[Tuple[Any, Any]]:
        """(summary, scale summary) of the file as the lint pass computed them, if it did."""
        made = self._made.get(path)
        if isinstance(made, bytes):
            made = self._made[path] = unpacked(made)
        return made

    def summary(self, path: str) -> Optional[Dict[str, Any]]:
        from ..model.project import summarize

        pair = self._made_pair(path)
        if pair is not None and isinstance(pair[0], str):  # LATER: the lint made the scale summary only
            found = self._cached("summary", path, lambda text: {"s": summarize(text)})
        elif pair is not None:
            found = self._cached("summary", path, lambda text: {"s": pair[0]})
        elif path in self.scale_wanted:
            found = self._cached("summary", path, lambda text: {"s": self._both(path, text)})
        else:
            found = self._cached("summary", path, lambda text: {"s": summarize(text)})
        return found.get("s") if found else None

    def _both(self, path: str, text: str) -> Optional[Dict[str, Any]]:
        from ..model.project.scale import summarize_both

        summary, scale = summarize_both(text)
        self._scale_made[path] = scale
        return summary

    def scale(self, path: str) -> Optional[Dict[str, Any]]:
        """A file's scale summary (`model/project/scale.py`), read only in projects with a
        distributed API, cached by content like the summaries (made with the summary when
        that was computed in this run)."""
        from ..model.project.scale import summarize as scale_summary

        made = self._scale_made.pop(path, None)
        pair = self._made_pair(path) if made is None else None
        if pair is not None:
            made = pair[1]
        compute = (lambda text: {"s": made}) if made is not None else (lambda text: {"s": scale_summary(text)})
        found = self._cached("scale", path, compute)
        return found.get("s") if found else None

    def _cached(self, kind: str, path: str, compute: Callable[[str], Any]) -> Optional[Dict[str, Any]]:
        from .cache import file_digest, now, stat_key
        from .pipeline import decode_source

        st: Optional[Tuple[int, int]] = None
        known = None
        if self.cache is not None:
            try:
                st = stat_key(os.stat(path))
            except OSError:
                return None
            hit, known = self.cache.lookup(kind, path, st)
            if hit is not None:
                return hit
        read_at = now()
        try:
            data = read_bytes(path)  # never a pipe or device named like a source
        except OSError:
            return None
        digest = file_digest(data)
        if self.cache is not None and st is not None and known == digest:
            reused = self.cache.reuse(kind, path, st, read_at)
            if reused is not None:
                return reused
        from . import isolate

        try:
            text = decode_source(data)
            if isolate.confines(len(data)):
                # a big file's summary (CPython's parser, then a walk: minutes and gigabytes on
                # 10 MB) is bounded like its lint: the file's budget, the child's memory bound
                how, value = isolate.run_confined(compute, (text,), self.file_timeout)
                if how != "ok":
                    return None  # the project model goes on without it (its lint said why)
            else:
                value = compute(text)
        except (UnicodeDecodeError, SyntaxError, LookupError):
            return None
        if self.cache is not None and st is not None:
            self.cache.store(kind, path, st, digest, read_at, value)
        return value


def buffer_diagnostics(
    path: str, text: str, files: Sequence[str], rules: Sequence[Any], codes: FrozenSet[str], config: Config, cache: Any = None,
    silenced: Optional[List[Diagnostic]] = None,
) -> List[Diagnostic]:
    """The cross-file findings of the file `path` when its text is `text` (an editor's
    buffer, saved or not): what `amplint path` reports for it once saved. `files`: every
    Python file of its project (absolute). Conditions are left to the caller to resolve.
    `silenced` gets the findings a `# noqa` of `text` dropped."""
    me = os.path.abspath(path)
    store = _BufferStore(cache, me, text)
    project = sorted({*files, me})
    found = [d for d in _project_findings(project_root(me), project, rules, store, {me: path}) if d.filename == me and d.code in codes]
    for d in found:
        d.filename = path
    if config.per_file_ignores:
        from .pipeline import known_codes

        ignored = config.ignored_for(path, known_codes())
        found = [d for d in found if d.code not in ignored]
    from .pipeline import apply_noqa

    found = _underlined(found, text)
    kept = apply_noqa(found, text)
    if silenced is not None and len(kept) < len(found):
        ids = {id(d) for d in kept}
        silenced.extend(d for d in found if id(d) not in ids)
    return kept


class _BufferStore(_Store):
    """The project's files through the cache, but one file read from an editor's buffer:
    while that differs from the saved file, the universe and findings recorded for the
    project are neither reused nor recorded (they describe the saved text)."""

    def __init__(self, cache: Any, path: str, text: str) -> None:
        super().__init__(cache, {})
        self.path = path
        self.text = text
        from .pipeline import read_file

        self.saved = read_file(path)[0] == text
        self._own: List[Optional[Dict[str, Any]]] = []  # the buffer's summary, once made

    def index(self, path: str) -> Dict[str, Any]:
        if path == self.path and not self.saved and path not in self._index:
            from ..model.project import text_index

            self._index[path] = text_index(self.text)
        return super().index(path)

    def summary(self, path: str) -> Optional[Dict[str, Any]]:
        if path == self.path and not self.saved:
            if not self._own:
                from ..model.project import summarize

                self._own.append(summarize(self.text))
            return self._own[0]
        return super().summary(path)

    def scale(self, path: str) -> Optional[Dict[str, Any]]:
        if path == self.path and not self.saved:
            from ..model.project.scale import summarize as scale_summary

            return scale_summary(self.text)
        return super().scale(path)

    def universe(self, root: Optional[str], files: List[str]) -> Tuple[List[str], Optional[str]]:
        if self.saved:
            return super().universe(root, files)
        from ..model.project import registering, universe  # the record's universe is the saved text's

        chosen = universe(files, root, self.index)
        self._registering[root] = registering(files, self.index) if chosen else []
        return chosen, None

    def findings(self, *args: Any) -> Optional[List[Diagnostic]]:
        return super().findings(*args) if self.saved else None

    def remember(self, *args: Any, **kwargs: Any) -> None:
        if self.saved:
            super().remember(*args, **kwargs)
