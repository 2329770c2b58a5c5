"""`amplint run` across ranks (issue 23 item 4): AMP702 when the ranks of one run disagree on a skipped
step or a loss scale, judged from every rank's step records once the run ends.

Two real gloo ranks on CPU (`torch.distributed.run --nproc_per_node=2`) train a row-sharded linear layer
(tests/data/watch/train_shards.py: an FSDP1-style stand-in, since FSDP1 needs an accelerator) whose
step-3 gradient overflows in rank 1's shard only: with a plain GradScaler rank 1 skips and rank 0 steps;
with FSDP's ShardedGradScaler both skip. The rest are the comparison on hand-written records."""
from __future__ import annotations

import os

from amplint.watch.findings import rank_disagreement, summary
from amplint.watch.report import page_data

from .watch_helpers import DATA, events, line_of, of_type, torchrun_watched

SHARDS = os.path.join(DATA, "train_shards.py")


def _torchrun(tmp_path, mode):
    report = str(tmp_path / f"rep-{mode}")
    run = torchrun_watched(report, SHARDS, mode, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    return run, report


def _series(evs, rank):
    steps = [s for s in of_type(evs, "step") if s["rank"] == rank]
    return [s["skipped"] for s in steps], [s["loss_scale"] for s in steps]


def test_one_rank_overflows_with_a_plain_grad_scaler(tmp_path):
    run, report = _torchrun(tmp_path, "plain")
    lines = sorted(line.rsplit(" ", 1)[0] for line in run.stdout.split("\n") if line)
    assert lines == ["done 0 1024", "done 1 512"]  # the program's own scalers disagree
    evs = events(report)
    skipped0, scales0 = _series(evs, 0)
    skipped1, scales1 = _series(evs, 1)
    assert skipped0 == [False] * 8 and scales0 == [1024.0] * 8
    assert skipped1 == [False, False, True] + [False] * 5 and scales1 == [1024.0, 1024.0] + [512.0] * 6
    [found] = [f for f in of_type(evs, "finding") if f["code"] == "AMP702"]
    assert found["message"] == ("ranks disagree on step 3: rank 1 skipped it (inf/NaN gradients), rank 0 stepped; "
                                "first non-finite: gradient of `ShardedLinear` on rank 1")
    assert (found["filename"], found["line"]) == (SHARDS, line_of(SHARDS, "model = ShardedLinear(8)"))
    assert found["step"] == 3 and found["rank"] == 1 and found["first_ranks"] == [1]
    assert found["scales"] == {"0": 1024.0, "1": 512.0}
    assert {s["rank"]: s["class"] for s in of_type(evs, "scaler")} == {0: "GradScaler", 1: "GradScaler"}
    assert f"{SHARDS}:{found['line']}: AMP702 ranks disagree on step 3" in run.stderr
    page = page_data(evs)
    assert [r["rank"] for r in page["ranks"]] == [0, 1] and page["ranks"][1]["skipped"][2] == 1
    assert [(f["code"], f["rank"], f["step"]) for f in page["findings"]] == [("AMP702", 1, 3)]
    html = open(os.path.join(report, "report.html"), encoding="utf-8").read()
    assert '"code": "AMP702"' in html


def test_the_sharded_grad_scaler_keeps_the_ranks_together(tmp_path):
    run, report = _torchrun(tmp_path, "sharded")
    lines = sorted(line.rsplit(" ", 1)[0] for line in run.stdout.split("\n") if line)
    assert lines == ["done 0 512", "done 1 512"]
    evs = events(report)
    for rank in (0, 1):  # ShardedGradScaler's own scale/unscale_/update are observed too
        skipped, scales = _series(evs, rank)
        assert skipped == [False, False, True] + [False] * 5 and scales == [1024.0, 1024.0] + [512.0] * 6
    assert {s["rank"]: s["class"] for s in of_type(evs, "scaler")} == {0: "ShardedGradScaler", 1: "ShardedGradScaler"}
    assert not [f for f in of_type(evs, "finding") if f["code"] == "AMP702"]
    assert "AMP702" not in run.stderr


def _step(rank, step, before, after, skipped=False):
    return {"type": "step", "rank": rank, "step": step, "loss_scale_before": before, "loss_scale": after, "skipped": skipped}


def test_scales_that_diverge_without_a_disagreeing_skip():
    evs = [_step(0, 1, 8.0, 8.0), _step(1, 1, 8.0, 8.0), _step(0, 2, 8.0, 16.0), _step(1, 2, 8.0, 8.0),
           {"type": "scaler", "rank": 0, "class": "GradScaler", "filename": "t.py", "line": 9}]
    found = rank_disagreement(evs)
    assert found["message"] == "loss scales diverge across ranks at step 2: 16 (rank 0), 8 (rank 1)"
    assert (found["filename"], found["line"], found["step"], found["rank"]) == ("t.py", 9, 2, 0)


def test_scales_that_differ_from_the_start_and_the_first_rank_of_several():
    evs = [_step(0, 1, 1024.0, 1024.0), _step(1, 1, 512.0, 512.0)]
    assert rank_disagreement(evs)["message"] == "loss scales differ across ranks at step 1: 1024 (rank 0), 512 (rank 1)"
    evs = [_step(r, 1, 8.0, 8.0) for r in range(3)] + [_step(0, 2, 8.0, 8.0), _step(1, 2, 8.0, 4.0, True),
                                                       _step(2, 2, 8.0, 4.0, True)]
    found = rank_disagreement(evs)
    assert found["message"] == ("ranks disagree on step 2: ranks 1, 2 skipped it (inf/NaN gradients), rank 0 stepped; "
                                "first non-finite: ranks 1, 2 at step 2")
    assert found["first_ranks"] == [1, 2] and found["rank"] == 1


def test_agreeing_ranks_and_one_rank_give_nothing():
    together = [_step(r, s, 8.0, 4.0 if s == 2 else 8.0, s == 2) for r in (0, 1) for s in (1, 2)]
    assert rank_disagreement(together) is None
    assert rank_disagreement([_step(0, 1, 8.0, 4.0, True)]) is None
    assert rank_disagreement([_step(r, 1, None, None) for r in (0, 1)]) is None  # no scaler: nothing to compare
    assert "AMP702" not in summary(together)


def test_fsdp2_with_the_plain_scaler_agrees_and_the_guard_adds_no_collective(tmp_path):
    """The real FSDP2 (`fully_shard`): the overflow is in rank 1's local shard only, DTensor's unscale
    all-reduces found-inf, both ranks skip. The guard reads DTensor gradients as local shards (a
    collective from the guard on rank 1 alone would hang the run): rank 0's step-3 norm is finite."""
    run, report = _torchrun(tmp_path, "fsdp2")
    lines = sorted(line.rsplit(" ", 1)[0] for line in run.stdout.split("\n") if line)
    assert lines == ["done 0 512", "done 1 512"]
    evs = events(report)
    for rank in (0, 1):
        skipped, scales = _series(evs, rank)
        assert skipped == [False, False, True] + [False] * 5 and scales == [1024.0, 1024.0] + [512.0] * 6
    norms = {s["rank"]: s["grad_norm"] for s in of_type(evs, "step") if s["step"] == 3}
    assert norms[1] is None and norms[0] is not None  # rank 1's local shard held the inf, rank 0's did not
    [source] = of_type(evs, "nonfinite")
    assert source["rank"] == 1 and source["kind"] == "gradient"
    assert not [f for f in of_type(evs, "finding") if f["code"] == "AMP702"]
