"""A cache that arrives with the code is never trusted (issue 12 item 6).

The attacker lints the project on their machine, edits the store (a finding hidden, a
message rewritten) and re-authenticates it with their own key, then commits
`.amplint_cache/` next to the code. The victim clones the repository to the same
absolute path (as CI does) and runs amplint: the findings must equal a `--no-cache`
run. Two "machines" are two user cache folders (XDG_CACHE_HOME), each with its own key.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from amplint.engine.cache import FORMAT, MAGIC, _mac, _read_store, encode_store

CLIP = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
MASK = "import torch\nmodel = model.half()\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"
AMPLINT = [sys.executable, "-c", "import sys; from amplint._start import main; sys.exit(main())"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _amplint(root, machine, *args):
    env = {k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(machine)
    out = subprocess.run([*AMPLINT, "--isolated", "--output-format", "json", "--jobs", "1", *args, "."],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return sorted((os.path.basename(d["filename"]), d["code"], d["location"]["row"], d["location"]["column"], d["message"]) for d in json.loads(out.stdout))


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True)


def _key(machine) -> bytes:
    with open(os.path.join(machine, "amplint", "cache-key"), "rb") as fh:
        return fh.read()


def _store(root) -> str:
    (name,) = [n for n in os.listdir(root / ".amplint_cache") if n.endswith(".store")]
    return str(root / ".amplint_cache" / name)


def _write_store(path, key, entries) -> None:
    payload = encode_store(entries)
    mac = _mac(key, os.path.basename(path), payload)
    with open(path, "wb") as fh:
        fh.write(b"%s %d %s\n" % (MAGIC, FORMAT, mac) + payload)


def _forge(path, key) -> None:
    """Hide train.py's finding and rewrite attend.py's message, then sign with `key`."""
    entries = _read_store(path, key)
    assert set(os.path.basename(p) for p in entries["lint"]) == {"train.py", "attend.py"}
    for p, entry in entries["lint"].items():
        if p.endswith("train.py"):
            entry[4] = {}
        else:
            for d in entry[4]["d"]:
                d["message"] = "all good, nothing to see"
    _write_store(path, key, entries)


@pytest.fixture
def machines(tmp_path):
    attacker, victim = tmp_path / "attacker-home", tmp_path / "victim-home"
    attacker.mkdir()
    victim.mkdir()
    return attacker, victim


def test_forged_cache_committed_with_the_code_is_not_used(tmp_path, machines):
    attacker, victim = machines
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(CLIP)
    (root / "attend.py").write_text(MASK)
    truth = _amplint(root, attacker, "--no-cache")
    assert {(f, c) for f, c, *_ in truth} == {("train.py", "AMP101"), ("attend.py", "AMP301")}

    assert _amplint(root, attacker) == truth  # writes .amplint_cache/, signed with the attacker's key
    _forge(_store(root), _key(attacker))
    forged = _amplint(root, attacker)
    # the forgery works where its key is trusted: the test can tell a used cache from an unused one
    assert forged != truth and not any(c == "AMP101" for _, c, *_ in forged)

    _git(root, "init", "-q")
    _git(root, "add", "-f", ".")  # .amplint_cache/ too, past its own .gitignore
    _git(root, "commit", "-qm", "code and a planted cache")
    origin = tmp_path / "origin"
    root.rename(origin)
    subprocess.run(["git", "clone", "-q", str(origin), str(root)], check=True, capture_output=True)
    assert os.path.isfile(_store(root))  # checked out at the same absolute path, as on CI

    assert _amplint(root, victim) == truth
    assert _amplint(root, victim) == truth  # and warm, from the victim's own rewritten store
    assert _read_store(_store(root), _key(victim))["lint"]


@pytest.mark.parametrize("how", ["unsigned", "bad-mac", "old-format", "other-store-name"])
def test_stores_without_this_machines_mac_are_ignored(tmp_path, machines, how):
    attacker, victim = machines
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(CLIP)
    (root / "attend.py").write_text(MASK)
    truth = _amplint(root, victim, "--no-cache")
    _amplint(root, victim)
    path = _store(root)
    key = _key(victim)
    _forge(path, key)
    assert _amplint(root, victim) != truth  # signed with the victim's own key: trusted
    entries = _read_store(path, key)
    payload = encode_store(entries)
    if how == "unsigned":
        data = payload
    elif how == "bad-mac":
        data = b"%s %d %s\n" % (MAGIC, FORMAT, b"0" * 64) + payload
    elif how == "old-format":
        data = b"%s %d %s\n" % (MAGIC, FORMAT - 1, _mac(key, os.path.basename(path), payload)) + payload
    else:  # a genuine MAC of another store, replayed under this store's name
        data = b"%s %d %s\n" % (MAGIC, FORMAT, _mac(key, "amplint-other.json", payload)) + payload
    with open(path, "wb") as fh:
        fh.write(data)
    assert _amplint(root, victim) == truth


def test_no_key_no_cache(tmp_path):
    """Where no key can be kept, nothing is read from or written to the cache."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(CLIP)
    home = tmp_path / "not-a-folder"
    home.write_text("")  # the key's folder cannot be made under a file
    assert {c for _, c, *_ in _amplint(root, home)} == {"AMP101"}
    assert not (root / ".amplint_cache").exists()


# ------------------------------------------------------------------ links planted where the cache lives (issue 24 item 4)


def _run_plain(root, machine, *args):
    """A plain `amplint train.py attend.py` (the default cache folder), its findings and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(machine)
    out = subprocess.run([*AMPLINT, "--isolated", "--output-format", "json", "--jobs", "1", *args, "train.py", "attend.py"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    found = sorted((os.path.basename(d["filename"]), d["code"], d["location"]["row"]) for d in json.loads(out.stdout))
    return found, out.stderr


def _tree(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


def _repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(CLIP)
    (root / "attend.py").write_text(MASK)
    return root


def test_a_cache_folder_shipped_as_a_link_is_not_written_through(tmp_path, machines):
    _, victim = machines
    root = _repo(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".amplint_cache").symlink_to(elsewhere)
    truth, _ = _run_plain(root, victim, "--no-cache")
    for _ in range(2):  # and again: nothing was stored there to be read back
        found, err = _run_plain(root, victim)
        assert found == truth
        assert _tree(elsewhere) == [], "amplint wrote through the planted link"
        lines = [line for line in err.splitlines() if "symbolic link" in line]
        assert len(lines) == 1 and lines[0].startswith("amplint: warning: cache folder ") and "not used" in lines[0], err
    assert os.path.islink(root / ".amplint_cache")


def test_a_dangling_gitignore_link_in_the_cache_folder_creates_nothing(tmp_path, machines):
    _, victim = machines
    root = _repo(tmp_path)
    target = tmp_path / "outside" / "created-by-amplint"
    target.parent.mkdir()
    (root / ".amplint_cache").mkdir()
    (root / ".amplint_cache" / ".gitignore").symlink_to(target)  # as root: any path, a file under /etc
    truth, _ = _run_plain(root, victim, "--no-cache")
    found, err = _run_plain(root, victim)
    assert found == truth
    assert not os.path.lexists(target) and os.listdir(target.parent) == [], "amplint created the link's target"
    assert os.path.islink(root / ".amplint_cache" / ".gitignore")
    assert any(line.startswith("amplint: warning: ") and ".gitignore is a symbolic link" in line for line in err.splitlines()), err
    assert _read_store(_store(root), _key(victim))["lint"]  # the store itself was written, in the real folder


def test_a_store_planted_as_a_link_is_replaced_not_followed(tmp_path, machines):
    _, victim = machines
    root = _repo(tmp_path)
    truth, _ = _run_plain(root, victim)  # makes the store, under its real name
    store = _store(root)
    os.unlink(store)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    os.symlink(outside, store)
    found, _ = _run_plain(root, victim)
    assert found == truth
    assert outside.read_text() == "keep me\n"
    assert not os.path.islink(store) and _read_store(store, _key(victim))["lint"]


def test_the_verdict_store_is_not_written_through_links(tmp_path, machines, monkeypatch):
    from amplint.core.atomic import PlantedLink, write_in_folder
    from amplint.verify.store import VerdictStore

    _, victim = machines
    monkeypatch.setenv("XDG_CACHE_HOME", str(victim))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "cache"
    link.symlink_to(elsewhere)
    store = VerdictStore(str(link))
    assert store.key is None and len(store.notes) == 1 and "symbolic link" in store.notes[0]
    with pytest.raises(PlantedLink):
        write_in_folder(str(link), "x.json", b"{}")
    assert os.listdir(elsewhere) == []
