"""The verdict store: `--verify` keeps verdicts for `amplint server`, valid only for the
file content they ran on, trusted only under this user's cache key."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from amplint.engine.run import lint_source
from amplint.verify.store import FileDigests, VerdictStore, content_digest, finding_key

CLIP = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\n'
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)
CONFIRMED = {"verdict": "confirmed", "reason": None, "method": "snippet", "summary": "clip saw 65536x the norm",
             "evidence": {"ratio": 65536.0}, "device": "cpu", "device_type": "cpu", "torch": "2.13.0+cpu"}


@pytest.fixture(autouse=True)
def machine(tmp_path, monkeypatch):
    """A user cache folder of this test's own (its own key)."""
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("AMPLINT_CACHE_DIR", raising=False)
    return home


def finding(text: str = CLIP, path: str = "train.py"):
    (d,) = lint_source(text, path)
    return d


def test_a_saved_verdict_is_found_by_a_new_store_for_the_same_code(tmp_path):
    d = finding()
    digest = content_digest("train.py", CLIP)
    first = VerdictStore(str(tmp_path / "cache"))
    assert first.record(d, digest, CONFIRMED)
    first.save()
    again = VerdictStore(str(tmp_path / "cache"))
    found = again.lookup(finding(), digest)
    assert found["verdict"] == "confirmed" and found["summary"] == "clip saw 65536x the norm" and found["torch"] == "2.13.0+cpu"
    assert "evidence" not in found  # only the short line is kept


def test_any_change_of_the_file_retires_the_verdict(tmp_path):
    store = VerdictStore(str(tmp_path / "cache"))
    store.record(finding(), content_digest("train.py", CLIP), CONFIRMED)
    edited = CLIP + "print('done')\n"  # the finding itself is unchanged, the file is not
    assert store.lookup(finding(edited), content_digest("train.py", edited)) is None
    assert store.lookup(finding(), content_digest("train.py", CLIP)) is not None  # undone: valid again


def test_another_finding_in_the_same_file_does_not_get_the_verdict(tmp_path):
    store = VerdictStore(str(tmp_path / "cache"))
    d = finding()
    digest = content_digest("train.py", CLIP)
    store.record(d, digest, CONFIRMED)
    other = finding()
    other.data = {**(other.data or {}), "threshold": 2.0}
    assert store.lookup(other, digest) is None
    assert finding_key(d, digest) != finding_key(other, digest)


@pytest.mark.parametrize("verdict", [
    {"verdict": "error", "reason": "the experiment crashed the worker"},
    {"verdict": "inconclusive", "reason": "budget spent"},
    {"verdict": "confirmed", "summary": ["not", "a", "string"]},
])
def test_verdicts_that_say_nothing_about_the_code_are_not_kept(tmp_path, verdict):
    store = VerdictStore(str(tmp_path / "cache"))
    assert not store.record(finding(), content_digest("train.py", CLIP), verdict)
    assert store.lookup(finding(), content_digest("train.py", CLIP)) is None


def test_one_verdict_per_environment_newest_shown(tmp_path):
    store = VerdictStore(str(tmp_path / "cache"))
    d, digest = finding(), content_digest("train.py", CLIP)
    store.record(d, digest, CONFIRMED)
    store.record(d, digest, {**CONFIRMED, "device": "cuda:0", "device_type": "cuda", "summary": "on the GPU"})
    assert store.lookup(d, digest)["device"] == "cuda:0"
    store.record(d, digest, {**CONFIRMED, "verdict": "not-reproduced", "summary": "again on cpu"})
    assert store.lookup(d, digest)["verdict"] == "not-reproduced"
    assert len(store.entries[finding_key(d, digest)]) == 2  # cpu replaced, cuda kept


def test_a_store_from_another_user_or_edited_is_ignored(tmp_path, monkeypatch):
    folder = str(tmp_path / "cache")
    d, digest = finding(), content_digest("train.py", CLIP)
    planted = VerdictStore(folder)
    planted.record(d, digest, CONFIRMED)
    planted.save()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-machine"))  # another key
    assert VerdictStore(folder).lookup(d, digest) is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    assert VerdictStore(folder).lookup(d, digest) is not None
    with open(planted.path, "rb") as fh:
        head, payload = fh.read().split(b"\n", 1)
    with open(planted.path, "wb") as fh:  # the payload edited under the old MAC
        fh.write(head + b"\n" + payload.replace(b"confirmed", b"not-reproduced"))
    assert VerdictStore(folder).lookup(d, digest) is None


def test_concurrent_writers_merge(tmp_path):
    folder = str(tmp_path / "cache")
    a, b = VerdictStore(folder), VerdictStore(folder)
    d1, dig1 = finding(), content_digest("train.py", CLIP)
    other = CLIP.replace("1.0", "0.5")
    d2, dig2 = finding(other), content_digest("train.py", other)
    a.record(d1, dig1, CONFIRMED)
    b.record(d2, dig2, CONFIRMED)
    a.save()
    b.save()
    fresh = VerdictStore(folder)
    assert fresh.lookup(d1, dig1) and fresh.lookup(d2, dig2)


def test_a_reader_sees_what_a_later_run_wrote(tmp_path):
    folder = str(tmp_path / "cache")
    reader = VerdictStore(folder)
    d, digest = finding(), content_digest("train.py", CLIP)
    assert reader.lookup(d, digest) is None
    writer = VerdictStore(folder)
    writer.record(d, digest, CONFIRMED)
    writer.save()
    assert reader.reload() and reader.lookup(d, digest)["verdict"] == "confirmed"
    assert not reader.reload()  # unchanged on disk: not read again


def test_a_reader_sees_a_rewrite_of_the_same_size_in_the_same_clock_tick(tmp_path, monkeypatch):
    """A store another run replaced with as many bytes, its mtime in the same coarse
    timestamp tick (set back here to stand for it), is still read again."""
    import types

    import amplint.verify.store as store_module

    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(time=lambda: 1.5e9))  # same-length records
    folder = str(tmp_path / "cache")
    d, digest = finding(), content_digest("train.py", CLIP)
    writer = VerdictStore(folder)
    writer.record(d, digest, dict(CONFIRMED, summary="first run"))
    writer.save()
    before = os.stat(writer.path)
    reader = VerdictStore(folder)
    assert reader.lookup(d, digest)["summary"] == "first run"
    writer = VerdictStore(folder)
    writer.record(d, digest, dict(CONFIRMED, summary="later run"))  # as many bytes
    writer.save()
    os.utime(writer.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(writer.path).st_size == before.st_size
    assert reader.reload() and reader.lookup(d, digest)["summary"] == "later run"


def test_a_notebook_is_keyed_by_its_code_cells_not_its_json():
    from amplint.server.documents import notebook_json

    saved = notebook_json([("code", "x = 1\n"), ("markdown", "# notes")])
    edited_elsewhere = json.dumps(json.loads(saved))  # other JSON spelling, other metadata layout
    assert content_digest("nb.ipynb", saved) == content_digest("nb.ipynb", edited_elsewhere)
    assert content_digest("nb.ipynb", saved) != content_digest("nb.ipynb", notebook_json([("code", "x = 2\n")]))
    assert content_digest("nb.ipynb", "not json") is None


def test_verify_diagnostics_records_each_verdict_with_the_file_digest(tmp_path, monkeypatch):
    import amplint.verify as verify

    class FakeRunner:
        def start(self):
            return {}

        def run(self, code, data):
            return dict(CONFIRMED)

        def close(self):
            pass

    monkeypatch.setattr(verify, "torch_available", lambda: True)
    path = tmp_path / "train.py"
    path.write_text(CLIP)
    (d,) = lint_source(CLIP, str(path))
    store = VerdictStore(str(tmp_path / "cache"))
    assert verify.verify_diagnostics([d], runner=FakeRunner(), store=store) == 1
    assert d.verification["verdict"] == "confirmed"
    fresh = VerdictStore(str(tmp_path / "cache"))  # saved at the end of the run
    assert fresh.lookup(d, FileDigests().of(str(path)))["summary"] == "clip saw 65536x the norm"


@pytest.mark.parametrize("args,kept", [([], True), (["--no-cache"], False)])
def test_the_cli_keeps_verdicts_beside_the_lint_cache_unless_no_cache(tmp_path, monkeypatch, args, kept):
    import amplint.verify as verify
    from amplint.cli import main

    seen = []

    def fake(diagnostics, store=None, **settings):
        seen.append(store)
        for d in diagnostics:
            d.verification = dict(CONFIRMED)
            if store is not None:
                store.record(d, FileDigests().of(d.filename), d.verification)
        if store is not None:
            store.save()
        return len(diagnostics)

    monkeypatch.setattr(verify, "verify_diagnostics", fake)
    monkeypatch.setattr(verify, "torch_available", lambda: True)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    (tmp_path / "train.py").write_text(CLIP)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--verify", *args, "train.py"])
    assert result.exit_code == 1, result.output
    assert (seen[0] is not None) == kept
    stores = [n for n in os.listdir(tmp_path / ".amplint_cache") if n.startswith("verdicts-")] if (tmp_path / ".amplint_cache").exists() else []
    assert bool(stores) == kept
    if kept:
        assert VerdictStore(str(tmp_path / ".amplint_cache")).lookup(finding(path="train.py"), content_digest("train.py", CLIP))


def test_the_store_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, amplint.verify.store; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr



def test_json_output_shows_a_kept_verdict_as_cached_while_the_file_is_unchanged(tmp_path, monkeypatch):
    from amplint.cli import main

    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    (tmp_path / "train.py").write_text(CLIP)
    monkeypatch.chdir(tmp_path)
    store = VerdictStore(str(tmp_path / ".amplint_cache"))
    store.record(finding(path="train.py"), content_digest("train.py", CLIP), CONFIRMED)
    store.save()

    def run(*args):
        result = CliRunner().invoke(main, [*args, "train.py"])
        assert result.exit_code == 1, result.output
        return result.output

    (d,) = json.loads(run("--output-format", "json"))
    assert d["verification"]["verdict"] == "confirmed" and d["verification"]["cached"] is True
    assert d["verification"]["summary"] == "clip saw 65536x the norm"
    assert "verify:" not in run() and "Verified" not in run()  # the default (text) output is unchanged
    (d,) = json.loads(run("--output-format", "json", "--no-cache"))
    assert "verification" not in d
    (tmp_path / "train.py").write_text(CLIP + "print('done')\n")
    (d,) = json.loads(run("--output-format", "json"))
    assert "verification" not in d
