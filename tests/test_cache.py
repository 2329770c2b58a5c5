"""The per-file cache: hits, misses, invalidation, corruption, and warm runs equal cold ones."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from amplint import Config
from amplint.engine.cache import ENV, Cache, cache_dir
from amplint.engine.parallel import open_cache
from amplint.engine.run import lint_paths

CLIP = textwrap.dedent(
    """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    """
)
# AMP301 is conditional on the project running fp16: the mask file alone says nothing
MASK = "import torch\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"
FP16 = "import torch\nmodel = model.half()\n"
PLAIN = "x = 1\n"


def _project(tmp_path, files):
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def _old(path, seconds=60):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def _run(root, tmp_path, config=None):
    config = config or Config()
    cache = open_cache(config, str(tmp_path / "cache"))
    result = lint_paths([str(root)], config, cache=cache)
    cache.save()
    return result, cache


def _view(result):
    return [(os.path.basename(d.filename), d.code, d.location.row, d.message, d.fix, d.data) for d in result.diagnostics], result.facts


def test_cold_then_warm_hits_without_reading(tmp_path, monkeypatch):
    root = _project(tmp_path, {"train.py": CLIP, "mask.py": MASK, "half.py": FP16, "plain.py": PLAIN})
    for f in root.iterdir():
        _old(f)
    cold, c1 = _run(root, tmp_path)
    assert c1.hits == 0 and c1.misses >= 4
    assert {d.code for d in cold.diagnostics} >= {"AMP101", "AMP301"}

    import amplint.engine.dispatch as engine

    def no_lint(*a, **k):  # a warm run with nothing changed lints nothing
        raise AssertionError("linted a file the cache holds")

    monkeypatch.setattr(engine, "lint_path", no_lint)
    warm, c2 = _run(root, tmp_path)
    assert c2.misses == 0 and c2.hits >= 4
    assert _view(warm) == _view(cold)


def test_conditions_resolve_identically_when_warm(tmp_path):
    """The mask file's AMP301 depends on another file: changing that file alone flips it, warm or cold."""
    root = _project(tmp_path, {"mask.py": MASK, "half.py": FP16})
    for f in root.iterdir():
        _old(f)
    cold, _ = _run(root, tmp_path)
    assert any(d.code == "AMP301" for d in cold.diagnostics)
    (root / "half.py").write_text("x = 2\n")
    _old(root / "half.py", 30)
    warm, cache = _run(root, tmp_path)
    assert not any(d.code == "AMP301" for d in warm.diagnostics)
    assert cache.hits >= 1  # mask.py itself came from the cache
    fresh, _ = _run(root, tmp_path / "other")
    assert _view(warm) == _view(fresh)


def test_edited_file_is_relinted(tmp_path):
    root = _project(tmp_path, {"train.py": CLIP})
    _old(root / "train.py")
    first, _ = _run(root, tmp_path)
    assert first.diagnostics
    fixed = CLIP.replace("scaler.scale(loss).backward()\n", "scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\n")
    (root / "train.py").write_text(fixed)
    second, cache = _run(root, tmp_path)
    assert not [d for d in second.diagnostics if d.code == "AMP101"]
    assert cache.misses == 1


def test_same_stat_recent_file_is_rehashed(tmp_path):
    """A file modified within the racy window is re-read even if mtime and size match."""
    root = _project(tmp_path, {"train.py": CLIP})
    f = root / "train.py"
    st = os.stat(f)
    first, _ = _run(root, tmp_path)
    assert first.diagnostics
    # same size, same mtime, different bytes
    f.write_text(CLIP.replace("1.0", "2.0"))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    second, _ = _run(root, tmp_path)
    assert "2.0" in second.diagnostics[0].data["step_source"]


def test_touched_but_unchanged_file_is_reused(tmp_path, monkeypatch):
    root = _project(tmp_path, {"train.py": CLIP})
    _old(root / "train.py", 120)
    first, _ = _run(root, tmp_path)
    _old(root / "train.py", 60)  # new mtime, same bytes
    import amplint.engine.dispatch as engine

    monkeypatch.setattr(engine, "lint_path", lambda *a, **k: (_ for _ in ()).throw(AssertionError("relinted")))
    second, cache = _run(root, tmp_path)
    assert _view(second) == _view(first) and cache.hits == 1


def test_config_change_invalidates(tmp_path):
    root = _project(tmp_path, {"train.py": CLIP})
    _old(root / "train.py")
    _run(root, tmp_path)
    _, cache = _run(root, tmp_path, Config(ignore=("AMP101",)))
    assert cache.hits == 0
    a = open_cache(Config(), str(tmp_path / "cache"))
    b = open_cache(Config(precision="bf16"), str(tmp_path / "cache"))
    assert a.path != b.path


@pytest.mark.parametrize("garbage", [b"", b"{", b"\x00\xff" * 100, b'{"format": 1, "entries": {"lint": {"x": [1]}}}', b"[]", b'{"format": 1, "entries": {"lint": {"%s": [0, 0, "d", 0, {"d": [{"code": 1}]}]}}}'])
def test_corrupt_store_is_ignored_and_rewritten(tmp_path, garbage):
    root = _project(tmp_path, {"train.py": CLIP})
    _old(root / "train.py")
    cold, cache = _run(root, tmp_path)
    path = cache.path
    with open(path, "wb") as fh:
        fh.write(garbage.replace(b"%s", str(root / "train.py").encode()))
    again, _ = _run(root, tmp_path)
    assert _view(again) == _view(cold)
    from amplint.engine.cache import _read_store, machine_key

    assert _read_store(path, machine_key())["lint"]  # rewritten, under this machine's key
    warm, c3 = _run(root, tmp_path)
    assert c3.hits == 1 and _view(warm) == _view(cold)


def test_store_is_written_atomically_and_merged(tmp_path):
    root = _project(tmp_path, {"a.py": CLIP, "b.py": CLIP})
    for f in root.iterdir():
        _old(f)
    config = Config()
    one = open_cache(config, str(tmp_path / "cache"))
    two = open_cache(config, str(tmp_path / "cache"))
    lint_paths([str(root / "a.py")], config, cache=one)
    lint_paths([str(root / "b.py")], config, cache=two)
    one.save()
    two.save()  # a concurrent run: merges, keeps a.py's entry
    three = open_cache(config, str(tmp_path / "cache"))
    assert set(three.entries["lint"]) == {str(root / "a.py"), str(root / "b.py")}
    leftovers = [n for n in os.listdir(tmp_path / "cache") if n.startswith(".") and n != ".gitignore"]
    assert not leftovers  # no temporary file


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cache_dir(None, str(tmp_path)) == os.path.join(str(tmp_path), ".amplint_cache")
    monkeypatch.setenv(ENV, str(tmp_path / "env"))
    assert cache_dir(None, str(tmp_path)) == str(tmp_path / "env")
    assert cache_dir(str(tmp_path / "flag"), str(tmp_path)) == str(tmp_path / "flag")


def test_cli_flags(tmp_path):
    root = _project(tmp_path, {"train.py": CLIP})
    env = {k: v for k, v in os.environ.items() if k != ENV}
    run = lambda *args, **kw: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "amplint._start", str(root), "--isolated", *args], capture_output=True, text=True, cwd=tmp_path, **kw
    )
    out = run("--no-cache", env=env)
    assert out.returncode == 1 and "AMP101" in out.stdout
    assert not (tmp_path / ".amplint_cache").exists()
    out = run(env=env)
    assert out.returncode == 1 and (tmp_path / ".amplint_cache").is_dir()
    assert (tmp_path / ".amplint_cache" / ".gitignore").is_file()
    out = run("--cache-dir", str(tmp_path / "c2"), env=env)
    assert out.returncode == 1 and (tmp_path / "c2").is_dir()
    out = run(env={**env, ENV: str(tmp_path / "c3")})
    assert out.returncode == 1 and (tmp_path / "c3").is_dir()


def test_unencodable_data_is_not_cached(tmp_path):
    from amplint.engine.cache import encode_result
    from amplint.core.diagnostics import Diagnostic, Location, Severity
    from amplint.engine.pipeline import FileResult

    d = Diagnostic("AMP101", "n", "m", Severity.ERROR, "f.py", Location(1, 1), Location(1, 2), data={"x": object()})
    assert encode_result(FileResult(path="f.py", diagnostics=[d])) is None
    d.data = {"t": (1, 2), "nested": {"l": [1, (2, "3")]}}
    assert encode_result(FileResult(path="f.py", diagnostics=[d])) is not None


def test_cache_store_class_roundtrip(tmp_path):
    cache = Cache(str(tmp_path), "fp")
    assert cache.lookup("lint", "nope.py", (1, 1)) == (None, None)
