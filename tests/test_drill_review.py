"""The real-code drill's hand review as data (benchmarks/drill_review.json): well-formed, precise
enough, shown as is in docs/precision.md, and compared with a run so any change is flagged.
The slow test lints four small drill packages and expects exactly the reviewed findings."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import drill_review  # noqa: E402
from corpus import DRILL_PACKAGES  # noqa: E402


def _finding(file="pkg/train.py", row=10, code="AMP001", severity="warning", package="yolov5==7.0.14"):
    return {"package": package, "file": file, "row": row, "column": 5, "code": code, "severity": severity, "message": "m"}


def _review(*entries, misses=()):
    return {"findings": list(entries), "misses": list(misses)}


def test_review_data_is_well_formed():
    assert drill_review.problems(drill_review.load(), DRILL_PACKAGES) == []


def test_problems_are_found_in_bad_review_data():
    good = drill_review.entry(_finding(), "correct", "deprecated")
    bad = [
        dict(good, verdict="maybe"),
        dict(good, why=" "),
        dict(good, package="yolov5==0.0.1"),
        drill_review.entry(_finding(code="AMP602", severity="info"), "correct", "advice"),
    ]
    for entry in bad:
        assert drill_review.problems(_review(entry), DRILL_PACKAGES), entry
    assert len(drill_review.problems(_review(good, good), DRILL_PACKAGES)) == 1  # a duplicate
    assert drill_review.problems(_review(good), DRILL_PACKAGES) == []


def test_warning_and_error_findings_are_at_least_95_percent_correct():
    judged = [e for e in drill_review.load()["findings"] if e["verdict"] != "info"]
    correct = sum(e["verdict"] == "correct" for e in judged)
    assert judged and correct / len(judged) >= 0.95, (correct, len(judged))


def test_docs_show_the_table_of_the_review_data():
    docs = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert drill_review.table(drill_review.load()) in docs


def test_table_counts_precision_over_findings_and_recall_over_known_pitfalls():
    review = _review(
        drill_review.entry(_finding(row=1), "correct", "r"),
        drill_review.entry(_finding(row=2), "fp", "r"),
        drill_review.entry(_finding(row=3, code="AMP602", severity="info"), "info", "r"),
        misses=[{"package": "yolov5==7.0.14", "file": "a.py", "row": 4, "code": "AMP001", "why": "r"}],
    )
    assert "| AMP001 | 2 | 1 | 1 | 1 | 1/2 = 50% | 1/2 = 50% |" in drill_review.table(review)
    assert "AMP602" not in drill_review.table(review)


def test_compare_flags_new_moved_gone_and_changed_findings():
    reviewed = [_finding(row=10), _finding(row=20), _finding(row=30, severity="error", code="AMP301")]
    review = _review(*(drill_review.entry(f, "correct", "r") for f in reviewed))
    run = [_finding(row=10), _finding(row=21), _finding(row=30, severity="warning", code="AMP301")]
    result = drill_review.compare(run, review, ["yolov5==7.0.14"], ("ALL",))
    assert [f["row"] for f in result.unreviewed] == [21, 30]  # moved, and changed severity
    assert sorted(e["row"] for e in result.gone) == [20, 30]
    assert [f["row"] for f, _ in result.matched] == [10]
    # packages that did not run are not gone
    assert drill_review.compare([], review, ["trainer==0.0.36"], ("ALL",)).gone == []


def test_info_findings_are_expected_only_when_info_rules_run():
    review = _review(drill_review.entry(_finding(code="AMP602", severity="info"), "info", "advice"))
    assert drill_review.compare([], review, ["yolov5==7.0.14"], ()).gone == []
    assert len(drill_review.compare([], review, ["yolov5==7.0.14"], ("ALL",)).gone) == 1
    assert drill_review.compare([], review, ["yolov5==7.0.14"], ("AMP1",)).gone == []


@pytest.mark.slow
def test_small_drill_packages_are_as_reviewed(capsys):
    """Four small multi-file training projects of the drill (about 360 files): every finding
    where the review put it, and nothing else (rfdetr's two former false positives included)."""
    import drill

    names = ("yolov5", "trainer", "rfdetr", "salesforce-lavis")
    try:
        findings = drill.run(select=("ALL",), jobs=1, only=names)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot download the drill packages (network or PyPI unreachable): {e}")
    result = drill_review.compare(
        findings, drill_review.load(), drill_review.package_specs(names, DRILL_PACKAGES), ("ALL",)
    )
    drill_review.report(result)
    assert result.unreviewed == [] and result.gone == [], capsys.readouterr().out
