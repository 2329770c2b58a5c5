"""The training-step rules hand the verifier the user's own step, and the verifier runs it.

For AMP102/103/104: the linter's `step_source` for a flagged file runs as a
snippet (`method == "snippet"`) and confirms; a step whose names cannot be
bound falls back to the canonical reproduction (`method == "experiment"`).
Also: every rule with an experiment emits the `data` keys docs/verifier.md
promises for it (the "rule emits" column of the contract table).
"""
from __future__ import annotations

import ast
import os
import re
import textwrap

import pytest

from amplint.core.config import Config
from amplint.engine.registry import all_rules
from amplint.engine.run import lint_source

from .verify_helpers import needs_torch, runner  # noqa: F401  (runner: the module's CPU worker fixture)

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "verifier.md")


def _findings(source: str, code: str):
    # select the rule itself: info rules (AMP108, AMP601, AMP602) are off by default
    config = Config(select=(code,))
    return [d for d in lint_source(textwrap.dedent(source).lstrip("\n"), "train.py", config) if d.code == code]


def _data(source: str, code: str) -> dict:
    found = _findings(source, code)
    assert len(found) == 1, found
    return dict(found[0].data or {})


# ------------------------------------------------------------ what the rules emit (no torch)

AMP102_SELF = """
import torch

class Seq2Seq:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, src, tgt):
        self.optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(src, tgt)
        self.scaler.scale(loss).backward()
        self.optimizer.step()
        self.scaler.update()
        return loss.item()
"""

AMP102_UNBINDABLE = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    my_hook(model)
    optimizer.step()
    scaler.update()
"""

AMP103_LOOP = """
import torch

def fit(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
"""

AMP103_UNBINDABLE = """
import torch

def fit(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        ema.update_from(model)
        scaler.step(optimizer)
"""

AMP104_ACCUM = """
import torch
import torch.nn.functional as F

def train(model, loader, accum_steps=8, max_norm=1.0):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for i, (images, labels) in enumerate(loader):
        images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(images), labels) / accum_steps
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if (i + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
"""

AMP104_BATCH = """
from torch import amp
scaler = amp.GradScaler()
for step, batch in enumerate(dataloader):
    scaler.scale(model(batch) / accum).backward()
    scaler.unscale_(opt)
    if (step + 1) % accum == 0:
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
"""

AMP104_UNBINDABLE = """
import torch
scaler = torch.amp.GradScaler("cuda")
for step, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    scaler.unscale_(optimizer)
    stats.record(grad_norm(model))
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


def test_amp102_emits_the_step_through_update():
    data = _data(AMP102_SELF, "AMP102")
    assert data["step_source"].splitlines() == [
        "        self.scaler.scale(loss).backward()",
        "        self.optimizer.step()",
        "        self.scaler.update()",
    ]
    assert data["dtype"] == "fp16" and data["device"] == "cuda"
    assert data["optimizer_class"] == "torch.optim.SGD"


def test_amp103_emits_the_step_and_amp104_the_loop_body():
    data = _data(AMP103_LOOP, "AMP103")
    assert data["step_source"].split() == ["scaler.scale(loss).backward()", "scaler.step(optimizer)"]
    data = _data(AMP104_ACCUM, "AMP104")
    body = data["step_source"].splitlines()
    assert body[0].strip().startswith("images, labels = images.cuda(") and body[-1].strip() == "optimizer.zero_grad(set_to_none=True)"
    assert data["shape"] == "every" and data["dtype"] == "fp16"


def test_step_slice_helper_is_shared():
    """One helper builds every step slice (amplint/model/steps.py); no rule keeps its own."""
    rules_dir = os.path.join(os.path.dirname(DOCS), "..", "rules")
    for name in ("amp101", "amp102", "amp103", "amp104"):
        path = next(f for f in os.listdir(rules_dir) if f.startswith(name))
        text = open(os.path.join(rules_dir, path), encoding="utf-8").read()
        imported = {a.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom) and n.module == "amplint.model" for a in n.names}
        assert {"step_data", "step_source"} <= imported, path  # amplint.model re-exports model/steps.py
        assert "def _step_source" not in text and "lines[start.row - 1" not in text, path


def test_scaled_name_assignment_starts_the_slice():
    data = _data(
        """
import torch
def step(model, opt, scaler, loss):
    scaled = scaler.scale(loss)
    scaled.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
""",
        "AMP101",
    )
    assert data["step_source"].split("\n")[0].strip() == "scaled = scaler.scale(loss)"
    assert data["step_source"].split("\n")[-1].strip() == "scaler.update()"


# ------------------------------------------------------------ the contract table


def _contract() -> dict:
    """{rule: [keys]} from the "rule emits" column of docs/verifier.md's per-rule table (None
    where it says "(none)")."""
    text = open(DOCS, encoding="utf-8").read()
    table = text.split("\n| rule | rule emits", 1)[1]
    header = "| rule | rule emits" + table.split("\n", 1)[0]
    columns = [c.strip() for c in header.strip("|").split("|")]
    emits = columns.index("rule emits")
    out = {}
    for line in table.splitlines()[2:]:  # below the header and its |---| line
        if not line.startswith("|"):
            break  # the table ends; later tables of the page have rows per rule too
        if not re.match(r"^\| AMP\d{3} ", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[emits] == "(none)":
            out[cells[0]] = None  # the rule says it emits nothing the experiment reads
            continue
        accelerate = re.search(r"after accelerate's fp16 `backward`: (.*?), and the verdict", cells[emits])
        if accelerate:  # what a finding after accelerate's backward carries instead
            out[cells[0] + ":accelerate"] = re.findall(r"`([a-z_]+)`", accelerate.group(1))
        fabric = re.search(r"after Fabric's: (.*?), likewise", cells[emits])
        if fabric:  # ... and after Lightning Fabric's
            out[cells[0] + ":fabric"] = re.findall(r"`([a-z_]+)`", fabric.group(1))
        lightning = re.search(r"after Lightning's fp16 `self.manual_backward`: (.*?), for the same reason", cells[emits])
        if lightning:  # ... and after a LightningModule's manual_backward
            out[cells[0] + ":lightning"] = re.findall(r"`([a-z_]+)`", lightning.group(1))
        out[cells[0]] = re.findall(r"`([a-z_]+)`", cells[emits].split("(")[0] if "(" in cells[emits] else cells[emits])
    return out


def test_every_rule_with_an_experiment_emits_the_documented_keys():
    from amplint.verify import experiment_codes  # no torch in this process

    contract = _contract()
    assert not [c for c, keys in contract.items() if keys == []], "a row whose keys were not read"
    codes = set(experiment_codes())
    assert codes <= set(contract), sorted(codes - set(contract))
    for rule in all_rules():
        if rule.code not in codes:
            continue
        seen = 0
        for example in rule.INVALID:
            for d in _findings(example.code, rule.code):
                seen += 1
                data = d.data or {}
                framework = data.get("framework")
                keys = contract[f"{rule.code}:{framework}"] if framework in ("accelerate", "fabric", "lightning") else contract[rule.code]
                missing = [k for k in keys or () if k not in data]
                assert not missing, f"{rule.code} INVALID finding at {d.location} lacks {missing}"
        assert seen, rule.code


# ------------------------------------------------------------ the verifier runs the user's step


@needs_torch
@pytest.mark.parametrize(
    "code, source, method",
    [
        ("AMP102", AMP102_SELF, "snippet"),
        ("AMP102", AMP102_UNBINDABLE, "experiment"),
        ("AMP103", AMP103_LOOP, "snippet"),
        ("AMP103", AMP103_UNBINDABLE, "experiment"),
        ("AMP104", AMP104_ACCUM, "snippet"),
        ("AMP104", AMP104_BATCH, "snippet"),
        ("AMP104", AMP104_UNBINDABLE, "experiment"),
    ],
    ids=["102-self", "102-unbindable", "103-loop", "103-unbindable", "104-cuda-loop", "104-batch", "104-unbindable"],
)
def test_user_step_runs_or_falls_back(runner, code, source, method):
    data = _data(source, code)
    assert data.get("step_source")
    v = runner.run(code, data)
    assert v["method"] == method, v
    skipped = (v.get("evidence") or {}).get("snippet_skipped")
    if method == "experiment":  # the user's step could not run: no verdict on it, the reference attached
        assert v["verdict"] == "inconclusive" and v["reference"]["verdict"] == "confirmed", v
        assert skipped and skipped.startswith("could not bind"), v
        assert v["reason"] == "could not run this code: " + skipped[len("could not bind ") :], v
    else:
        assert v["verdict"] == "confirmed", v
        assert not skipped, v


@needs_torch
def test_snippet_verdicts_name_what_the_user_code_raised(runner):
    v = runner.run("AMP104", _data(AMP104_ACCUM, "AMP104"))
    assert v["evidence"]["error"]["type"] == "RuntimeError"
    assert "unscale_() has already been called" in v["evidence"]["error"]["message"]
    assert v["evidence"]["error"]["iteration"] == 1  # the second micro-batch
    v = runner.run("AMP103", _data(AMP103_LOOP, "AMP103"))
    assert "step() has already been called" in v["summary"]


@needs_torch
def test_same_step_same_verdict(runner):
    data = _data(AMP102_SELF, "AMP102")
    a, b = runner.run("AMP102", data), runner.run("AMP102", data)
    a.pop("duration_s", None), b.pop("duration_s", None)
    assert a == b
