"""Cross-file findings for an open Python buffer, as `amplint FILE` reports them.

The CLI builds the project model of a linted file's whole project (its root:
the nearest folder with a `pyproject.toml`, `setup.py`, `setup.cfg` or
`.git`) and reports the findings located in that file; their causes in other
files are `Diagnostic.related`, which the editor shows as related
information. Here the same model runs on the buffer's text
(`engine.crossfile.buffer_diagnostics`); the other files' text indexes and
summaries come from the cache shared with CLI runs, and while the buffer
equals the saved file the project's recorded findings are reused.

Building the model of a large project costs seconds, far more than a
keystroke may, so it runs on its own thread, off the lint path, when a
document is opened and whenever a file of its project is saved; its findings
are then carried along the buffer's edits (`relocate.py`: a finding whose
lines are edited is dropped until the next save). Findings that hold only
under a project fact (fp16 used somewhere, ...) are decided by the project's
saved files, as for `amplint FILE`. When a result changes what the document
shows, the server re-publishes it (`on_ready`). A project's file list is found
once and again after a save in it (a new file counts from its first save).

The same thread decides which of the buffer's sites never run (`model/project/reach`,
`engine.crossfile.drop_unreached` in the CLI: a constant branch, a parameter default no call
of the project passes, a failing project import). The verdict is made for the buffer's text
and the project's saved files, and carried along edits like the cross-file findings: a
finding on a line the verdict's text also has is dropped where the CLI would drop it; a
finding on an edited line stays until the next save decides again.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic
from .documents import Linted
from .project import Projects
from .relocate import relocate


class CrossFile:
    """The last cross-file findings of each open Python file, and the thread that makes them."""

    def __init__(self, projects: Callable[[], Projects], on_ready: Callable[[str], None] = lambda path: None, use_cache: bool = True) -> None:
        self.projects = projects  # the server's configurations and project facts
        self.on_ready = on_ready  # called on the model's thread with the path whose findings changed
        self.use_cache = use_cache
        #: path -> (the text the findings were computed for, the findings)
        self._known: Dict[str, Tuple[str, List[Diagnostic]]] = {}
        #: path -> (the text its reach verdict was made for, the verdict; None: undecided)
        self._reach: Dict[str, Tuple[str, Any]] = {}
        #: path -> the `# noqa` codes that silence its cross-file findings (`unused_noqa.used_keys`)
        self._used: Dict[str, Set[Tuple[str, str]]] = {}
        self._wanted: Dict[str, int] = {}  # path -> the generation of its newest request
        self._pending: set = set()  # paths whose newest request has not finished
        self._stale: set = set()  # paths opened or saved since their findings were made
        self._files: Dict[Tuple[Optional[str], Config], List[str]] = {}
        self._caches: Dict[Config, Any] = {}
        self._lock = threading.Lock()
        #: requests for the model's thread; a daemon, so a model still running never holds up exit
        self._queue: "queue.Queue[Optional[Tuple[str, str, str, Config, int]]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------ the lint path (cheap)

    def add(self, linted: Linted, path: str) -> Linted:
        """`linted` with its file's cross-file findings added (the last ones computed, moved
        onto the buffer's text); asks for new ones if the file was opened or saved."""
        if linted.error or linted.cells or not path.endswith(".py"):
            return linted
        me = os.path.abspath(path)
        with self._lock:
            known = self._known.get(me)
            reach = self._reach.get(me)
            used = self._used.get(me)
            if me in self._stale or (known is None and me not in self._pending):
                self._stale.discard(me)
                self._request(me, path, linted.source, linted.config)
        if reach is not None and reach[1] is not None:
            linted = _drop_unreached(linted, *reach)
        if used:  # AMP900 counts the comments that silence a cross-file finding as used, as the CLI does
            from ..engine.unused_noqa import discount

            diagnostics = discount(linted.diagnostics, linted.source, used)
            if len(diagnostics) != len(linted.diagnostics) or diagnostics != linted.diagnostics:
                linted = dataclasses.replace(linted, diagnostics=diagnostics)
        if known is None or not known[1]:
            return linted
        from ..engine.crossfile import merge

        cross = relocate(known[1], known[0], linted.source)
        if not cross:
            return linted
        return dataclasses.replace(linted, diagnostics=sorted(merge(linted.diagnostics, cross), key=Diagnostic.sort_key))

    def opened(self, path: str) -> None:
        """A document was opened: its findings are made again (the project may have changed)."""
        with self._lock:
            self._stale.add(os.path.abspath(path))

    def saved(self, path: str) -> List[str]:
        """`path` was saved: every open file of its project gets new findings. Returns those
        files (absolute), for the caller to lint again."""
        from ..engine.crossfile import project_root

        root = project_root(os.path.abspath(path))
        with self._lock:
            for key in [k for k in self._files if k[0] == root]:
                del self._files[key]
            same = [p for p in self._known if project_root(p) == root]
            self._stale.update(same)
            self._stale.add(os.path.abspath(path))
        return same

    def forget(self, path: str) -> None:
        with self._lock:
            me = os.path.abspath(path)
            self._known.pop(me, None)
            self._reach.pop(me, None)
            self._used.pop(me, None)
            self._wanted.pop(me, None)
            self._stale.discard(me)
            self._pending.discard(me)

    def shutdown(self) -> None:
        self._queue.put(None)

    # ------------------------------------------------------------ the model's thread

    def _request(self, me: str, path: str, text: str, config: Config) -> None:
        """(Lock held.) Make the findings of `text` on the model's thread; a newer request
        for the same file makes an older one that has not started yet a no-op."""
        generation = self._wanted.get(me, 0) + 1
        self._wanted[me] = generation
        self._pending.add(me)
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="amplint-project", daemon=True)
            self._thread.start()
        self._queue.put((me, path, text, config, generation))

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._make(*job)

    def _make(self, me: str, path: str, text: str, config: Config, generation: int) -> None:
        with self._lock:
            if self._wanted.get(me) != generation:
                return
        silenced: List[Diagnostic] = []
        try:
            found = self.findings(path, text, config, silenced)
        except Exception:  # a rule's crash is an AMP000 finding; this is a last resort (say, a vanished root)
            found = []
        try:
            reach = self.reach(path, text, config)
        except Exception:  # undecided: every finding stays
            reach = None
        if reach is not None:
            found = _drop_unreached_rows(found, reach, lambda row: row)
        from ..engine.unused_noqa import used_keys

        used = used_keys(silenced, text)
        with self._lock:
            if self._wanted.get(me) != generation:
                return
            self._pending.discard(me)
            old = self._known.get(me)
            self._known[me] = (text, found)
            old_reach = self._reach.get(me)
            self._reach[me] = (text, reach)
            old_used = self._used.get(me, set())
            self._used[me] = used
        before = old[1] if old is not None else []
        from ..model.project.reach import FileReach

        nothing = FileReach()  # an undecided verdict drops what an empty one drops: nothing
        reach_changed = ((old_reach[1] if old_reach is not None else None) or nothing) != (reach or nothing)
        if found != before or (found and old is not None and old[0] != text) or used != old_used or reach_changed:
            self.on_ready(me)  # what the document shows changes (else no new publication)

    def findings(self, path: str, text: str, config: Config, silenced: Optional[List[Diagnostic]] = None) -> List[Diagnostic]:
        """The cross-file findings located in the text `text` of `path`, their project-fact
        conditions decided by the project's saved files, as `amplint path` decides them
        (`silenced` gets those a `# noqa` dropped, their conditions decided too)."""
        from ..engine.crossfile import buffer_diagnostics, project_root
        from ..engine.pipeline import resolve_conditions, selected_rules
        from ..model.facts import ProjectFacts

        codes, rules = selected_rules(config)
        cache = self._cache(config)
        dropped: List[Diagnostic] = []
        found = buffer_diagnostics(path, text, self._project_files(project_root(os.path.abspath(path)), config), rules, codes, config, cache, dropped)
        if cache is not None:
            cache.save()  # writes only what the model computed anew (a read-only tree: nothing)
        if any(d.condition for d in (*found, *dropped)):
            facts = ProjectFacts.from_files(list(self.projects().file_facts(config).values()))
            found, dropped = resolve_conditions(found, facts, config), resolve_conditions(dropped, facts, config)
        if silenced is not None:
            silenced.extend(dropped)
        return found

    def reach(self, path: str, text: str, config: Config) -> Any:
        """What never runs in the text `text` of `path` (a `model.project.reach.FileReach`), the
        project's other files as saved, as `amplint path` decides it; None for a text over
        `PIECE_BYTES` (the CLI keeps a huge file's findings too)."""
        from ..engine.crossfile import project_root
        from ..engine.excerpt import PIECE_BYTES
        from ..engine.pipeline import read_file
        from ..model.project.reach import Reach

        if len(text) > PIECE_BYTES:
            return None
        me = os.path.abspath(path)
        root = project_root(me)
        files = sorted({*self._project_files(root, config), me})
        return Reach(files, lambda p: text if p == me else read_file(p)[0]).of(me, root)

    def _project_files(self, root: Optional[str], config: Config) -> List[str]:
        if root is None:
            return []  # a file outside any project is its own project (the buffer itself)
        key = (root, config)
        with self._lock:
            found = self._files.get(key)
        if found is None:
            from ..engine.discovery import discover

            found = sorted({os.path.abspath(p) for p in discover([root], config) if p.endswith(".py")})
            with self._lock:
                self._files[key] = found
        return found

    def _cache(self, config: Config) -> Any:
        if not self.use_cache:
            return None
        with self._lock:
            cache = self._caches.get(config)
        if cache is None:
            from ..engine.parallel import open_cache

            cache = open_cache(config)
            with self._lock:
                self._caches[config] = cache
        return cache


def _drop_unreached(linted: Linted, text: str, reach: Any) -> Linted:
    """`linted` without the findings at sites `reach` (made for `text`) says never run."""
    if not linted.diagnostics:
        return linted
    if linted.source == text:
        old_row: Callable[[int], Optional[int]] = lambda row: row
    else:
        from .relocate import LineMap

        old_row = LineMap(linted.source, text).row  # the buffer's row -> the verdict text's (None: edited)
    kept = _drop_unreached_rows(linted.diagnostics, reach, old_row)
    return linted if len(kept) == len(linted.diagnostics) else dataclasses.replace(linted, diagnostics=kept)


def _drop_unreached_rows(diagnostics: List[Diagnostic], reach: Any, old_row: Callable[[int], Optional[int]]) -> List[Diagnostic]:
    from ..engine.crossfile import region_row_of
    from ..engine.pipeline import PSEUDO_CODES

    kept = []
    for d in diagnostics:
        row = old_row(d.location.row) if d.code not in PSEUDO_CODES else None
        region = region_row_of(d)
        if row is not None and reach.why(row, old_row(region) if region is not None else None):
            continue
        kept.append(d)
    return kept
