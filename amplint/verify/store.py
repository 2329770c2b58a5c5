"""Verdicts kept across runs, so an editor can show what `amplint --verify` found.

`--verify` records each verdict here (the cache folder of the lint cache:
`--cache-dir`, `$AMPLINT_CACHE_DIR` or `.amplint_cache`); `amplint server`
reads it and shows the verdict on the finding it belongs to. Never imports
torch.

A verdict holds only while the code it ran is unchanged, so its key is a hash
of the rule code, the finding's place and data, and the digest of the whole
file the finding was linted from (for a notebook: its code cells as one
program). Any edit of the file retires every verdict of that file; that is
coarser than what ran (the flagged slice and the file's helpers it uses) but
never shows a verdict about code that is gone. One finding keeps one verdict
per environment (device type and torch version, each named in the record),
newest last; an `error` (the verifier failed) or a finding the budget skipped
says nothing about the code and is not recorded.

Trust: the store can come with anyone's repository, like the lint cache, so
it is trusted only under this user's cache key (`engine/cache.machine_key`):
its first line is a keyed BLAKE2b MAC of the rest, bound to the file name.
A store that fails the check, or does not load, is ignored and rewritten.
Records are still the user's code's output (summaries quote it): whoever
shows one escapes it for its medium.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from ..__version__ import __version__
from ..core.atomic import PlantedLink, write_in_folder
from ..core.safe_read import read_bytes
from ..engine.cache import GITIGNORE, cache_dir, code_fingerprint, machine_key

MAGIC = b"amplint-verdicts"
FORMAT = 1
#: verdicts that say something about the user's code
KEPT = ("confirmed", "not-reproduced", "inconclusive")
#: reasons that say the code never ran (nothing learned about it)
NOT_RUN = ("budget spent",)
#: fields of a verdict a record keeps
FIELDS = ("verdict", "reason", "method", "summary", "device", "device_type", "torch")
#: environments kept per finding, and findings kept per store (oldest dropped first)
PER_FINDING = 4
MAX_FINDINGS = 5000

Record = Dict[str, Any]


def content_of(path: str, text: str) -> Optional[str]:
    """The text a finding's positions refer to: the file itself, or a notebook's program
    (its code cells; the notebook's JSON differs between an editor and the saved file)."""
    if not path.endswith(".ipynb"):
        return text
    from ..engine.notebook import Notebook, NotebookError

    try:
        return Notebook.from_text(text).source
    except NotebookError:
        return None


def content_digest(path: str, text: str) -> Optional[str]:
    content = content_of(path, text)
    if content is None:
        return None
    return hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def read_source(path: str) -> Optional[str]:
    """A file's text as the linter read it (coding cookie, BOM); None if unreadable."""
    from ..engine.notebook import read_notebook_text
    from ..engine.pipeline import decode_source

    try:
        return read_notebook_text(path) if path.endswith(".ipynb") else decode_source(read_bytes(path))
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError):
        return None


class FileDigests:
    """The content digest of each file a run's findings came from, each file read once."""

    def __init__(self) -> None:
        self._known: Dict[str, Optional[str]] = {}

    def of(self, path: Any) -> Optional[str]:
        if not isinstance(path, str):
            return None
        if path not in self._known:
            text = read_source(path)
            self._known[path] = content_digest(path, text) if text is not None else None
        return self._known[path]


def finding_key(d: Any, digest: str) -> str:
    """The finding in the file whose content hashes to `digest`."""
    place = [d.location.row, d.location.column, d.end_location.row, d.end_location.column, d.cell]
    raw = json.dumps([d.code, digest, place, d.data], sort_keys=True, default=str)
    return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def record_of(verdict: Dict[str, Any]) -> Optional[Record]:
    """What a store keeps of a verdict (None: the verdict says nothing about the code)."""
    if not isinstance(verdict, dict) or verdict.get("verdict") not in KEPT or verdict.get("reason") in NOT_RUN:
        return None
    out = {k: verdict.get(k) for k in FIELDS}
    if not all(v is None or isinstance(v, str) for v in out.values()):
        return None
    out["at"] = time.time()
    return out


def _env(record: Record) -> Tuple[Any, Any]:
    return record.get("device_type") or record.get("device"), record.get("torch")


class VerdictStore:
    """One JSON file of verdicts per amplint build, in a project's cache folder."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, f"verdicts-{code_fingerprint()}.json")
        self.key = machine_key()  # None: nothing is read or written
        #: one-line notes for the user: links planted where the store keeps its files
        self.notes: List[str] = []
        if self.key is not None and os.path.islink(directory):  # a repository's `.amplint_cache` link
            self.notes.append(f"cache folder {directory} is a symbolic link; no verdict was kept")
            self.key = None
        self.entries: Dict[str, List[Record]] = {}
        self._changed: Dict[str, List[Record]] = {}
        self._stat: Optional[Tuple[int, ...]] = None
        self.reload()

    @classmethod
    def for_config(cls, config: Any, given: Optional[str] = None) -> "VerdictStore":
        """The store beside the lint cache of `config` (`given`: --cache-dir)."""
        return cls(cache_dir(given, config.root))

    # ------------------------------------------------------------ reading

    def reload(self) -> bool:
        """Read the store again if it changed on disk since it was read; True if it did."""
        try:
            st = os.stat(self.path)
            # a save replaces the file (a new inode, a new ctime): a run that wrote the same
            # number of bytes within one tick of the file system's coarse clock keeps mtime and size
            stat: Optional[Tuple[int, ...]] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        except OSError:
            stat = None
        if stat == self._stat:
            return False
        self._stat = stat
        self.entries = _read(self.path, self.key) if stat is not None else {}
        self.entries.update(self._changed)
        return True

    def lookup(self, d: Any, digest: Optional[str]) -> Optional[Record]:
        """The newest verdict recorded for the finding `d` of the file content `digest`."""
        if digest is None:
            return None
        found = self.entries.get(finding_key(d, digest))
        return dict(found[-1]) if found else None

    # ------------------------------------------------------------ writing

    def record(self, d: Any, digest: Optional[str], verdict: Dict[str, Any]) -> bool:
        """Keep `verdict` for the finding `d`; False when it is not kept."""
        rec = record_of(verdict)
        if rec is None or digest is None or self.key is None:
            return False
        key = finding_key(d, digest)
        kept = [r for r in self.entries.get(key, []) if _env(r) != _env(rec)]
        self.entries[key] = self._changed[key] = (kept + [rec])[-PER_FINDING:]
        return True

    def save(self) -> None:
        """Write atomically, merged with what other runs wrote meanwhile (newest wins)."""
        if not self._changed or self.key is None:
            return
        try:
            merged = _read(self.path, self.key)
            merged.update(self._changed)
            if len(merged) > MAX_FINDINGS:
                newest = sorted(merged, key=lambda k: max(r.get("at", 0) for r in merged[k]), reverse=True)
                merged = {k: merged[k] for k in newest[:MAX_FINDINGS]}
            payload = json.dumps({"format": FORMAT, "version": __version__, "entries": merged}, separators=(",", ":")).encode("utf-8")
            header = b"%s %d %s\n" % (MAGIC, FORMAT, _mac(self.key, os.path.basename(self.path), payload))
            # in the folder opened without following links: a link in the store's place is replaced
            self.notes.extend(write_in_folder(self.directory, os.path.basename(self.path), header + payload, gitignore=GITIGNORE))
        except PlantedLink as exc:
            self.notes.append(f"cache folder {exc.note()}; no verdict was kept")
            return
        except OSError:
            return  # a read-only tree or a full disk: the verdicts were still reported
        self._changed = {}
        self.entries = merged
        self._stat = None


def attach_cached(diagnostics: List[Any], folder: str) -> int:
    """Give each finding without a verdict the one an earlier `--verify` kept for its unchanged
    file, marked `cached` (for JSON output). Returns how many got one."""
    store = VerdictStore(folder)
    if not store.entries:
        return 0
    digests = FileDigests()
    n = 0
    for d in diagnostics:
        found = store.lookup(d, digests.of(d.filename)) if d.verification is None else None
        if found is not None:
            found.pop("at", None)
            d.verification = {**found, "cached": True}
            n += 1
    return n


def _mac(key: bytes, name: str, payload: bytes) -> bytes:
    """Bound to the store's kind and file name, so no other sealed file passes for it."""
    data = MAGIC + b"\0" + name.encode("utf-8") + b"\0" + payload
    return hashlib.blake2b(data, key=key, digest_size=32).hexdigest().encode("ascii")


def _read(path: str, key: Optional[bytes]) -> Dict[str, List[Record]]:
    """The entries of the store at `path` if its MAC proves `key`'s owner wrote it, else none."""
    if key is None:
        return {}
    try:
        raw = read_bytes(path, follow_symlinks=False)  # never a pipe or link planted under the store's name
    except OSError:
        return {}
    header, _, payload = raw.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC or parts[1] != b"%d" % FORMAT:
        return {}
    if not hmac.compare_digest(parts[2], _mac(key, os.path.basename(path), payload)):
        return {}
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if not isinstance(entries, dict):
        return {}
    return {
        k: v
        for k, v in entries.items()
        if isinstance(v, list) and v and all(isinstance(r, dict) and r.get("verdict") in KEPT for r in v)
    }
