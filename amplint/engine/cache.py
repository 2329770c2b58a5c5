"""Per-file results cached across runs in `.amplint_cache/`.

An entry is keyed by the file's path and the hash of its bytes, inside a store
whose name is a fingerprint of everything else a result depends on: the
amplint version, the code of amplint and of its rules (so an edited rule or an
editable install never serves stale results: `sources_fingerprint`), the
effective configuration and the selected codes. An entry holds what the engine needs after the file: its
diagnostics *before* project-fact conditions are resolved, and its facts, so
a warm run resolves conditions exactly as a cold one.

A lint entry may also hold the outcome of checking the fixes a plain run offers
(`fix.fixer.withdraw_failing_fixes`: the file fixed in memory and re-linted), per
check key (the project facts, the unsafe flag, whether the file is a library
module: the rest of what that outcome depends on is in the store's name), so a
warm run neither lints nor parses a file that offers a fix.

Warm runs do not read unchanged files: an entry also records the file's
(mtime_ns, size) and when it was read; a file whose stat is unchanged and
whose mtime is older than that read by more than `RACY_SECONDS` is trusted
(git's "racy clean" rule). Anything else is re-read and re-hashed, and reused
when the hash matches.

Safety: a cache folder can come with anyone's repository (committed, or in a
CI artifact restored at the same absolute path), so a store is trusted only if
this user on this machine wrote it: its first line carries a MAC of the rest,
a keyed BLAKE2b under a random key kept outside every project
(`$XDG_CACHE_HOME/amplint/cache-key`, else `~/.cache/amplint/cache-key`,
created 0600 on first use). A store from another machine, another user or a
hand-edited one fails the check and is ignored (and rewritten), so planted
entries can neither hide a finding nor change a message; where no key can be
kept (a read-only home), nothing is read from or written to the cache. The
store holds plain data (dicts, lists, strings, numbers) in `marshal`'s format
(never pickle: no code runs on load), one blob per kind inside one outer blob;
nothing is decoded before the MAC of the whole file proves this user wrote it.
marshal decodes the store several times faster than JSON, and a kind is
decoded only when the run first asks for it: a warm run whose project findings
are reused never decodes the summaries, and writes their blob back as it was
read. The interpreter's cache tag is part of the fingerprint, so a store is
read only by the interpreter that wrote it (marshal's format is CPython's).
The store is replaced atomically (`core/atomic.py`: a temporary file renamed
over the old one), so concurrent runs never see half a file (the last writer
wins; the loser only loses reuse): a run that changed entries re-reads the
store before writing only when another run replaced it since it was loaded.
A store that does not load (corrupt, truncated, another format) is ignored and
rewritten.
"""
from __future__ import annotations

import dataclasses
import marshal
import os
import sys
import time
from functools import lru_cache
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..__version__ import __version__
from ..core.atomic import PlantedLink, replace_atomically, write_in_folder
from ..core.digest import blake2b, compare_digest
from ..core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Related, Severity
from ..model.facts import FileFacts
from ..core.safe_read import read_bytes

ENV = "AMPLINT_CACHE_DIR"
DEFAULT_DIR = ".amplint_cache"
FORMAT = 6  # 2: a result keeps only what differs from "nothing found" (most files); 3: help, raw_rows;
#: 4: a MAC line first (the store is trusted only under this user's key); 5: a lint entry
#: may hold the outcome of checking its offered fixes (`FIX_CHECKS`); 6: marshal, one blob per kind
#: the first line of a store: this, the format, and the MAC of the rest
MAGIC = b"amplint-cache"
KEY_BYTES = 32
#: a file modified within this many seconds of when it was read is re-hashed
RACY_SECONDS = 2.0

Stat = Tuple[int, int]  # (mtime_ns, size)


def cache_dir(given: Optional[str], root: Optional[str]) -> str:
    """--cache-dir, else $AMPLINT_CACHE_DIR, else .amplint_cache beside the config (or in the cwd)."""
    if given:
        return given
    env = os.environ.get(ENV)
    if env:
        return env
    return os.path.join(root or os.getcwd(), DEFAULT_DIR)


def key_file() -> str:
    """Where this user's cache key lives: outside every project, in the user's cache folder."""
    base = os.environ.get("XDG_CACHE_HOME") or (os.environ.get("LOCALAPPDATA") if os.name == "nt" else None)
    return os.path.join(base or os.path.join(os.path.expanduser("~"), ".cache"), "amplint", "cache-key")


def machine_key() -> Optional[bytes]:
    """This user's random cache key, made on first use; None when it can be neither read nor made."""
    path = key_file()
    key = _read_key(path)
    if key is not None:
        return key
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".key-", dir=os.path.dirname(path))  # 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(KEY_BYTES))
            os.link(tmp, path)  # atomic, and never replaces a key a concurrent run made first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    except OSError:
        return None
    return _read_key(path)


def _read_key(path: str) -> Optional[bytes]:
    try:
        key = read_bytes(path)
    except OSError:
        return None
    return key if len(key) == KEY_BYTES else None


def _mac(key: bytes, name: str, payload: bytes) -> bytes:
    """The store's MAC, bound to its file name (the fingerprint of what produced it)."""
    return blake2b(name.encode("utf-8") + b"\0" + payload, key=key, digest_size=32).hexdigest().encode("ascii")


def file_digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def stat_key(st: os.stat_result) -> Stat:
    return (st.st_mtime_ns, st.st_size)


def code_fingerprint() -> str:
    """A fingerprint of amplint's own source and its rules' source (`sources_fingerprint`),
    remembered in this user's cache folder next to the cache key."""
    import amplint.rules

    # the `amplint` package folder, read off this file's place (amplint/engine/cache.py)
    # instead of importing the facade, which sits above every layer
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sources_fingerprint((package, *amplint.rules.__path__), os.path.join(os.path.dirname(key_file()), "code-fingerprints"))


#: how many (sources' stat -> fingerprint) pairs the memo keeps (one per install: venvs, checkouts)
MEMO_ENTRIES = 16


def sources_fingerprint(folders: Sequence[str], memo: Optional[str] = None, now: Optional[float] = None) -> str:
    """A hash of the version and of the bytes of the Python files under `folders` (hidden
    folders and `__pycache__` left out): the same for the same code wherever and whenever it
    is installed (a CI job's fresh install finds the cache its last job left). Reading and
    hashing ~180 files costs ~14 ms per run, so it is remembered in the file `memo` under
    the files' stat (`sources_stat`), as git trusts an index entry; a file changed within
    `RACY_SECONDS` of `now` leaves it unremembered."""
    stat = sources_stat(folders, now) if memo is not None else None
    known = _read_memo(memo) if stat is not None and memo is not None else {}
    found = known.get(stat) if stat is not None else None
    if found is not None:
        return found
    h = blake2b(digest_size=16)
    h.update(__version__.encode())
    for folder in folders:
        for rel, entry in _sources(folder, b""):
            h.update(rel + b"\0")
            try:
                h.update(read_bytes(entry.path))
            except OSError:
                pass
    found = h.hexdigest()
    if stat is not None and memo is not None:
        _write_memo(memo, known, stat, found)
    return found


def sources_stat(folders: Sequence[str], now: Optional[float] = None) -> Optional[str]:
    """A hash of where the Python files under `folders` are and of each one's stat (size,
    mtime, ctime, inode: an edit moves the ctime, which no tool sets back); None when one
    changed within `RACY_SECONDS` of `now` (a second edit in the same clock tick could keep
    every field)."""
    racy_before = (time.time() if now is None else now) - RACY_SECONDS
    h = blake2b(digest_size=16)
    h.update(__version__.encode())
    for folder in folders:
        h.update(b"\0%s\0" % os.fsencode(folder))
        for rel, entry in _sources(folder, b""):
            try:
                st = entry.stat()
            except OSError:
                h.update(rel + b"\0-\0")
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 >= racy_before:
                return None
            h.update(b"%s\0%d %d %d %d\0" % (rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return h.hexdigest()


def _sources(folder: str, rel: bytes) -> Iterable[Tuple[bytes, "os.DirEntry[str]"]]:
    """(path relative to the folder first given, entry) of each `.py` file, in a stable order."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    below = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if is_dir:
            if not entry.name.startswith((".", "__pycache__")):
                below.append(entry)
        elif entry.name.endswith(".py"):
            yield rel + os.fsencode(entry.name), entry
    for entry in below:
        yield from _sources(entry.path, rel + os.fsencode(entry.name) + b"/")


def _read_memo(path: str) -> Dict[str, str]:
    try:
        lines = read_bytes(path).decode("ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    pairs = (line.split(" ") for line in lines)
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def _write_memo(path: str, known: Dict[str, str], stat: str, found: str) -> None:
    kept = [(k, v) for k, v in known.items() if k != stat][-(MEMO_ENTRIES - 1) :] + [(stat, found)]
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        replace_atomically(path, "".join(f"{k} {v}\n" for k, v in kept).encode("ascii"), keep_mode=False, durable=False)
    except OSError:
        pass  # no memo: the next run reads the sources again


def fingerprint(config: Any, codes: Iterable[str], extra: str = "") -> str:
    """Everything but the file that decides a file's result."""
    h = blake2b(digest_size=12)
    tag = sys.implementation.cache_tag  # the store's format is this interpreter's marshal
    h.update(f"{FORMAT}\0{tag}\0{code_fingerprint()}\0{config!r}\0{sorted(codes)!r}\0{extra}".encode())
    return h.hexdigest()


# ------------------------------------------------------------------ encoding


class _NotCacheable(Exception):
    pass


def _enc(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_enc(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_enc(v) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or "__tuple__" in value:
            raise _NotCacheable
        return {k: _enc(v) for k, v in value.items()}
    raise _NotCacheable


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return [_dec(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_dec(v) for v in value["__tuple__"])
        return {k: _dec(v) for k, v in value.items()}
    return value


def encode_diagnostic(d: Diagnostic) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "severity": d.severity.value,
        "filename": d.filename,
        "location": [d.location.row, d.location.column],
        "end_location": [d.end_location.row, d.end_location.column],
        "noqa_row": d.noqa_row,
        "url": d.url,
        "condition": d.condition,
        "cell": d.cell,
        "data": _enc(d.data),
        "verification": _enc(d.verification),
        "help": d.help,
        "raw_rows": list(d.raw_rows) if d.raw_rows is not None else None,
        "fix": None,
        "related": [
            [r.location.row, r.location.column, r.end_location.row, r.end_location.column, r.message, r.filename, r.cell]
            for r in d.related
        ],
    }
    if d.fix is not None:
        out["fix"] = {
            "applicability": d.fix.applicability.value,
            "message": d.fix.message,
            "edits": [
                [e.location.row, e.location.column, e.end_location.row, e.end_location.column, e.content] for e in d.fix.edits
            ],
        }
    known = {f.name for f in dataclasses.fields(Diagnostic)}
    if known - set(out):  # a field this module does not know yet: do not cache
        raise _NotCacheable
    return out


def decode_diagnostic(o: Dict[str, Any]) -> Diagnostic:
    fix = None
    if o["fix"] is not None:
        f = o["fix"]
        fix = Fix(
            applicability=Applicability(f["applicability"]),
            message=f["message"],
            edits=tuple(Edit(Location(a, b), Location(c, d), content) for a, b, c, d, content in f["edits"]),
        )
    return Diagnostic(
        code=o["code"],
        name=o["name"],
        message=o["message"],
        severity=Severity(o["severity"]),
        filename=o["filename"],
        location=Location(*o["location"]),
        end_location=Location(*o["end_location"]),
        fix=fix,
        noqa_row=o["noqa_row"],
        url=o["url"],
        condition=o["condition"],
        cell=o["cell"],
        data=_dec(o["data"]),
        verification=_dec(o["verification"]),
        related=tuple(
            Related(Location(a, b), Location(c, e), message, filename, cell)
            for a, b, c, e, message, filename, cell in o.get("related", ())
        ),
        help=o.get("help"),
        raw_rows=tuple(o["raw_rows"]) if o.get("raw_rows") else None,
    )


def encode_result(result: Any) -> Optional[Dict[str, Any]]:
    """A FileResult as JSON, or None when it holds something JSON cannot round-trip."""
    from .pipeline import FileResult

    try:
        for name, default in _uncached_fields(FileResult):  # fields added later: cached only at their default
            if getattr(result, name) != default:
                return None
        diags = [encode_diagnostic(d) for d in result.diagnostics]
        # only what differs from a file that says nothing: a warm run reads one entry per file
        out: Dict[str, Any] = {}
        if diags:
            out["d"] = diags
        if result.facts != _NO_FACTS:
            out["f"] = {k: v for k, v in dataclasses.asdict(result.facts).items() if v}
        if result.parsed:
            out["p"] = True
        if result.index is not None and (result.index.get("r") or result.index.get("i")):
            out["x"] = _enc(result.index)
        if result.read != _NO_AMP_CODE:
            out["s"] = result.read
        if diags:
            import json  # the payload must be plain data (JSON's types): what a warm run decodes is what it was

            if decode_result(result.path, json.loads(json.dumps(out))).diagnostics != result.diagnostics:
                return None
        return out
    except (_NotCacheable, TypeError, ValueError):
        return None


#: FileResult fields for the rest of the run only, dropped from the entry: the summaries a
#: wrapper rule computed are cached as the project pass's own entries when it reads them; the
#: digest of the text linted is for this run's fix check
_TRANSIENT = frozenset({"summaries", "source_digest"})


@lru_cache(maxsize=None)
def _uncached_fields(result_class: type) -> Tuple[Tuple[str, Any], ...]:
    """(name, default) of the FileResult fields the cache does not keep."""
    kept = {"path", "diagnostics", "facts", "parsed", "index", "read", *_TRANSIENT}
    return tuple(
        (f.name, f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)  # type: ignore[misc]
        for f in dataclasses.fields(result_class)
        if f.name not in kept
    )


#: most files say nothing about precision: one shared (frozen) value for them
_NO_FACTS = FileFacts()
#: what most files are: no rule's gate passed (pipeline.NO_AMP_CODE, which sits above this module)
_NO_AMP_CODE = "no-amp"
#: the text index of a file with no project role and no import (never mutated)
_NO_INDEX: Dict[str, Any] = {"r": "", "i": ""}


def decode_result(path: str, o: Dict[str, Any]) -> Any:
    FileResult = _RESULT[0] if _RESULT else _result_class()  # (a warm run decodes one per file)
    diagnostics = o.get("d")
    facts = o.get("f")
    return FileResult(
        path=path,
        diagnostics=[decode_diagnostic(d) for d in diagnostics] if diagnostics else [],
        facts=FileFacts(**facts) if facts else _NO_FACTS,
        parsed=bool(o.get("p")),
        index=o.get("x", _NO_INDEX) if path.endswith(".py") else None,
        read=o.get("s", _NO_AMP_CODE),
    )


#: pipeline.FileResult, once imported (pipeline sits above this module)
_RESULT: list = []


def _result_class() -> Any:
    from .pipeline import FileResult

    _RESULT[:] = [FileResult]
    return FileResult


# ------------------------------------------------------------------ the store


class Cache:
    """One store (one JSON file) per fingerprint; entries per (kind, path).

    kind: "lint" (a file's rule results), "facts" (a file parsed only for its
    project facts), or one of `RAW_KINDS`: the project model's text index and
    summary of a file (`amplint.crossfile`), JSON data stored as it is.
    """

    def __init__(self, directory: str, fingerprint: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, f"amplint-{fingerprint}.store")
        self.entries: Dict[str, Dict[str, list]] = _Entries()
        #: the store file as this run loaded it (device, inode, size, mtime): unchanged at save, not re-read
        self._loaded: Optional[Tuple[int, int, int, int]] = None
        self._changed: Dict[str, Dict[str, list]] = _empty()
        self.hits = 0
        self.misses = 0
        self.key = machine_key()  # None: no cache this run (nothing read, nothing written)
        #: one-line notes for the user: links planted where the cache keeps its files
        self.notes: List[str] = []
        if self.key is not None and os.path.islink(directory):  # a repository's `.amplint_cache` link
            self.notes.append(f"cache folder {directory} is a symbolic link (to {_link_target(directory)}); the cache was not used")
            self.key = None
        #: RAW_KINDS entries (text indexes, summaries) computed and reused this run, by kind;
        #: `hits` and `misses` count files linted (or read for facts)
        self.built: Dict[str, int] = {}
        self.reused: Dict[str, int] = {}
        #: path -> the digest of its bytes as this run found them (a stat hit, a reuse, a store)
        self._current: Dict[str, str] = {}
        self._load()

    def _load(self) -> None:
        self.entries, self._loaded = _load_store(self.path, self.key)

    # an entry: [mtime_ns, size, digest, read_at (seconds), encoded result]

    def lookup(self, kind: str, path: str, st: Optional[Stat], count: bool = True) -> Tuple[Optional[Any], Optional[str]]:
        """(the result if the file is unchanged by its stat, else None; the digest on record).
        `count=False`: a look that is not this run's use of the entry (no hit counted)."""
        entry = self.entries[kind].get(path)
        if entry is None:
            return None, None
        digest, payload = entry[2], entry[4]
        if _unchanged(entry, st):
            try:
                found = _decode(kind, path, payload)
            except (KeyError, TypeError, ValueError):
                return None, digest
            if count:
                self._hit(kind)
            self._current[path] = digest
            return found, digest
        return None, digest

    def current_digest(self, kind: str, path: str) -> Optional[str]:
        """The digest of the file's bytes now: as this run found them, else the one on record
        when the file is unchanged by its stat (nothing decoded); None when not known."""
        found = self._current.get(path)
        if found is not None:
            return found
        entry = self.entries[kind].get(path)
        if entry is None:
            return None
        try:
            st = stat_key(os.stat(path))
        except OSError:
            return None
        mtime_ns, size, digest, read_at = entry[:4]
        if (mtime_ns, size) == st and mtime_ns / 1e9 < read_at - RACY_SECONDS:
            self._current[path] = digest
            return digest
        return None

    def reuse(self, kind: str, path: str, st: Stat, read_at: float) -> Optional[Any]:
        """The stored result of a file whose bytes hash to the recorded digest."""
        entry = self.entries[kind].get(path)
        if entry is None:
            return None
        try:
            result = _decode(kind, path, entry[4])
        except (KeyError, TypeError, ValueError):
            return None
        self._hit(kind)
        self._put(kind, path, [st[0], st[1], entry[2], read_at, entry[4]])
        self._current[path] = entry[2]
        return result

    def get_raw(self, kind: str, key: str) -> Optional[Dict[str, Any]]:
        """A RAW_KINDS entry stored under a key that is not a file (a project's findings)."""
        entry = self.entries[kind].get(key)
        return entry[4] if entry is not None else None

    def put_raw(self, kind: str, key: str, payload: Dict[str, Any]) -> None:
        self._put(kind, key, [0, 0, "", 0.0, payload])

    def memo(self, kind: str) -> "RawMemo":
        """`get(key)`/`put(key, payload)` of one RAW kind, for a memo kept by a lower layer
        (`model.embedded.remembered`: the walks of library copies, "walks")."""
        return RawMemo(self, kind)

    def fix_check(self, path: str, key: str, st: Optional[Stat] = None, digest: Optional[str] = None) -> Optional[list]:
        """The recorded outcome of checking the fixes of `path`'s lint entry under `key`, if
        the file is unchanged: by its stat (`st`, as in `lookup`) or by its bytes' `digest`."""
        entry = self.entries["lint"].get(path)
        if entry is None:
            return None
        unchanged = digest == entry[2] if digest is not None else _unchanged(entry, st)
        checks = entry[4].get(FIX_CHECKS)
        outcome = checks.get(key) if unchanged and isinstance(checks, dict) else None
        return outcome if isinstance(outcome, list) else None

    def record_fix_check(self, path: str, digest: str, key: str, outcome: list) -> None:
        """Keep `outcome` with `path`'s lint entry when that entry is of the bytes checked."""
        entry = self.entries["lint"].get(path)
        if entry is None or entry[2] != digest:
            return
        payload = dict(entry[4])
        checks = payload.get(FIX_CHECKS)
        payload[FIX_CHECKS] = {**(checks if isinstance(checks, dict) else {}), key: outcome}
        self._put("lint", path, [*entry[:4], payload])

    def _hit(self, kind: str) -> None:
        if kind in RAW_KINDS:
            self.reused[kind] = self.reused.get(kind, 0) + 1
        else:
            self.hits += 1

    def store(self, kind: str, path: str, st: Stat, digest: str, read_at: float, result: Any) -> None:
        if kind in RAW_KINDS:  # not a file linted again: counted apart
            self.built[kind] = self.built.get(kind, 0) + 1
        else:
            self.misses += 1
        payload = result if kind in RAW_KINDS else encode_result(result)
        if not isinstance(payload, dict):
            self.entries[kind].pop(path, None)
            return
        self._put(kind, path, [st[0], st[1], digest, read_at, payload])
        self._current[path] = digest

    def _put(self, kind: str, path: str, entry: list) -> None:
        self.entries[kind][path] = entry
        self._changed[kind][path] = entry

    def save(self) -> None:
        """Write the store atomically, merging entries another run wrote meanwhile."""
        if not any(self._changed.values()) or self.key is None:
            return
        try:
            if self._loaded is not None and _file_id(self.path) == self._loaded:
                merged = self.entries  # no other run replaced the store: it holds every change already
            else:
                merged, _ = _load_store(self.path, self.key)
                for kind, changed in self._changed.items():
                    if changed:
                        merged[kind].update(changed)
            payload = encode_store(merged)
            header = b"%s %d %s\n" % (MAGIC, FORMAT, _mac(self.key, os.path.basename(self.path), payload))
            # a store is made anew in the folder opened without following links (a folder planted
            # as a link is refused, a link in the store's place replaced, the .gitignore never
            # written through one); not fsynced: a torn store fails its MAC
            self.notes.extend(write_in_folder(self.directory, os.path.basename(self.path), header + payload, gitignore=GITIGNORE))
        except PlantedLink as exc:
            self.notes.append(f"cache folder {exc.note()}; the cache was not written")
            return
        except (OSError, ValueError):  # a read-only tree, a full disk (or data marshal refuses): no cache
            return
        self.entries, self._loaded = merged, None  # a later save re-reads what others wrote since
        self._changed = _empty()


class RawMemo:
    """One RAW kind of a cache as a memo: payloads (dicts of plain data) by key."""

    def __init__(self, cache: Cache, kind: str) -> None:
        self.cache, self.kind = cache, kind

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        return self.cache.get_raw(self.kind, key) if self.cache.key is not None else None

    def put(self, key: str, payload: Dict[str, Any]) -> None:
        if self.cache.key is not None:
            self.cache.put_raw(self.kind, key, payload)


#: the key, in a lint entry's payload, of its fix checks: {check key: outcome}
FIX_CHECKS = "c"
#: kinds whose payload is JSON data kept as it is (not a FileResult)
RAW_KINDS = ("pindex", "summary", "project", "scale", "walks", "reach")


def _unchanged(entry: list, st: Optional[Stat]) -> bool:
    """Whether a file whose stat is `st` is trusted unchanged since `entry` (git's racy-clean rule)."""
    mtime_ns, size, _, read_at, _ = entry
    return st is not None and (mtime_ns, size) == st and mtime_ns / 1e9 < read_at - RACY_SECONDS


def _empty() -> Dict[str, Dict[str, list]]:
    return {kind: {} for kind in KINDS}


#: every kind of entry, in the order a store holds them
KINDS = ("lint", "facts", *RAW_KINDS)


def _decode(kind: str, path: str, payload: Dict[str, Any]) -> Any:
    return payload if kind in RAW_KINDS else decode_result(path, payload)


class _Entries(dict):
    """A store's entries by kind ({kind: {path: entry}}), each kind decoded from its blob
    on first use; `blobs` holds the kinds not decoded yet, written back as they are."""

    def __init__(self, blobs: Optional[Dict[str, bytes]] = None) -> None:
        super().__init__()
        self.blobs: Dict[str, bytes] = blobs or {}

    def __missing__(self, kind: str) -> Dict[str, list]:
        if kind not in KINDS:
            raise KeyError(kind)
        # (a thread that asks meanwhile decodes the same blob; the first one kept wins)
        found = self.setdefault(kind, _decode_kind(self.blobs.get(kind)))
        self.blobs.pop(kind, None)
        return found


def _decode_kind(blob: Optional[bytes]) -> Dict[str, list]:
    """The well-formed entries of one kind's blob (none when it does not decode)."""
    if blob is None:
        return {}
    try:
        entries = marshal.loads(blob)
    except (ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {
        p: e
        for p, e in entries.items()
        if isinstance(p, str) and isinstance(e, list) and len(e) == 5 and isinstance(e[0], int) and isinstance(e[1], int) and isinstance(e[2], str) and isinstance(e[3], (int, float)) and isinstance(e[4], dict)
    }


def encode_store(entries: Dict[str, Dict[str, list]]) -> bytes:
    """A store's payload (what its MAC covers): the kinds not decoded are written as read."""
    blobs = getattr(entries, "blobs", {})
    kinds = {}
    for kind in KINDS:
        if dict.__contains__(entries, kind):
            kinds[kind] = marshal.dumps(dict.__getitem__(entries, kind))
        elif kind in blobs:
            kinds[kind] = blobs[kind]
    return marshal.dumps({"format": FORMAT, "version": __version__, "kinds": kinds})


def _file_id(path: str) -> Optional[Tuple[int, int, int, int]]:
    """What tells one version of a file from another: a replaced store is a new inode."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_store(path: str, key: Optional[bytes]) -> Dict[str, Dict[str, list]]:
    """The entries of the store at `path` if its MAC proves `key`'s owner wrote it, else none."""
    return _load_store(path, key)[0]


def _load_store(path: str, key: Optional[bytes]) -> Tuple["_Entries", Optional[Tuple[int, int, int, int]]]:
    """(`_read_store`'s entries, the file's id as read: taken before reading, so a store
    replaced meanwhile reads as changed at save)."""
    empty = _Entries()
    if key is None:
        return empty, None
    loaded = _file_id(path)
    try:
        raw = read_bytes(path, follow_symlinks=False)  # a planted pipe or link named like a store is never opened
    except OSError:
        return empty, None
    header, _, payload = raw.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC or parts[1] != b"%d" % FORMAT:
        return empty, loaded
    if not compare_digest(parts[2], _mac(key, os.path.basename(path), payload)):
        return empty, loaded  # written by another machine or user, or edited: never trusted
    try:
        data = marshal.loads(payload)  # only now: these are bytes this user's amplint wrote
    except (ValueError, EOFError, TypeError):
        return empty, loaded
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("kinds"), dict):
        return empty, loaded
    return _Entries({k: v for k, v in data["kinds"].items() if k in KINDS and isinstance(v, bytes)}), loaded


#: the `.gitignore` amplint makes in a cache folder that has none
GITIGNORE = b"# created by amplint\n*\n"


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def now() -> float:
    return time.time()
