"""The server's incremental re-lint (amplint/server/incremental.py) equals a full
lint after every edit of real files: scripted edits inside the definitions of
every fixture (comments, deleted, duplicated and inserted lines, changed
literals and names, calls moved, lines typed below a definition), from a fixed seed list, each checked against
the engine's full per-file lint of the edited text. Also: the edits that must
fall back to a full lint do, and the fast path is taken for the rest (so the
equality is not proved by always falling back)."""
from __future__ import annotations

import ast
import glob
import os
import random
from typing import List, Optional, Tuple

import pytest

from amplint.core.config import Config
from amplint.engine.pipeline import selected_rules
from amplint.server.documents import full_lint
from amplint.server.incremental import Base, base_of, relint

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "**", "*.py"), recursive=True))
SEEDS = range(2)
EDITS_PER_FILE = 12


def _base(source: str, path: str, config: Config) -> Optional[Base]:
    full = full_lint(source, path, config)
    return base_of(source, full.raw, full.facts, full.active, config)


def _defs(source: str) -> List[Tuple[int, int]]:
    tree = ast.parse(source)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((first, node.end_lineno or node.lineno))
    return out


def _edit(rng: random.Random, source: str) -> Optional[str]:
    """One edit inside a top-level definition (may leave the text unparsable)."""
    spans = _defs(source)
    if not spans:
        return None
    first, last = rng.choice(spans)
    rows = source.split("\n")
    i = rng.randint(first, last) - 1  # 0-based row inside the definition (its header included)
    line = rows[i]
    indent = line[: len(line) - len(line.lstrip())] or "    "
    kind = rng.choice(["comment", "delete", "duplicate", "pass", "literal", "rename", "swap", "call", "typing", "append"])
    if kind == "comment":
        rows[i] = line + "  # edited"
    elif kind == "delete" and i > first - 1:
        del rows[i]
    elif kind == "duplicate":
        rows.insert(i, line)
    elif kind == "pass" and i > first - 1:
        rows.insert(i + 1, indent + "pass")
    elif kind == "literal":
        rows[i] = line.replace("1", "2", 1).replace("True", "False", 1)
    elif kind == "rename":
        rows[i] = line.replace("loss", "loss2").replace("scaler", "scaler2").replace("optimizer", "opt")
    elif kind == "swap" and i + 1 < last:
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    elif kind == "call" and i > first - 1:
        rows.insert(i + 1, indent + rng.choice([
            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
            "optimizer.step()",
            "scaler.unscale_(optimizer)",
            "loss.backward()",
            "x = x.half()",
            "y = torch.ones(3) * 1e-8",
        ]))
    elif kind == "append":  # Enter after the definition's last line, then a line of its body (or blank)
        last_line = rows[last - 1]
        body = last_line[: len(last_line) - len(last_line.lstrip())] or "    "
        rows.insert(last, rng.choice(["", body, body + "z = 0"]))
    elif kind == "typing":  # a keystroke in the middle of a word
        column = rng.randint(0, len(line))
        rows[i] = line[:column] + "x" + line[column:]
    else:
        return None
    return "\n".join(rows)


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
        return True
    except SyntaxError:
        return False


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, os.path.join(HERE, "..")))
def test_incremental_equals_full_lint_after_each_edit(path: str) -> None:
    config = Config()
    codes, rules = selected_rules(config)
    original = open(path, encoding="utf-8").read()
    fast = 0
    for seed in SEEDS:
        rng = random.Random(f"{os.path.basename(path)}:{seed}")
        source = original
        base = _base(source, path, config)
        assert base is not None
        for _ in range(EDITS_PER_FILE):
            edited = _edit(rng, source)
            if edited is None or not _parses(edited):
                continue
            got = relint(base, edited, path, config, rules, codes)
            full = full_lint(edited, path, config)
            if got is not None:
                fast += 1
                assert sorted(got.raw, key=lambda d: d.sort_key()) == sorted(full.raw, key=lambda d: d.sort_key()), (seed, edited)
                assert got.facts == full.facts
                base = got.base
            else:
                base = base_of(edited, full.raw, full.facts, full.active, config)
            source = edited
    assert fast or not _defs(original)  # the fast path ran (else the equality proves nothing)


# ------------------------------------------------------------------ when it must lint the whole buffer

TRAIN = '''import torch

scaler = torch.amp.GradScaler("cuda")


def helper(x):
    return x * 2


def unrelated(x):
    y = x + 1
    return y


class Net(torch.nn.Module):
    def forward(self, x):
        return helper(x)


def train(model, loader, optimizer):
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
'''


def _relint(before: str, after: str):
    config = Config()
    codes, rules = selected_rules(config)
    base = _base(before, "train.py", config)
    assert base is not None
    return relint(base, after, "train.py", config, rules, codes), full_lint(after, "train.py", config)


@pytest.mark.parametrize(
    "old, new",
    [
        ("scaler = torch.amp.GradScaler(\"cuda\")", "scaler = torch.amp.GradScaler(\"cuda\", enabled=False)"),  # module level
        ("    return x * 2", "    return x * 3"),  # `helper` is called from Net.forward
        ("    y = x + 1", "    import numpy as np\n    y = x + 1"),  # an import resolves file-wide
        ("    y = x + 1", "    global scaler\n    y = x + 1"),
        ("    y = x + 1", "    y = x +"),  # no longer parses
        ("def unrelated(x):", "def unrelated2(x):"),  # renamed: names changed
        ("    y = x + 1", "    s = torch.amp.GradScaler(\"cuda\")\n    y = x + 1"),  # a registry entry
        ("    y = x + 1\n", "    y = x + 1\n\n\nx = 1\n"),  # a new module-level statement
        ("    return y\n", "    return y\n\n\ndef more():\n    pass\n"),  # a new definition below it
    ],
)
def test_edits_others_depend_on_lint_the_whole_buffer(old: str, new: str) -> None:
    assert old in TRAIN
    got, _ = _relint(TRAIN, TRAIN.replace(old, new))
    assert got is None


def test_an_independent_edit_moves_the_later_findings() -> None:
    after = TRAIN.replace("    y = x + 1", "    y = x + 1\n    y = y * 2\n    y = y - 1")
    got, full = _relint(TRAIN, after)
    assert got is not None  # the fast path
    assert [d.code for d in full.raw] == ["AMP101"]
    assert got.raw == full.raw  # the clip in `train` moved two rows down with its fix and noqa row
    assert got.raw[0].location.row == TRAIN.split("\n").index("        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)") + 3


ALIASED = """import torch
import torch.cuda.amp as amp

from helpers import build


class Trainer:
    def __init__(self, model):
        self.scaler = amp.GradScaler()

    def step(self, loss):
        with amp.autocast():
            pass
        self.scaler.scale(loss).backward()
"""


def test_a_fix_removing_a_whole_import_line_keeps_its_end_when_blank_rows_follow() -> None:
    """AMP001's fix deletes `import torch.cuda.amp as amp` up to column 1 of the next row; the
    excerpt leaves the blank row below out, so that end is mapped from the import's own row
    (mapping the excerpt's next row would delete the blank row as well)."""
    after = ALIASED.replace("    def step(self, loss):", "    def step(self, loss):  # edited")
    got, full = _relint(ALIASED, after)
    assert got is not None  # the fast path
    removals = [e for d in full.raw if d.fix for e in d.fix.edits if e.content == ""]
    assert removals and all((e.location.row, e.end_location.row) == (2, 3) for e in removals)
    assert got.raw == full.raw


def test_typing_below_the_last_line_of_a_function() -> None:
    """Enter at the end of a function, then a statement in its body: both stay on the fast path."""
    opened = TRAIN.replace("    return y\n", "    return y\n    \n")
    got, full = _relint(TRAIN, opened)
    assert got is not None and got.raw == full.raw
    typed = opened.replace("    return y\n    \n", "    return y\n    print(y)\n")
    again, full_again = _relint(opened, typed)
    assert again is not None and again.raw == full_again.raw
    assert [d.code for d in again.raw] == ["AMP101"]


def test_an_edit_inside_the_training_step_is_linted_there() -> None:
    fixed = "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_"
    after = TRAIN.replace("        torch.nn.utils.clip_grad_norm_", fixed)
    got, full = _relint(TRAIN, after)
    assert got is not None
    assert got.raw == full.raw == []  # the finding is gone, as a full lint says
    again, full_again = _relint(after, TRAIN)
    assert again is not None and [d.code for d in again.raw] == [d.code for d in full_again.raw] == ["AMP101"]


# ------------------------------------------------------------------ the background full lint

def test_the_recheck_process_runs_the_full_lint_newest_request_first() -> None:
    from concurrent.futures import CancelledError

    from amplint.server.recheck import Rechecker

    config = Config()
    edited = TRAIN.replace("        torch.nn.utils.clip_grad_norm_", "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_")
    checker = Rechecker()
    try:
        first = checker.submit(TRAIN, "train.py", config)
        replaced = checker.submit(edited, "train.py", config)  # queued behind the first ...
        newest = checker.submit(TRAIN, "train.py", config)  # ... and replaced by this one
        assert first.result(timeout=120).raw == full_lint(TRAIN, "train.py", config).raw
        with pytest.raises(CancelledError):
            replaced.result(timeout=1)
        assert [d.code for d in newest.result(timeout=120).raw] == ["AMP101"]
    finally:
        checker.close()
    assert checker.submit(TRAIN, "train.py", config).cancelled()


# ------------------------------------------------------------------ after a correction

PROBED = '''import torch


def amp_api():
    new_api = hasattr(torch, "amp") and hasattr(torch.amp, "autocast")
    return new_api


def forward(model, x, new_api):
    with torch.cuda.amp.autocast():
        return model(x)


def other(x):
    return x + 1
'''
# the call gated behind a name that `amp_api` (which `forward` does not name) assigns from
# a version probe: AMP001 looks the name up file-wide, the excerpt of `forward` lacks it
GATED = PROBED.replace(
    "    with torch.cuda.amp.autocast():\n        return model(x)\n",
    "    if new_api:\n        return model(x)\n    else:\n        with torch.cuda.amp.autocast():\n            return model(x)\n",
)


def test_a_definition_the_full_lint_corrected_lints_whole_from_then_on(tmp_path) -> None:
    from amplint.server.documents import exact, lint_python
    from amplint.server.project import Projects

    projects, path = Projects(str(tmp_path)), str(tmp_path / "train.py")
    opened = lint_python(PROBED, path, projects)
    assert [d.code for d in opened.diagnostics] == ["AMP001"]
    fast = lint_python(GATED, path, projects, opened.base)
    full = full_lint(GATED, path, opened.config)
    assert fast.fast and [d.code for d in fast.diagnostics] == ["AMP001"] and full.raw == []  # the known limit
    corrected = exact(GATED, path, opened.config, full, projects, fast.base)
    assert corrected.diagnostics == [] and corrected.base.distrust == {"forward"}

    typed = GATED.replace("    if new_api:", "    # typed\n    if new_api:")
    again = lint_python(typed, path, projects, corrected.base)
    assert not again.fast and again.diagnostics == []  # the whole buffer: no AMP001 again
    assert again.base.distrust == {"forward"}  # kept across that full lint
    elsewhere = lint_python(typed.replace("x + 1", "x + 2"), path, projects, again.base)
    assert elsewhere.fast and elsewhere.diagnostics == []  # other definitions stay on the fast path
    assert elsewhere.base.distrust == {"forward"}


def test_the_definitions_where_the_full_lint_disagrees_are_distrusted() -> None:
    import dataclasses

    from amplint.core.diagnostics import Location
    from amplint.server.incremental import distrusted

    config = Config()
    codes, rules = selected_rules(config)
    base = _base(PROBED, "train.py", config)
    edited = PROBED.replace("x + 1", "x + 2")
    got = relint(base, edited, "train.py", config, rules, codes)
    assert got is not None
    assert distrusted(got.base, full_lint(edited, "train.py", config).raw) == frozenset()  # it agrees
    [finding] = got.base.raw  # AMP001 in `forward`
    assert distrusted(got.base, []) == {"forward"}  # the full lint lacks it
    row = edited.split("\n").index("    return x + 2") + 1
    elsewhere = dataclasses.replace(finding, location=Location(row, 5), end_location=Location(row, 10))
    assert distrusted(got.base, [finding, elsewhere]) == {"other"}  # the full lint has one more, in `other`
