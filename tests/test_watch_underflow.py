"""AMP105 at run time measures underflow: the share of gradient values that are nonzero when the
loss is scaled and flushed to zero by the program's unscaled fp16 backward (amplint/watch/underflow.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .watch_helpers import DATA, events, line_of, of_type, watched

SCRIPT = os.path.join(DATA, "train_underflow.py")


@pytest.mark.parametrize("factor,low,high", [("1e-6", 0.5, 1.0), ("1", 0.0, 0.01)])
def test_flushed_share_measures_underflow_and_changes_nothing(tmp_path, factor, low, high):
    plain = subprocess.run([sys.executable, SCRIPT, factor], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    report = str(tmp_path / "rep")
    run = watched(report, SCRIPT, factor, cwd=str(tmp_path))
    assert plain.returncode == run.returncode == 0, run.stderr
    assert run.stdout == plain.stdout  # losses and weights bit for bit: the reference pass changed nothing
    [f] = of_type(events(report), "finding")
    assert (f["code"], f["line"]) == ("AMP105", line_of(SCRIPT, "loss.backward()"))
    assert low <= f["flushed_share"] <= high, f
    assert f["nonzero_scaled"] > 1000 and f["flushed"] == round(f["flushed_share"] * f["nonzero_scaled"])
    assert f"{100 * f['flushed_share']:.1f}% of the gradient values ({f['flushed']} of {f['nonzero_scaled']}) were flushed" in f["message"]


def test_probe_counts_only_values_the_scaled_pass_sees():
    torch = pytest.importorskip("torch")
    from amplint.watch import underflow

    w = torch.nn.Parameter(torch.ones(3))
    x = torch.tensor([1e-6, 0.0, 3.0])
    # d/dw = x * 1e-3 computed in fp16: 1e-9 underflows, 0 is zero in any precision (not counted), 3e-3 is fine
    loss = (w.half() * x.half()).sum() * 1e-3
    probe = underflow.before_backward(loss, None, [w])
    loss.backward()
    assert w.grad.tolist()[:2] == [0.0, 0.0] and w.grad.tolist()[2] != 0.0
    assert underflow.after_backward(probe) == (1, 2)
