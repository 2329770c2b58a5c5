"""What a warm run and a one-file run may skip (issue 13 item 6), proved by counts, not times.

- the store is decoded only after its MAC checks out, one kind at a time as the run asks
  (a warm run whose project findings are reused never decodes the summaries), and it is
  not read again at save unless another run replaced it;
- the code fingerprint (a hash of amplint's sources' bytes) is remembered under their stat,
  so a warm run reads none of them, yet any edit changes it (a racy file is not remembered);
- a warm run imports no module it does not use (the project model, OpenSSL, difflib...).
"""
from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint import Config
from amplint.engine import cache as cache_module
from amplint.engine.cache import Cache, sources_fingerprint, sources_stat
from amplint.engine.parallel import open_cache
from amplint.engine.run import lint_paths

CLIP = (
    "import torch\nscaler = torch.amp.GradScaler('cuda')\nscaler.scale(loss).backward()\n"
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)
# a project whose cross-file pass finds something (AMP303: a BCE loss module used under autocast)
PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "bce_loss_module"


def _old(path, seconds=60):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9))


def _project(tmp_path, clip=True):
    root = tmp_path / "proj"
    shutil.copytree(PROJECT, root)
    if clip:
        (root / "clip.py").write_text(CLIP)
    for f in root.rglob("*"):
        _old(f)
    return root


class _Loads:
    """Counts marshal.loads calls made by the cache module."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = marshal.loads

        def loads(data, *args):
            self.calls += 1
            return real(data, *args)

        monkeypatch.setattr(cache_module.marshal, "loads", loads)


def _cold_run(tmp_path):
    """(project root, config, the cache a cold run over it saved, the run's result)."""
    root = _project(tmp_path)
    config = Config()
    cache = open_cache(config, str(tmp_path / "cache"))
    result = lint_paths([str(root)], config, cache=cache)
    cache.save()
    return root, config, cache, result


def test_nothing_is_decoded_before_the_mac_checks_out(tmp_path, monkeypatch):
    _, _, c, _ = _cold_run(tmp_path)
    with open(c.path, "rb") as fh:
        data = fh.read()
    header, _, payload = data.partition(b"\n")
    with open(c.path, "wb") as fh:
        fh.write(header + b"\n" + payload[:-1] + bytes([payload[-1] ^ 1]))  # one bit of the payload
    loads = _Loads(monkeypatch)
    again = Cache(c.directory, os.path.basename(c.path)[len("amplint-") : -len(".store")])
    assert loads.calls == 0 and not again.entries["lint"]


def test_a_warm_run_decodes_only_the_kinds_it_uses_and_writes_nothing(tmp_path, monkeypatch):
    root, config, cold_cache, cold = _cold_run(tmp_path)
    assert cold_cache.built.get("summary"), "the cold run summarised files for the project model"
    stat = os.stat(cold_cache.path)

    warm_cache = open_cache(config, str(tmp_path / "cache"))
    loads = _Loads(monkeypatch)
    warm = lint_paths([str(root)], config, cache=warm_cache)
    warm_cache.save()
    assert warm.diagnostics == cold.diagnostics and any(d.code == "AMP303" for d in warm.diagnostics)
    decoded = set(dict(warm_cache.entries))
    assert "summary" not in decoded and "lint" in decoded and "project" in decoded, decoded
    assert loads.calls == len(decoded)  # one per kind decoded, nothing else
    assert os.stat(warm_cache.path).st_mtime_ns == stat.st_mtime_ns, "nothing changed: nothing written"


def test_save_reads_the_store_again_only_when_another_run_replaced_it(tmp_path, monkeypatch):
    root, config, first, _ = _cold_run(tmp_path)
    reads = []
    real = cache_module._load_store

    def counting(path, key):
        reads.append(path)
        return real(path, key)

    monkeypatch.setattr(cache_module, "_load_store", counting)
    one = open_cache(config, str(tmp_path / "cache"))
    two = open_cache(config, str(tmp_path / "cache"))
    assert len(reads) == 2
    os.utime(root / "clip.py")  # touched: re-hashed, its entry updated
    lint_paths([str(root / "clip.py")], config, cache=one)
    one.save()
    assert len(reads) == 2, "the store was as `one` loaded it: not read again"
    os.utime(root / "segkit" / "losses.py")
    lint_paths([str(root / "segkit" / "losses.py")], config, cache=two)
    two.save()
    assert len(reads) == 3, "`one` replaced the store since `two` loaded it: merged"
    merged = open_cache(config, str(tmp_path / "cache"))
    entries = merged.entries["lint"]
    assert entries[str(root / "clip.py")][0] == os.stat(root / "clip.py").st_mtime_ns  # one's update kept
    assert entries[str(root / "segkit" / "losses.py")][0] == os.stat(root / "segkit" / "losses.py").st_mtime_ns


def _sources(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "__pycache__").mkdir()
    (src / "a.py").write_text("A = 1\n")
    (src / "sub" / "b.py").write_text("B = 2\n")
    (src / "__pycache__" / "c.py").write_text("ignored\n")
    (src / "notes.txt").write_text("ignored\n")
    return src


def _reads(monkeypatch):
    reads = []
    real = cache_module.read_bytes
    monkeypatch.setattr(cache_module, "read_bytes", lambda p: reads.append(os.path.basename(p)) or real(p))
    return reads


def test_code_fingerprint_is_of_the_bytes_and_remembered_under_the_stat(tmp_path, monkeypatch):
    src = _sources(tmp_path)
    memo = str(tmp_path / "memo")
    later = time.time() + 60  # every file is old by then: its stat can be trusted
    reads = _reads(monkeypatch)
    first = sources_fingerprint([str(src)], memo, now=later)
    assert sorted(r for r in reads if r != "memo") == ["a.py", "b.py"]
    reads.clear()
    assert sources_fingerprint([str(src)], memo, now=later) == first and reads == ["memo"]  # no source read
    (src / "__pycache__" / "c.py").write_text("changed\n")
    (src / "notes.txt").write_text("changed\n")
    assert sources_fingerprint([str(src)], memo, now=later) == first
    # the same code installed anew elsewhere (another stat, another place): the same fingerprint
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert sources_fingerprint([str(copy)], memo, now=later) == first
    assert sources_fingerprint([str(copy)], None) == first  # and without a memo
    st = os.stat(src / "a.py")
    (src / "a.py").write_text("A = 3\n")  # same size, and the mtime put back: the ctime still moves
    os.utime(src / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(src / "a.py").st_mtime_ns == st.st_mtime_ns
    assert sources_fingerprint([str(src)], memo, now=later) != first


def test_code_fingerprint_is_not_remembered_while_a_file_is_racy(tmp_path, monkeypatch):
    src = _sources(tmp_path)
    memo = tmp_path / "memo"
    now = time.time()  # a.py and b.py were written just now
    assert sources_stat([str(src)], now=now) is None
    first = sources_fingerprint([str(src)], str(memo), now=now)
    assert not memo.exists()
    st = os.stat(src / "a.py")
    (src / "a.py").write_text("A = 3\n")
    # a clock that ticks coarsely: the edit kept every stat field the memo would compare
    monkeypatch.setattr(os.DirEntry, "stat", lambda self: st if self.name == "a.py" else os.stat(self.path))
    assert sources_fingerprint([str(src)], str(memo), now=now) != first


def test_warm_run_imports(tmp_path):
    """A warm run over a project whose cross-file findings are reused imports neither the
    project model nor what only a cold run, a save, a fix or a message needs."""
    root = _project(tmp_path, clip=False)
    env = {k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"}
    args = [sys.executable, "-X", "importtime", "-m", "amplint._start", str(root), "--isolated", "--cache-dir", str(tmp_path / "c")]
    subprocess.run(args, capture_output=True, cwd=tmp_path, env=env)
    out = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert "AMP303" in out.stdout, out.stdout + out.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    unwanted = {"amplint.model.project", "libcst", "_hashlib", "difflib", "json", "textwrap"}
    assert not imported & unwanted, imported & unwanted


@pytest.mark.parametrize("path", ["/", "//", "///a", "/a", "//a", "/a/b", "/a//b", "a", "a/b", "a//b", "", "/a/b/", "/a/./b", "a/", "//a/b", "/a/b//"])
def test_parent_is_dirname(path):
    from amplint.engine.crossfile import _parent

    assert _parent(path) == os.path.dirname(path)


def test_the_console_script_leaves_its_heap_out_of_the_exit_collections(tmp_path, monkeypatch, capsys):
    import gc

    from amplint import _start

    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(sys, "argv", ["amplint", str(tmp_path), "--isolated", "--no-cache"])
    assert gc.get_freeze_count() == 0
    try:
        with pytest.raises(SystemExit) as exc:
            _start.main()
        assert exc.value.code == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this process goes on (pytest)
