"""SARIF 2.1.0 (`--output-format sarif`), for GitHub code scanning and other SARIF viewers.

One run; `tool.driver.rules` describes every rule that has a result (id,
name, short and full description, help text and URI, default level), and
each result points at its rule by `ruleId` and `ruleIndex`. Locations are
relative to the folder amplint ran in (`uriBaseId` `%SRCROOT%`, the
repository root in CI); regions are 1-based, end column exclusive, counted
in Unicode code points (`columnKind`). A finding's other sites are its
`relatedLocations` (each with its note as the message). Findings with a fix carry it as a SARIF
`fix` (a notebook's fix is left out: its rows are within a cell, not the file).

A notebook finding's region is the rows of the .ipynb file (its JSON) that hold
the flagged lines of the cell, without columns (a JSON row's columns are not the
code's); `properties` keep the cell and the row and column within it. When
those rows cannot be told, the location names the file with no region.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Type
from urllib.parse import quote

from ..__version__ import __version__
from ..core.diagnostics import Diagnostic, Related, Severity
from .common import PSEUDO_RULES, relative_path, rule_classes, severity_of

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/amplint/amplint"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def artifact_location(filename: str, root: Optional[str]) -> Dict[str, str]:
    path = relative_path(filename, root)
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        from pathlib import Path

        return {"uri": Path(path).as_uri()}
    return {"uri": quote(path, safe="/"), "uriBaseId": "%SRCROOT%"}


def _region(start, end) -> Dict[str, int]:
    end_row = max(end.row, start.row)
    end_col = end.column if end.row > start.row else max(end.column, start.column)
    return {"startLine": start.row, "startColumn": start.column, "endLine": end_row, "endColumn": end_col}


def rule_descriptor(code: str, rule: Optional[Type], fallback: Diagnostic) -> Dict[str, Any]:
    if rule is not None:
        docs = rule.docs()
        level = LEVELS[rule.severity]
        return {
            "id": code,
            "name": rule.name,
            "shortDescription": {"text": rule.message},
            "fullDescription": {"text": rule.summary()},
            "help": {"text": docs, "markdown": docs},
            "helpUri": rule.url(),
            "defaultConfiguration": {"level": level, "enabled": rule.is_default()},
            "properties": {"tags": ["amplint", "mixed-precision"]},
        }
    meta = PSEUDO_RULES.get(code, {})
    return {
        "id": code,
        "name": meta.get("name", fallback.name),
        "shortDescription": {"text": meta.get("message", fallback.name)},
        "fullDescription": {"text": meta.get("summary", fallback.name)},
        "helpUri": fallback.url or INFORMATION_URI,
        "defaultConfiguration": {"level": LEVELS[Severity(meta.get("severity", severity_of(fallback).value))]},
        "properties": {"tags": ["amplint"]},
    }


def _fix(d: Diagnostic, root: Optional[str]) -> Dict[str, Any]:
    assert d.fix is not None
    return {
        "description": {"text": f"{d.fix.message} ({d.fix.applicability.value} fix)"},
        "artifactChanges": [
            {
                "artifactLocation": artifact_location(d.filename, root),
                "replacements": [
                    {"deletedRegion": _region(e.location, e.end_location), "insertedContent": {"text": e.content}}
                    for e in d.fix.edits
                ],
            }
        ],
    }


def _related(index: int, r: Related, d: Diagnostic, root: Optional[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "id": index,
        "physicalLocation": {
            "artifactLocation": artifact_location(r.filename or d.filename, root),
            "region": _region(r.location, r.end_location),
        },
        "message": {"text": r.message},
    }
    if r.cell is not None:  # a notebook's rows are within the cell, as the result's are
        out["properties"] = {"cell": r.cell}
    return out


def document(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, rules: Optional[Sequence[Type]] = None) -> Dict[str, Any]:
    classes = rule_classes(rules)
    index: Dict[str, int] = {}
    descriptors: List[Dict[str, Any]] = []
    for d in sorted(diagnostics, key=lambda d: d.code):
        if d.code not in index:
            index[d.code] = len(descriptors)
            descriptors.append(rule_descriptor(d.code, classes.get(d.code), d))
    results = []
    for d in diagnostics:
        physical: Dict[str, Any] = {"artifactLocation": artifact_location(d.filename, root)}
        if d.cell is None:
            physical["region"] = _region(d.location, d.end_location)
        elif d.raw_rows is not None:
            physical["region"] = {"startLine": d.raw_rows[0], "endLine": d.raw_rows[1]}
        result: Dict[str, Any] = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": LEVELS[severity_of(d)],
            "message": {"text": d.message},
            "locations": [{"physicalLocation": physical}],
        }
        if d.related:
            result["relatedLocations"] = [_related(i, r, d, root) for i, r in enumerate(d.related)]
        if d.cell is not None:
            result["properties"] = {"cell": d.cell, "cellLine": d.location.row, "cellColumn": d.location.column}
        elif d.fix is not None:
            result["fixes"] = [_fix(d, root)]
        if d.verification is not None:  # `amplint --verify`: the verdict and its evidence
            result.setdefault("properties", {})["verification"] = d.verification
        results.append(result)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "amplint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": descriptors,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def render(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, rules: Optional[Sequence[Type]] = None, **_: object) -> str:
    return json.dumps(document(diagnostics, root, rules), indent=2) + "\n"
