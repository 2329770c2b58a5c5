"""Honest verdicts: `confirmed` / `not-reproduced` only when the user's own code ran.

The first half needs no torch: the rule that turns a reference-only result into
`inconclusive` (in the worker's verdict builders and again in the parent), and
how the text report shows it. The second half runs real-looking training code
through the worker: the false-positive shapes of issue 14 must never come out
`confirmed`, and the buggy variant of each must (so the verdict can go both ways).
"""
from __future__ import annotations


import pytest

from amplint import Diagnostic, Location, Severity
from amplint.report import renderer
from amplint.verify.verdicts import Verdicts, could_not_run, honest

from .verify_helpers import needs_torch, runner  # noqa: F401  (runner: the module's CPU worker fixture)


def _reference_only(verdict: str = "confirmed", **evidence) -> dict:
    return {"verdict": verdict, "reason": None, "method": "experiment", "summary": "skipped 8 of 10 steps", "evidence": dict(evidence), "dtype": "fp16"}


# ------------------------------------------------------------------ the rule (no torch)


@pytest.mark.parametrize("verdict", ["confirmed", "not-reproduced"])
def test_reference_only_results_are_inconclusive_with_the_reference_attached(verdict):
    v = honest(_reference_only(verdict, snippet_skipped="could not bind tgt, meters", skipped=8))
    assert (v["verdict"], v["method"], v["summary"]) == ("inconclusive", "experiment", None)
    assert v["reason"] == "could not run this code: tgt, meters"
    assert v["evidence"] == {"snippet_skipped": "could not bind tgt, meters"}
    assert v["reference"] == {"verdict": verdict, "summary": "skipped 8 of 10 steps", "evidence": {"skipped": 8}}
    assert honest(v) == v  # idempotent: the parent applies it again


def test_verdicts_about_the_users_code_stand():
    lab = Verdicts()
    ran = lab.confirmed("clip saw 65536x", {"ratio": 65536.0}, method="snippet")
    assert ran["verdict"] == "confirmed" and "reference" not in ran
    assert lab.not_reproduced("same update", {}, method="snippet")["verdict"] == "not-reproduced"
    # the builders apply the rule: an experiment cannot confirm on its own
    ref = lab.confirmed("clip saw 65536x", {"ratio": 65536.0})
    assert ref["verdict"] == "inconclusive" and ref["reference"]["evidence"] == {"ratio": 65536.0}
    # inconclusive and error keep their own reason
    assert lab.needs_cuda("a CUDA kernel")["reason"] == "needs CUDA"
    assert lab.error("boom")["verdict"] == "error"
    assert lab.inconclusive("timeout after 60 s")["reason"] == "timeout after 60 s"


@pytest.mark.parametrize(
    "skipped,reason",
    [
        ("could not bind self.meter", "could not run this code: self.meter"),
        ("not run: `.save`", "could not run this code: refused `.save`"),
        ("the flagged code raised KeyError with and without scaling: 'x'", "could not run this code: the flagged code raised KeyError with and without scaling: 'x'"),
        (None, "could not run this code: no runnable flagged code for this finding"),
    ],
)
def test_the_reason_names_what_blocked_the_run(skipped, reason):
    assert could_not_run({"snippet_skipped": skipped} if skipped else {}) == reason


def test_the_parent_rechecks_what_the_worker_sends(monkeypatch):
    """A worker (or the code it ran) that claims `confirmed` without running the user's code is not believed."""
    import amplint.verify as verify

    class ForgingRunner:
        def start(self):
            return {}

        def run(self, code, data):
            return {"verdict": "confirmed", "method": "experiment", "summary": "trust me", "evidence": {}}

        def close(self):
            pass

    monkeypatch.setattr(verify, "torch_available", lambda: True)
    d = _diagnostic("AMP402", None)
    d.data = {}
    verify.verify_diagnostics([d], runner=ForgingRunner())
    assert d.verification["verdict"] == "inconclusive" and d.verification["reference"]["summary"] == "trust me"


# ------------------------------------------------------------------ the text report (no torch)


def _diagnostic(code: str, verification, row: int = 8) -> Diagnostic:
    return Diagnostic(
        code=code,
        name="x",
        message="message",
        severity=Severity.WARNING,
        filename="train.py",
        location=Location(row, 5),
        end_location=Location(row, 9),
        verification=verification,
    )


def test_text_shows_the_reference_once_per_rule_and_ends_with_a_verdict_count():
    ref = honest(_reference_only("confirmed", snippet_skipped="could not bind meters", skipped=8))
    ran = {"verdict": "not-reproduced", "method": "snippet", "summary": "same update as unscaled training", "evidence": {}, "device": "cpu", "torch": "2.13.0"}
    ds = [_diagnostic("AMP402", dict(ref, device="cpu", torch="2.13.0"), 10), _diagnostic("AMP402", dict(ref), 20), _diagnostic("AMP104", ran, 30)]
    lines = [ln for ln in renderer("text")(ds).splitlines() if ln.strip()]  # findings, verdicts, summary
    assert lines[1] == "    verify: inconclusive (could not run this code: meters) [experiment] (cpu, torch 2.13.0)"
    assert lines[2] == "    reference AMP402: confirmed on the rule's own example, not this code: skipped 8 of 10 steps"
    assert lines[3].startswith("train.py:20:5: AMP402") and lines[4].startswith("    verify: inconclusive")
    assert lines[5].startswith("train.py:30:5: AMP104")  # the shared reference is not repeated
    assert lines[6] == "    verify: not-reproduced [snippet] same update as unscaled training (cpu, torch 2.13.0)"
    assert lines[-1] == "Verified 3 findings: 0 confirmed, 1 not-reproduced, 2 inconclusive, 0 error; 1 ran the user's code."


def test_text_without_verify_has_no_verdict_count():
    assert "Verified" not in renderer("text")([_diagnostic("AMP101", None)])


def test_verdict_text_is_one_line_whatever_the_code_printed():
    hostile = {
        "verdict": "inconclusive",
        "method": "snippet",
        "reason": "the flagged code raised ValueError: x\n::error file=a.py::forged\x1b[2J",
        "summary": None,
        "evidence": {},
    }
    text = renderer("text")([_diagnostic("AMP301", hostile)])
    assert "\n::error" not in text and "\x1b" not in text
    assert "\\x0a::error file=a.py::forged\\x1b[2J" in text


# ------------------------------------------------------------------ the false-positive shapes (worker)

# pix2pixHD-style: one GradScaler, generator and discriminator stepped through it, one update() per
# iteration (the documented multi-optimizer pattern). The first step has no update() of its own.
GAN_SHARED_UPDATE = """\
        optimizer_G.zero_grad()
        if opt.fp16:
            scaler.scale(loss_G).backward()
            scaler.step(optimizer_G)
            # update the scaler only once per iteration
        else:
            loss_G.backward()
            optimizer_G.step()

        optimizer_D.zero_grad()
        if opt.fp16:
            scaler.scale(loss_D).backward()
            scaler.step(optimizer_D)
            scaler.update()
        else:
            loss_D.backward()
            optimizer_D.step()
"""
GAN_NO_UPDATE = GAN_SHARED_UPDATE.replace("            scaler.update()\n", "")

# a trainer whose accumulation boundary is an early return
EARLY_RETURN = """\
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch) / self.accum_steps
        self.scaler.scale(loss).backward()
        if (step + 1) % self.accum_steps != 0:
            return loss.item()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()
"""
# the bug: unscale_ before the boundary, so on every micro-batch
EARLY_RETURN_BUG = EARLY_RETURN.replace(
    "        self.scaler.scale(loss).backward()\n", "        self.scaler.scale(loss).backward()\n        self.scaler.unscale_(self.optimizer)\n"
).replace("        self.scaler.unscale_(self.optimizer)\n        torch.nn.utils", "        torch.nn.utils")

# the region's `enabled` flag is off on the branch with the plain backward
FLAG_BRANCH = """\
import torch
import torch.nn.functional as F


def train_epoch(model, loader, optimizer, scaler, device, use_amp):
    model.train()
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            logits = model(images)
            loss = F.cross_entropy(logits, targets)
        if use_amp:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
"""


@needs_torch
@pytest.mark.parametrize(
    "code,source,verdict",
    [
        ("AMP103", GAN_SHARED_UPDATE, "not-reproduced"),
        ("AMP103", GAN_NO_UPDATE, "confirmed"),
        ("AMP104", EARLY_RETURN, "not-reproduced"),
        ("AMP104", EARLY_RETURN_BUG, "confirmed"),
    ],
    ids=["gan-shared-update", "gan-no-update", "early-return-boundary", "unscale-before-early-return"],
)
def test_false_positive_shapes_run_the_users_code(runner, code, source, verdict):
    v = runner.run(code, {"step_source": source, "dtype": "fp16", "device": "cuda"})
    assert (v["verdict"], v["method"]) == (verdict, "snippet"), v


@needs_torch
def test_two_optimizers_are_two_optimizers(runner):
    v = runner.run("AMP103", {"step_source": GAN_SHARED_UPDATE})
    ev = v["evidence"]
    # both optimizers stepped through the one scaler; its one update() per iteration backed off after the overflow
    assert "backed off 65536 -> 32768" in v["summary"] and not ev.get("error"), v


@needs_torch
def test_plain_backward_on_the_amp_off_branch_is_not_reproduced(runner, tmp_path):
    from amplint import Config, lint_paths

    path = tmp_path / "train.py"
    path.write_text(FLAG_BRANCH)
    found = lint_paths([str(path)], Config(root=str(tmp_path))).diagnostics
    assert not [d for d in found if d.code == "AMP105"]  # the linter is silent, and were it not, the verifier:
    slice_ = "\n".join(FLAG_BRANCH.splitlines()[9:18])
    assert slice_.lstrip().startswith("with torch.autocast") and slice_.rstrip().endswith("loss.backward()")
    v = runner.run("AMP105", {"step_source": slice_, "loss": "loss", "region_row": 10, "device": "cuda", "dtype": "fp16"})
    assert (v["verdict"], v["method"]) == ("not-reproduced", "snippet"), v
    assert "unscaled backward ran without fp16 ops" in v["summary"] and "went through the GradScaler" in v["summary"]


@needs_torch
def test_plain_backward_with_amp_on_is_confirmed_from_the_linted_file(runner, tmp_path):
    """The buggy variant, end to end: the rule's own slice of the file, run by the verifier."""
    from amplint import Config, lint_paths
    from amplint.verify import verify_diagnostics

    path = tmp_path / "train.py"
    path.write_text(FLAG_BRANCH.replace("scaler, device, use_amp", "device, use_amp").split("        if use_amp:")[0] + "        loss.backward()\n        optimizer.step()\n")
    found = [d for d in lint_paths([str(path)], Config(root=str(tmp_path))).diagnostics if d.code == "AMP105"]
    assert len(found) == 1 and "step_source" in found[0].data
    verify_diagnostics(found, runner=runner)
    v = found[0].verification
    assert (v["verdict"], v["method"]) == ("confirmed", "snippet"), v
    assert "no GradScaler (with its AMP flags on)" in v["summary"]


# ------------------------------------------------------------------ lazy binding (no torch)


def test_an_unbound_name_never_stands_for_a_value():
    from amplint.verify.snippet import Missing, Unbound

    m = Missing("meters")
    uses = [lambda: m + 1, lambda: 1 - m, lambda: bool(m), lambda: m.update(1), lambda: m(), lambda: iter(m), lambda: m[0], lambda: 1 < m, lambda: f"{m}"]
    for use in uses:
        with pytest.raises(Unbound) as err:
            use()
        assert err.value.names[0].startswith("meters")
    # the user's own `except Exception:` cannot swallow it (a verdict must not rest on a skipped line)
    with pytest.raises(Unbound):
        exec("try:\n    meters.update(loss)\nexcept Exception:\n    pass\n", {"meters": m, "loss": 1.0})
    assert repr(m) == "<unbound meters>"
