"""The blind drill's data and its scoring (benchmarks/blind_drill.py): labels well-formed, the split
recorded, findings matched to blind labels the way docs/precision.md describes."""
import argparse
import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import blind_drill  # noqa: E402


def test_projects_are_pinned_and_each_held_out_split_is_its_recorded_draw():
    projects = blind_drill.load_projects()
    assert len(projects) >= 40
    assert len({p["repo"] for p in projects}) == len(projects)
    for p in projects:
        assert len(p["commit"]) == 40 and int(p["commit"], 16) >= 0
        assert p["split"] in blind_drill.SPLITS
    draws = {d["split"]: d for d in json.loads(blind_drill.PROJECTS_FILE.read_text())["draws"]}
    split_of = {p["repo"]: p["split"] for p in projects}
    first = sorted(p["repo"].replace("/", "+") for p in projects if p["split"] in ("tuning", "read"))
    read = random.Random(draws["read"]["seed"]).sample(first, len(first) // 3)
    assert {split_of[k.replace("+", "/", 1)] for k in read} == {"read"}
    assert sum(s == "read" for s in split_of.values()) == len(read)
    for split in ("read2", "read3", "read4", "read5", "read6", "read7", "read8", "read9", "read10", "read11", "read12", "read13", "read14", "read15", "read16", "heldout"):
        pool = draws[split]["pool"]
        held = set(random.Random(draws[split]["seed"]).sample(sorted(pool), 20))
        assert held == {r for r, s in split_of.items() if s == split}
        assert set(draws[split]["not_drawn"]) == set(pool) - held
    # each later draw's pool is the one before's leftovers plus repositories never labelled before it
    order = ("read2", "read3", "read4", "read5", "read6", "read7", "read8", "read9", "read10", "read11", "read12", "read13", "read14", "read15", "read16", "heldout")
    for i, split in enumerate(order):
        assert all(split_of[r] in order[i:] for r in draws[split]["pool"] if r in split_of), split
    for before, after in zip(order, order[1:]):
        assert set(draws[before]["not_drawn"]) <= set(draws[after]["pool"])
    assert not set(draws["heldout"]["pool"]) & {r for r, s in split_of.items() if s != "heldout"}


def test_split_argument_takes_several_splits():
    assert blind_drill.in_split({"split": "read"}, "tuning,read")
    assert not blind_drill.in_split({"split": "heldout"}, "tuning,read")
    with pytest.raises(Exception):
        blind_drill.split_arg("tuning,bogus")


@pytest.mark.parametrize("path", sorted((BENCH / "blind_labels").glob("*.json")), ids=lambda p: p.stem)
def test_labels_are_well_formed(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = {blind_drill.project_key(p) for p in blind_drill.load_projects()}
    assert path.stem in keys
    for entry in data.get("pitfalls", []) + data.get("negatives", []):
        assert entry["cat"] in blind_drill.CATEGORY_CODES or entry["cat"] == "other", entry
        assert entry["file"] and not entry["file"].startswith("/")
        assert entry.get("lines") or isinstance(entry.get("line"), int)
        assert entry.get("why")
        for site in entry.get("also", []):  # a row of the same file, or "path:row" in another file
            assert isinstance(site, int) or str(site).rpartition(":")[2].isdigit(), site
    for a in data.get("adjudicated", []):
        assert a["verdict"] in ("correct", "fp") and a["reason"] and a["by"] == "adjudicated"
    for r in data.get("label_reviews", []):
        assert r["verdict"] in ("pitfall", "not-a-pitfall") and r["reason"] and r["by"] == "adjudicated"


def _finding(code, file, row, severity="warning"):
    return {"code": code, "file": file, "row": row, "column": 1, "severity": severity, "message": "m"}


LABELS = {
    "pitfalls": [
        {"cat": "S1", "file": "train.py", "line": 40, "also": [55], "why": "clip on scaled grads"},
        {"cat": "D1", "file": "train.py", "lines": [3, 9], "why": "torch.cuda.amp"},
        {"cat": "K1", "file": "ops.py", "line": 10, "why": "Function without custom_fwd"},
        {"cat": "C2", "file": "ckpt.py", "line": 7, "why": "no scaler state"},
        {"cat": "N2", "file": "loss.py", "line": 4, "confidence": "likely", "why": "1e-8"},
    ],
    "negatives": [{"cat": "N1", "file": "attn.py", "line": 20, "why": "fp32 only"}],
    "adjudicated": [
        {"code": "AMP402", "file": "trainer.py", "row": 90, "verdict": "correct", "reason": "same bug, resume side",
         "by": "adjudicated", "same_bug_as": {"cat": "C2", "file": "ckpt.py", "line": 7}},
        {"code": "AMP301", "file": "x.py", "row": 5, "verdict": "fp", "reason": "fp32", "by": "adjudicated"},
    ],
    "label_reviews": [{"cat": "N2", "file": "loss.py", "line": 4, "verdict": "not-a-pitfall", "reason": "fp32",
                       "by": "adjudicated"}],
}


def test_findings_are_judged_by_blind_labels_then_adjudications():
    findings = [
        _finding("AMP101", "train.py", 56),  # one of the bug's other lines (within a row)
        _finding("AMP001", "train.py", 3), _finding("AMP001", "train.py", 9),  # one unit per file
        _finding("AMP501", "ops.py", 12),  # reported at `forward`, below the labelled `class` line
        _finding("AMP402", "trainer.py", 90),  # adjudicated: the C2 label's bug at its resume site
        _finding("AMP301", "attn.py", 20),  # a blind negative
        _finding("AMP301", "x.py", 5),  # adjudicated fp
        _finding("AMP302", "other.py", 1),  # nothing decides it
        _finding("AMP601", "train.py", 1, severity="info"),  # info rules are not judged
    ]
    judged, found, missed = blind_drill.judge("p", findings, LABELS)
    verdicts = [(j.finding["code"], j.verdict, j.source) for j in judged]
    assert verdicts == [
        ("AMP101", "correct", "blind"), ("AMP001", "correct", "blind"), ("AMP501", "correct", "blind"),
        ("AMP402", "correct", "adjudicated"), ("AMP301", "fp", "blind"), ("AMP301", "fp", "adjudicated"),
        ("AMP302", "unjudged", ""),
    ]
    assert sorted(lab.code for lab in found) == ["AMP001", "AMP101", "AMP402", "AMP501"]
    assert missed == []  # the N2 label was reviewed as not a pitfall


def test_a_finding_far_from_the_label_is_not_that_label():
    judged, found, missed = blind_drill.judge("p", [_finding("AMP101", "train.py", 47)], LABELS)
    assert judged[0].verdict == "unjudged" and sorted(m.code for m in missed) == ["AMP001", "AMP101", "AMP402", "AMP501"]


def test_adjudications_merge_into_the_label_file_and_replace_an_earlier_verdict(tmp_path):
    (tmp_path / "o+r.json").write_text(json.dumps({"repo": "o/r", "pitfalls": [], "negatives": []}))
    first = [{"project": "o+r", "code": "AMP801", "file": "t.py", "row": 3, "verdict": "fp", "reason": "a"},
             {"project": "o+r", "code": "AMP001", "file": "t.py", "row": 1, "verdict": "", "reason": ""}]
    blind_drill.merge_verdicts(first, "adjudicated", lambda x: (x["code"], x["file"], int(x["row"])),
                               ("code", "file", "row", "verdict", "reason"), tmp_path)
    again = [{**first[0], "verdict": "correct", "reason": "b"}]
    blind_drill.merge_verdicts(again, "adjudicated", lambda x: (x["code"], x["file"], int(x["row"])),
                               ("code", "file", "row", "verdict", "reason"), tmp_path)
    data = json.loads((tmp_path / "o+r.json").read_text())
    assert data["adjudicated"] == [{"code": "AMP801", "file": "t.py", "row": 3, "verdict": "correct", "reason": "b", "by": "adjudicated"}]


def test_a_run_over_several_splits_keeps_one_findings_file_per_split(tmp_path, monkeypatch):
    monkeypatch.setenv("AMPLINT_CORPUS_DIR", str(tmp_path))
    projects = [{"repo": "a/one", "commit": "1" * 40, "split": "tuning"},
                {"repo": "b/two", "commit": "2" * 40, "split": "read2"}]
    monkeypatch.setattr(blind_drill, "load_projects", lambda: projects)
    monkeypatch.setattr(blind_drill, "mirror_of", lambda mirrors, key: tmp_path)
    monkeypatch.setattr(blind_drill, "export", lambda mirror, commit, into: into)
    monkeypatch.setattr(blind_drill, "lint", lambda folder, jobs: ([{"code": "AMP001"}], 0.0))
    args = argparse.Namespace(mirrors=str(tmp_path), split="tuning,read2", projects="", jobs=1)
    blind_drill.run(args)
    blind = tmp_path / "blind"
    assert set(json.loads((blind / "findings-tuning.json").read_text())) == {"a+one"}
    assert set(json.loads((blind / "findings-read2.json").read_text())) == {"b+two"}
    assert blind_drill.splits_of("tuning,read2") == ["tuning", "read2"]
    assert blind_drill.splits_of("all") == list(blind_drill.SPLITS)


def test_a_category_two_rules_share_matches_either_and_counts_a_miss_under_the_first():
    """R1 (a whole-model cast trained by a plain optimizer) is AMP201 in fp16 and AMP206 in bf16."""
    assert blind_drill.category_codes("R1") == ("AMP201", "AMP206") and blind_drill.category_codes("S1") == ("AMP101",)
    labels = {
        "pitfalls": [
            {"cat": "R1", "file": "train.py", "line": 12, "why": "model.bfloat16() trained by AdamW"},
            {"cat": "R1", "file": "train.py", "line": 30, "why": "model.half() trained by SGD"},
        ],
        "negatives": [{"cat": "R1", "file": "eval.py", "line": 5, "why": "inference copy"}],
    }
    findings = [_finding("AMP206", "train.py", 12), _finding("AMP206", "eval.py", 5), _finding("AMP101", "train.py", 30)]
    judged, found, missed = blind_drill.judge("p", findings, labels)
    assert [(j.finding["code"], j.verdict, j.source) for j in judged] == [
        ("AMP206", "correct", "blind"), ("AMP206", "fp", "blind"), ("AMP101", "unjudged", ""),
    ]
    assert [(lab.code, lab.rows[0]) for lab in found] == [("AMP206", 12)]  # counted under the rule that found it
    assert [(lab.code, lab.rows[0]) for lab in missed] == [("AMP201", 30)]


def test_an_amplint_that_did_not_run_fails_the_drill_rather_than_scoring_no_findings(tmp_path, monkeypatch):
    # an interpreter without amplint exits 1 with nothing on stdout: read as [] it would score "no findings"
    failed = blind_drill.subprocess.CompletedProcess([], 1, stdout="", stderr="No module named amplint")
    monkeypatch.setattr(blind_drill.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(SystemExit, match="exit 1"):
        blind_drill.lint(tmp_path, 1)


@pytest.mark.skipif(__import__("shutil").which("git") is None, reason="git is not installed")
def test_export_carries_the_index_a_clone_has(tmp_path):
    # a project whose .gitignore matches its own tracked code: the export lints it as a clone would
    import os
    import subprocess

    from amplint.core.config import Config
    from amplint.engine.discovery import discover

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    src = tmp_path / "src"
    (src / "sat").mkdir(parents=True)
    (src / "sat" / "train.py").write_text("x = 1\n")
    (src / "top.py").write_text("x = 1\n")
    (src / ".gitignore").write_text("**/sat\n")
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(["git", "add", "-f", "-A"], cwd=src, check=True)
    subprocess.run(["git", "commit", "-qm", "x"], cwd=src, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True).stdout.strip()
    target = tmp_path / "export"
    blind_drill.export(src / ".git", commit, target)
    found = sorted(os.path.relpath(p, target) for p in discover([str(target)], Config(root=str(target))))
    assert found == ["sat/train.py", "top.py"]
    (target / ".git" / "index").unlink()  # an export made before the index was written gets it on the next run
    blind_drill.export(src / ".git", commit, target)
    assert (target / ".git" / "index").exists()
