"""The walk of a library copy's files (`embedded._imports_itself`: does the copy import itself by
its own top-level name?) kept in the cache store (issue 26: a warm transformers run read the 400
files of `models/` for it on every run). The kept answer is reused only while every folder walked
and every file read is as its stat was when read, never when one was modified within the racy
window, and a run's findings stay those of a run without the cache."""
from __future__ import annotations

import os
import time

import pytest

from amplint import Config
from amplint.engine.parallel import open_cache
from amplint.engine.run import lint_paths
from amplint.model import embedded

OLD = time.time() - 3600


class _Memo(dict):
    def put(self, key, payload):
        self[key] = payload


def _age(root):
    """Every file and folder below `root` an hour old (out of the racy window)."""
    for where, dirs, files in os.walk(root):
        for name in files + dirs:
            os.utime(os.path.join(where, name), (OLD, OLD))
    os.utime(root, (OLD, OLD))


def _copy(root, self_import=True):
    copy = root / "fastops"
    (copy / "sub").mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    (copy / "sub" / "__init__.py").write_text("")
    (copy / "functions.py").write_text("import torch\n")
    (copy / "sub" / "ops.py").write_text("from fastops.functions import x\n" if self_import else "from ..functions import x\n")
    return copy


@pytest.fixture
def reads(monkeypatch):
    seen = []
    real = embedded.read_text

    def counting(path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(embedded, "read_text", counting)
    return seen


@pytest.mark.parametrize("self_import", [True, False])
def test_a_kept_answer_reads_no_file(tmp_path, reads, self_import):
    copy = _copy(tmp_path, self_import)
    _age(tmp_path)
    memo = _Memo()
    with embedded.remembered(memo):
        first = embedded._imports_itself(str(copy), "fastops")
        assert first is self_import and len(memo) == 1 and reads
        reads.clear()
        assert embedded._imports_itself(str(copy), "fastops") is first
    assert reads == []
    assert embedded._imports_itself(str(copy), "fastops") is first  # without the memo: read again
    assert reads


def test_an_edit_a_new_file_or_a_removed_one_is_seen(tmp_path, reads):
    copy = _copy(tmp_path, self_import=False)
    _age(tmp_path)
    memo = _Memo()
    with embedded.remembered(memo):
        assert embedded._imports_itself(str(copy), "fastops") is False
        # an edit, its mtime set back (but not to the recorded one)
        ops = copy / "sub" / "ops.py"
        ops.write_text("import fastops.functions as f\n")
        os.utime(ops, (OLD + 5, OLD + 5))
        assert embedded._imports_itself(str(copy), "fastops") is True
        # removed: the folder's mtime moves
        ops.unlink()
        os.utime(copy / "sub", (OLD + 10, OLD + 10))
        assert embedded._imports_itself(str(copy), "fastops") is False
        # a new file in a folder walked
        (copy / "sub" / "more.py").write_text("from fastops import functions\n")
        for p in (copy / "sub" / "more.py", copy / "sub"):
            os.utime(p, (OLD + 20, OLD + 20))
        assert embedded._imports_itself(str(copy), "fastops") is True


def test_an_answer_read_from_files_just_modified_is_not_kept(tmp_path):
    copy = _copy(tmp_path)
    memo = _Memo()
    with embedded.remembered(memo):
        assert embedded._imports_itself(str(copy), "fastops") is True
    assert memo == {}


def test_a_malformed_kept_answer_is_read_again(tmp_path, reads):
    copy = _copy(tmp_path)
    _age(tmp_path)
    key = f"{copy}\0fastops"
    for bad in ({"a": False, "w": []}, {"a": False, "w": [["x"]]}, {"a": False}, "x"):
        memo = _Memo({key: bad})
        with embedded.remembered(memo):
            assert embedded._imports_itself(str(copy), "fastops") is True


AUTOCAST_TRAIN = "import torch\n\nwith torch.autocast('cuda', dtype=torch.float16):\n    y = model(x)\n"
FUNCTION = (
    "import torch\n\n\nclass FusedLinear(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x, weight):\n"
    "        ctx.save_for_backward(x, weight)\n        return x @ weight.t()\n\n    @staticmethod\n    def backward(ctx, grad):\n"
    "        x, weight = ctx.saved_tensors\n        return grad @ weight, grad.t() @ x\n"
)


def test_a_warm_run_reads_none_of_the_copys_files_and_finds_the_same(tmp_path, reads):
    """A copy nested in the application's package, found a copy by its self-import: its Function is
    not reached (no finding); warm, the answer comes from the store; once the copy stops importing
    itself it is the application's own subpackage, reported, as a run without the cache says."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "app" / "vendor" / "fastops").mkdir(parents=True)
    for folder in ("app", "app/vendor", "app/vendor/fastops"):
        (root / folder / "__init__.py").write_text("")
    copy = root / "app" / "vendor" / "fastops"
    (copy / "functions.py").write_text(FUNCTION)
    (copy / "utils.py").write_text("from fastops.functions import FusedLinear\n")
    (root / "train.py").write_text(AUTOCAST_TRAIN)
    _age(root)
    config = Config(select=("AMP501",))
    embedded._copies.clear()
    cold_cache = open_cache(config, str(tmp_path / "cache"))
    cold = lint_paths([str(root)], config, cache=cold_cache).diagnostics
    cold_cache.save()
    assert f"{copy}\0fastops" in cold_cache.entries["walks"]
    assert cold == lint_paths([str(root)], config).diagnostics == []
    embedded._copies.clear()  # a new process
    reads.clear()
    warm = lint_paths([str(root)], config, cache=open_cache(config, str(tmp_path / "cache"))).diagnostics
    assert warm == cold
    assert not [p for p in reads if p.startswith(str(copy))]
    (copy / "utils.py").write_text("from .functions import FusedLinear\n")
    os.utime(copy / "utils.py", (OLD + 5, OLD + 5))
    embedded._copies.clear()
    after = lint_paths([str(root)], config, cache=open_cache(config, str(tmp_path / "cache"))).diagnostics
    embedded._copies.clear()
    assert after == lint_paths([str(root)], config).diagnostics
    assert [(os.path.basename(d.filename), d.code) for d in after] == [("functions.py", "AMP501")]
