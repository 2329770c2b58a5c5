"""When the server builds a file's project model: once on open, again after a save, never
once per keystroke, and one model at a time per file."""
from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("lsprotocol")

from amplint.server.crossfile import CrossFile  # noqa: E402
from amplint.server.documents import lint_python  # noqa: E402
from amplint.server.project import Projects  # noqa: E402


class Counting(CrossFile):
    """A CrossFile whose model records what it was asked and waits until released."""

    def __init__(self, fail: bool = False, found=()) -> None:
        self.asked = []
        self.release = threading.Event()
        self.ready = threading.Event()  # a model finished
        self.told = []  # what on_ready heard
        self.fail = fail
        self.found = list(found)
        super().__init__(Projects, on_ready=self.told.append, use_cache=False)

    def findings(self, path, text, config, silenced=None):
        self.asked.append(text)
        assert self.release.wait(60)
        if self.fail:
            raise OSError("the project folder vanished")
        return list(self.found)

    def _make(self, *args):
        super()._make(*args)
        self.ready.set()


@pytest.fixture
def buffer(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("x = 1\n")
    projects = Projects(str(tmp_path))
    return str(path), lambda text: lint_python(text, str(path), projects)


def test_keystrokes_while_the_model_runs_queue_nothing_and_a_save_asks_again(buffer):
    path, lint = buffer
    cross = Counting()
    for i in range(5):  # typing while the first model is being built
        cross.add(lint(f"x = {i}\n"), path)
    cross.release.set()
    assert cross.ready.wait(60)
    assert cross.asked == ["x = 0\n"]
    cross.ready.clear()
    cross.add(lint("x = 7\n"), path)  # findings known, nothing saved: none asked
    assert cross.saved(path) == [path]
    cross.add(lint("x = 8\n"), path)
    assert cross.ready.wait(60)
    assert cross.asked == ["x = 0\n", "x = 8\n"]


def test_a_failed_model_counts_as_no_findings_not_as_a_reason_to_ask_again(buffer):
    path, lint = buffer
    cross = Counting(fail=True)
    cross.release.set()
    linted = lint("x = 1\n")
    assert cross.add(linted, path) is linted
    assert cross.ready.wait(60)
    assert cross.add(lint("x = 2\n"), path).diagnostics == []
    assert cross.asked == ["x = 1\n"]


def test_reopening_asks_again(buffer):
    path, lint = buffer
    cross = Counting()
    cross.release.set()
    cross.add(lint("x = 1\n"), path)
    assert cross.ready.wait(60)
    cross.ready.clear()
    cross.forget(path)
    cross.opened(path)
    cross.add(lint("x = 1\n"), path)
    assert cross.ready.wait(60)
    assert cross.asked == ["x = 1\n", "x = 1\n"]


def test_the_server_hears_only_of_findings_that_change_what_it_shows(buffer):
    from amplint.core.diagnostics import Diagnostic, Location, Severity

    path, lint = buffer
    quiet = Counting()
    quiet.release.set()
    quiet.add(lint("x = 1\n"), path)
    assert quiet.ready.wait(60) and quiet.told == []  # none before, none now: nothing to publish

    finding = Diagnostic("AMP303", "bce", "BCE under autocast", Severity.ERROR, path, Location(1, 1), Location(1, 6))
    loud = Counting(found=[finding])
    loud.release.set()
    linted = lint("x = 1\n")
    assert loud.add(linted, path) is linted  # not known yet: the file's own findings alone
    assert loud.ready.wait(60) and loud.told == [os.path.abspath(path)]
    assert [d.code for d in loud.add(lint("x = 1\n"), path).diagnostics] == ["AMP303"]
    assert [d.location.row for d in loud.add(lint("# new\nx = 1\n"), path).diagnostics] == [2]  # moved with the edit


@pytest.mark.parametrize("other,kept", [("model = model.half()\n", True), ("model = model.float()\n", False)])
def test_a_conditional_cross_file_finding_is_decided_by_the_projects_saved_files(tmp_path, monkeypatch, other, kept):
    import amplint.engine.crossfile as engine_crossfile
    from amplint.core.diagnostics import Diagnostic, Location, Severity
    from amplint.model.facts import FP16

    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    (tmp_path / "model.py").write_text("import torch\n" + other)
    path = tmp_path / "train.py"
    path.write_text("x = 1\n")
    conditional = Diagnostic("AMP302", "eps", "eps underflows in fp16", Severity.WARNING, str(path), Location(1, 1), Location(1, 6), condition=FP16)
    monkeypatch.setattr(engine_crossfile, "buffer_diagnostics", lambda *args, **kwargs: [conditional])
    projects = Projects(str(tmp_path))
    cross = CrossFile(lambda: projects, use_cache=False)
    assert cross.findings(str(path), "x = 1\n", projects.config_for(str(path))) == ([conditional] if kept else [])


def test_an_unsaved_buffer_is_modelled_from_its_own_text_even_when_the_project_is_warm(tmp_path):
    """The saved project has no BCE at all (a warm cache records its project pass); the buffer
    adds one: the cross-file finding is there before any save."""
    import shutil
    from pathlib import Path

    from amplint.core.config import Config
    from amplint.engine.crossfile import buffer_diagnostics
    from amplint.engine.parallel import open_cache
    from amplint.engine.pipeline import selected_rules
    from amplint.engine.run import lint_paths

    root = tmp_path / "project"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "bce_loss_module", root)
    losses = root / "segkit" / "losses.py"
    buggy = losses.read_text()
    losses.write_text(buggy.replace("F.binary_cross_entropy(probs, target.float())", "F.mse_loss(probs, target.float())"))
    config = Config(root=str(root))
    for _ in range(2):  # cold, then warm: the project's universe recorded under its files' key
        cache = open_cache(config, str(tmp_path / "cache"))
        assert [d.code for d in lint_paths([str(root)], config, cache=cache).diagnostics if d.code == "AMP303"] == []
        cache.save()
    cache = open_cache(config, str(tmp_path / "cache"))
    codes, rules = selected_rules(config)
    files = sorted(str(p) for p in root.rglob("*.py"))
    found = buffer_diagnostics(str(losses), buggy, files, rules, codes, config, cache)
    assert [(d.code, d.location.row) for d in found] == [("AMP303", 22)]


def test_an_unsaved_buffer_that_becomes_a_starting_file_is_in_the_universe(tmp_path):
    """The saved `finetune.py` builds no optimizer, so the universe a warm cache records for
    the project starts from another file only; the buffer adds the optimizer on the fp16
    model: the universe is computed from the buffer's text, not reused from the record."""
    import shutil
    from pathlib import Path

    from amplint.core.config import Config
    from amplint.engine.crossfile import buffer_diagnostics
    from amplint.engine.parallel import open_cache
    from amplint.engine.pipeline import selected_rules
    from amplint.engine.run import lint_paths

    root = tmp_path / "project"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "half_builder", root)
    (root / "probe.py").write_text(
        "import torch\nfrom torch import nn\n\n\ndef probe():\n    head = nn.Linear(4, 2)\n"
        "    return torch.optim.SGD(head.parameters(), lr=0.1)\n"
    )
    finetune = root / "finetune.py"
    buffer = finetune.read_text()
    line = "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.2)\n"
    assert line in buffer
    finetune.write_text(buffer.replace(line, "    optimizer = None\n"))
    config = Config(root=str(root))
    for _ in range(2):  # cold, then warm: the universe ([probe.py]) recorded under the files' key
        cache = open_cache(config, str(tmp_path / "cache"))
        assert [d for d in lint_paths([str(root)], config, cache=cache).diagnostics if d.code == "AMP201"] == []
        cache.save()
    cache = open_cache(config, str(tmp_path / "cache"))
    lint_paths([str(root)], config, cache=cache)  # as the server does: every saved file's digest known
    codes, rules = selected_rules(config)
    files = sorted(str(p) for p in root.rglob("*.py"))
    found = buffer_diagnostics(str(finetune), buffer, files, rules, codes, config, cache)
    assert ("AMP201", 18) in [(d.code, d.location.row) for d in found]


def test_unused_noqa_counts_a_directive_that_silences_a_cross_file_finding(tmp_path):
    """AMP900 in the editor knows the project model's findings, as `amplint --extend-select
    AMP900` does: the `# noqa: AMP303` on the BCE call silences the cross-file finding and is
    used; the unused code next to it is still reported, and the comment moves with edits."""
    import shutil
    from pathlib import Path

    root = tmp_path / "p"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "bce_loss_module", root)
    with open(root / "pyproject.toml", "a") as fh:
        fh.write('\n[tool.amplint]\nextend-select = ["AMP900"]\n')
    losses = root / "segkit" / "losses.py"
    old = "bce = F.binary_cross_entropy(probs, target.float())"
    text = losses.read_text().replace(old, old + "  # noqa: AMP303, AMP101")
    losses.write_text(text)
    projects = Projects(str(root))
    ready = threading.Event()
    cross = CrossFile(lambda: projects, on_ready=lambda path: ready.set(), use_cache=False)

    def shown(source):
        return [(d.code, d.location.row, d.message) for d in cross.add(lint_python(source, str(losses), projects), str(losses)).diagnostics]

    shown(text)
    assert ready.wait(120)
    row = text.splitlines().index(next(line for line in text.splitlines() if old in line)) + 1
    assert shown(text) == [("AMP900", row, "unused `noqa` directive (unused: `AMP101`)")]
    assert shown("# edited\n" + text) == [("AMP900", row + 1, "unused `noqa` directive (unused: `AMP101`)")]


def test_a_site_that_never_runs_is_dropped_in_the_editor_as_by_the_cli(tmp_path):
    # model/project/reach in the editor: decided on the model's thread for the buffer's text,
    # carried along edits; a finding on an edited line stays until the next save decides again
    from amplint import Config, lint_paths

    text = "import torch\nDEBUG = False\nif DEBUG:\n    ctx = torch.cuda.amp.autocast()\nctx = torch.cuda.amp.autocast()\n"
    path = tmp_path / "train.py"
    path.write_text(text)
    (tmp_path / "pyproject.toml").write_text("")
    projects = Projects(str(tmp_path))
    cli = sorted(d.location.row for d in lint_paths([str(path)], Config()).diagnostics if d.code == "AMP001")
    assert cli == [5]
    done = threading.Event()
    cross = CrossFile(lambda: projects, on_ready=lambda p: done.set(), use_cache=False)
    first = cross.add(lint_python(text, str(path), projects), str(path))
    assert sorted(d.location.row for d in first.diagnostics if d.code == "AMP001") == [4, 5]  # not decided yet
    assert done.wait(60)

    def rows(buffer):
        return sorted(d.location.row for d in cross.add(lint_python(buffer, str(path), projects), str(path)).diagnostics if d.code == "AMP001")

    assert rows(text) == cli
    assert rows("# a comment\n" + text) == [6]  # moved with the edit, still dropped
    edited = text.replace("    ctx = torch.cuda.amp.autocast()\n", "    ctx = torch.cuda.amp.autocast()  # edited\n", 1)
    assert rows(edited) == [4, 5]  # its line was edited: the next save decides


def test_a_file_over_the_piece_size_keeps_its_findings_in_the_editor_too(tmp_path):
    from amplint.engine.excerpt import PIECE_BYTES

    cross = CrossFile(lambda: Projects(str(tmp_path)), use_cache=False)
    text = "DEBUG = False\n" + "x = 1\n" * (PIECE_BYTES // 6 + 1)
    assert cross.reach(str(tmp_path / "big.py"), text, Projects(str(tmp_path)).config_for(str(tmp_path / "big.py"))) is None
