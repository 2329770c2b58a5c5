"""The file's own definitions a flagged snippet uses, read by the parent (no torch here)."""
from __future__ import annotations

from amplint import Diagnostic, Location, Severity
from amplint.verify.prelude import Preludes, prelude_for, saved_object

TRAIN = '''\
import torch

NEG_INF = -1e9
emit = print


def grad_ok(step, every):
    return step % every == 0


def train(model, loader, optimizer, scaler, log_every=50):
    running = 0.0
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if grad_ok(step, log_every):
            emit(step)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        running += loss.item()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss": running / len(loader)}
    torch.save(state, "ckpt.pt")


def masked(scores, mask):
    return scores.masked_fill(mask == 0, NEG_INF)
'''

STEP = '''\
        scaler.scale(loss).backward()
        if grad_ok(step, log_every):
            emit(step)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)'''


def test_a_step_gets_its_helpers_constants_and_parameter_defaults():
    prelude, names = prelude_for(TRAIN, 19, STEP, {}, training=True)
    assert names == ["emit", "grad_ok", "log_every"]
    assert prelude.splitlines()[0] == "log_every = 50"
    assert "def grad_ok(step, every):" in prelude and "emit = print" in prelude
    # role-bound names (model, scaler, loss, step, optimizer) are never taken from the file
    assert "mse_loss" not in prelude and "enumerate" not in prelude


def test_an_expression_gets_the_files_constant_not_a_tensor():
    prelude, names = prelude_for(TRAIN, 29, "scores.masked_fill(mask == 0, NEG_INF)", {}, training=False)
    assert (prelude.strip(), names) == ("NEG_INF = -1e9", ["NEG_INF"])


def test_a_saved_object_gets_the_local_that_builds_it():
    obj = saved_object('torch.save(state, "ckpt.pt")')
    assert obj == "state"
    prelude, names = prelude_for(TRAIN, 24, obj, {}, training=True)
    # transitively: `state` reads `running`, so its assignment comes first (file order)
    assert names == ["running", "state"] and prelude.splitlines() == ["running = 0.0", prelude.splitlines()[1]]
    assert prelude.splitlines()[1].startswith("state = {")


def test_nothing_is_lifted_when_everything_binds():
    assert prelude_for(TRAIN, 19, "scaler.scale(loss).backward()\nscaler.step(optimizer)", {}, training=True) == ("", [])


def test_preludes_leave_the_finding_alone(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    d = Diagnostic(code="AMP101", name="x", message="m", severity=Severity.ERROR, filename=str(path), location=Location(19, 9), end_location=Location(19, 60))
    d.data = {"step_source": STEP}
    data = Preludes().data_for(d)
    assert data["prelude_names"] == ["emit", "grad_ok", "log_every"] and "prelude" not in d.data


def test_a_module_passed_in_and_called_gets_a_tiny_real_module():
    text = (
        "import torch\n\ndef train_epoch(model, head, loader, optimizer, scaler):\n    for x, y in loader:\n"
        "        with torch.autocast('cuda'):\n            logits = head(model(x))\n            loss = logits.sum()\n"
        "        scaler.scale(loss).backward()\n"
    )
    step = "        with torch.autocast('cuda'):\n            logits = head(model(x))\n            loss = logits.sum()\n        scaler.scale(loss).backward()"
    prelude, names = prelude_for(text, 8, step, {}, training=True)
    assert (prelude, names) == ("head = __amplint_module__()", ["head"])  # `model` stays the lab's model
