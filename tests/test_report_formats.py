"""Every output format against a golden file, plus format-specific checks.

The diagnostics are built by hand (and their rules are stand-ins), so the
golden files change only when a renderer changes, never when a rule's wording
does. Regenerate after an intended change with
`AMPLINT_UPDATE_GOLDEN=1 python -m pytest tests/test_report_formats.py`.
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from amplint import Config, Rule, Severity, lint_source
from amplint.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location
from amplint.report import FORMATS, renderer
from amplint.report.github import escape_data, escape_property

GOLDEN = Path(__file__).parent / "golden"
ROOT = "/project"


class FakeClip(Rule):
    """
    ## What it does
    Flags a clip on scaled gradients.

    ## Why is this bad?
    The clip always fires.
    """

    code = "AMP101"
    name = "clip-grad-before-unscale"
    severity = Severity.ERROR
    message = "gradient clipping on scaled gradients"


class FakeMask(Rule):
    """
    ## What it does
    Flags a mask value that overflows fp16.
    """

    code = "AMP301"
    name = "fp16-overflowing-literal"
    severity = Severity.WARNING
    message = "literal overflows fp16"


class FakeAdvice(Rule):
    """
    ## What it does
    Advice.
    """

    code = "AMP601"
    name = "bf16-without-capability-check"
    severity = Severity.INFO
    message = "no capability check"


RULES = [FakeClip, FakeMask, FakeAdvice]


def _d(code, name, severity, filename, start, end, message, fix=None, cell=None, raw_rows=None):
    return Diagnostic(
        code=code,
        name=name,
        message=message,
        severity=severity,
        filename=filename,
        location=Location(*start),
        end_location=Location(*end),
        fix=fix,
        noqa_row=start[0],
        url=f"https://github.com/amplint/amplint/blob/main/docs/rules/{code}.md",
        cell=cell,
        raw_rows=raw_rows,
    )


def diagnostics():
    insert = Fix(Applicability.UNSAFE, "Insert `scaler.unscale_(opt)` before the clip", (Edit(Location(4, 1), Location(4, 1), "scaler.unscale_(opt)\n"),))
    replace = Fix(Applicability.SAFE, "Use `torch.finfo(x.dtype).min`", (Edit(Location(7, 28), Location(7, 32), "torch.finfo(x.dtype).min"),))
    return [
        _d("AMP101", "clip-grad-before-unscale", Severity.ERROR, f"{ROOT}/src/train.py", (4, 1), (4, 58), "`clip_grad_norm_` sees scaled gradients; call `scaler.unscale_(opt)` first", insert),
        _d("AMP301", "fp16-overflowing-literal", Severity.WARNING, f"{ROOT}/src/train.py", (7, 28), (9, 5), "-1e9 overflows fp16 (max 65504): 100% of <masked> rows, & more\nsecond line", replace),
        _d("AMP601", "bf16-without-capability-check", Severity.INFO, f"{ROOT}/my dir/a,b.py", (1, 1), (1, 5), "advice: check capability"),
        _d("AMP101", "clip-grad-before-unscale", Severity.ERROR, f"{ROOT}/nb.ipynb", (3, 5), (3, 60), "clip in a notebook", cell=4, raw_rows=(41, 41)),
        _d("AMP000", "syntax-error", Severity.ERROR, f"{ROOT}/broken.py", (2, 7), (2, 7), "SyntaxError: unexpected token"),
    ]


GOLDEN_FILES = {
    "sarif": "report.sarif",
    "github": "report.github.txt",
    "gitlab": "report.gitlab.json",
    "junit": "report.junit.xml",
    "json-lines": "report.jsonl",
    "json": "report.json",
    "text": "report.text.txt",
    "concise": "report.concise.txt",
}


def _render(fmt, items):
    return renderer(fmt)(items, root=ROOT, rules=RULES)


@pytest.mark.parametrize("fmt", sorted(GOLDEN_FILES))
def test_golden(fmt):
    out = _render(fmt, diagnostics())
    if fmt == "sarif":
        from amplint import __version__

        out = out.replace(f'"{__version__}"', '"<version>"')
    path = GOLDEN / GOLDEN_FILES[fmt]
    if os.environ.get("AMPLINT_UPDATE_GOLDEN"):
        path.write_text(out, encoding="utf-8")
    assert out == path.read_text(encoding="utf-8"), f"{fmt} output changed; see the module docstring to regenerate"


def test_every_format_has_a_golden_file():
    assert set(FORMATS) <= set(GOLDEN_FILES)


@pytest.mark.parametrize("fmt", sorted(GOLDEN_FILES))
def test_empty(fmt):
    out = _render(fmt, [])
    assert isinstance(out, str)
    if fmt in ("json", "gitlab"):
        assert json.loads(out) == []
    if fmt == "sarif":
        assert json.loads(out)["runs"][0]["results"] == []


# ------------------------------------------------------------------ SARIF


def _schema():
    local = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "sarif-schema-2.1.0.json"
    for candidate in (local, shared):
        if candidate.is_file():
            return json.loads(candidate.read_text(encoding="utf-8"))
    pytest.fail("the SARIF 2.1.0 schema is missing from tests/data/ and ../shared/data/")


def _validate(document):
    import jsonschema

    schema = _schema()
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(document)


def test_sarif_validates_against_the_official_schema():
    _validate(json.loads(_render("sarif", diagnostics())))


def test_sarif_from_a_real_run_validates_and_points_at_its_rules():
    from amplint.engine.registry import all_rules

    items = []
    for rule in all_rules():
        for case in rule.INVALID:
            from amplint.core.rule import example_source

            items.extend(lint_source(example_source(case.code), "src/example.py", Config(select=("ALL",))))
    assert items
    doc = json.loads(renderer("sarif")(items, root=os.getcwd()))
    _validate(doc)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    for result in run["results"]:
        rule = rules[result["ruleIndex"]]
        assert rule["id"] == result["ruleId"]
        for key in ("name", "shortDescription", "fullDescription", "helpUri", "defaultConfiguration"):
            assert key in rule
        loc = result["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "src/example.py"
        assert loc["region"]["startLine"] >= 1 and loc["region"]["startColumn"] >= 1


def test_sarif_fields():
    doc = json.loads(_render("sarif", diagnostics()))
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "amplint" and driver["informationUri"].startswith("https://")
    assert [r["id"] for r in driver["rules"]] == ["AMP000", "AMP101", "AMP301", "AMP601"]
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"AMP101": "error", "AMP301": "warning", "AMP601": "note", "AMP000": "error"}
    first = run["results"][0]
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/train.py"
    assert first["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == "scaler.unscale_(opt)\n"
    spaced = run["results"][2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert spaced == "my%20dir/a%2Cb.py"
    notebook = run["results"][3]
    assert notebook["properties"] == {"cell": 4, "cellLine": 3, "cellColumn": 5} and "fixes" not in notebook
    assert notebook["locations"][0]["physicalLocation"]["region"] == {"startLine": 41, "endLine": 41}  # the .ipynb row


def test_sarif_path_outside_the_root_is_an_absolute_uri():
    d = diagnostics()[0]
    d.filename = "/elsewhere/x.py"
    doc = json.loads(renderer("sarif")([d], root=ROOT, rules=RULES))
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri == {"uri": "file:///elsewhere/x.py"}


# ------------------------------------------------------------------ GitHub


def test_github_escaping_follows_the_actions_toolkit():
    assert escape_data("a%b\r\nc:d,e") == "a%25b%0D%0Ac:d,e"
    assert escape_property("a%b\r\nc:d,e") == "a%25b%0D%0Ac%3Ad%2Ce"


def test_github_lines():
    lines = _render("github", diagnostics()).splitlines()
    assert lines[0] == (
        "::error file=src/train.py,line=4,col=1,endLine=4,endColumn=58,title=amplint (AMP101)::"
        "`clip_grad_norm_` sees scaled gradients; call `scaler.unscale_(opt)` first"
    )
    # a multi-line span: no columns; the newline in the message is escaped
    assert lines[1].startswith("::warning file=src/train.py,line=7,endLine=9,title=amplint (AMP301)::")
    assert "%25" in lines[1] and "%0A" in lines[1] and "\n" not in lines[1]
    assert lines[2].startswith("::notice file=my dir/a%2Cb.py,line=1,col=1,endLine=1,endColumn=5,")
    assert lines[3] == "::error file=nb.ipynb,line=41,endLine=41,title=amplint (AMP101)::cell 4:3:5: clip in a notebook"


# ------------------------------------------------------------------ GitLab, JUnit, JSON lines


def test_gitlab_fingerprints_are_stable_and_unique():
    items = diagnostics()
    report = json.loads(_render("gitlab", items))
    fingerprints = [i["fingerprint"] for i in report]
    assert len(set(fingerprints)) == len(fingerprints)
    # moving the code (another line number) keeps the fingerprint
    moved = diagnostics()
    moved[0].location = Location(40, 1)
    moved[0].end_location = Location(40, 58)
    assert json.loads(_render("gitlab", moved))[0]["fingerprint"] == fingerprints[0]
    # two identical findings in one file still get distinct fingerprints
    twice = json.loads(_render("gitlab", [items[0], items[0]]))
    assert twice[0]["fingerprint"] != twice[1]["fingerprint"]
    issue = report[0]
    assert issue["check_name"] == "AMP101" and issue["severity"] == "major"
    assert issue["location"] == {"path": "src/train.py", "lines": {"begin": 4, "end": 4}}
    assert {i["severity"] for i in report} == {"major", "minor", "info"}


def test_junit_parses_and_counts():
    root = ET.fromstring(_render("junit", diagnostics()))
    assert root.tag == "testsuites" and root.get("tests") == "5" and root.get("failures") == "5"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["src/train.py", "my dir/a,b.py", "nb.ipynb", "broken.py"]
    failure = suites[0].find("testcase/failure")
    assert failure.get("type") == "AMP101"
    empty = ET.fromstring(_render("junit", []))
    assert empty.find("testsuite/testcase").get("name") == "No errors found"


def test_json_lines_matches_json():
    items = diagnostics()
    as_list = json.loads(_render("json", items))
    as_lines = [json.loads(line) for line in _render("json-lines", items).splitlines()]
    assert as_lines == as_list
    assert as_list[3]["cell"] == 4


# ------------------------------------------------------------------ text


def test_text_marks_fixes_under_the_current_settings():
    items = diagnostics()
    plain = _render("text", items)
    # the AMP101 fix is unsafe: no [*] without --unsafe-fixes, counted as hidden
    assert "src/train.py:4:1: AMP101 `clip" in plain
    assert "src/train.py:7:28: AMP301 [*] -1e9" in plain
    assert "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option)." in plain
    unsafe = renderer("text")(items, unsafe_fixes=True)
    assert "AMP101 [*]" in unsafe and "[*] 2 fixable with the `--fix` option." in unsafe
    assert "nb.ipynb:cell 4:3:5: AMP101 clip in a notebook" in plain


def test_text_summary_after_fixing():
    from amplint.report.text import summary

    assert summary([], fixed=2) == "Found 2 errors (2 fixed, 0 remaining)."
    one = diagnostics()[2:3]
    assert summary(one, fixed=1) == "Found 2 errors (1 fixed, 1 remaining)."
    assert summary([]) == "All checks passed!"
    only_unsafe = diagnostics()[0:1]
    assert summary(only_unsafe).endswith("No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).")


def test_statistics():
    from amplint.report.statistics import render

    items = diagnostics() + [diagnostics()[0]]
    out = render(items)
    assert out.splitlines()[0] == "3\tAMP101\t[ ] clip-grad-before-unscale"
    assert "1\tAMP301\t[*] fp16-overflowing-literal" in out
    assert "[*] clip-grad-before-unscale" in render(items, unsafe_fixes=True)
    table = json.loads(render(items, output_format="json"))
    assert table[0] == {"code": "AMP101", "name": "clip-grad-before-unscale", "count": 3, "fixable": False}
