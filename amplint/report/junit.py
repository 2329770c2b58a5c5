"""JUnit XML: one testsuite per file, one failing testcase per finding (ruff's layout).

A notebook finding's `line` is the row of the .ipynb file holding the cell's line
(the failure text names the cell and the row within it).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Sequence

from ..core.diagnostics import Diagnostic
from .common import relative_path


def render(diagnostics: Sequence[Diagnostic], root: Optional[str] = None, **_: object) -> str:
    # a clean run is one passing test case, counted the same outside and inside
    tests = str(len(diagnostics) or 1)
    suites = ET.Element("testsuites", name="amplint", tests=tests, failures=str(len(diagnostics)), errors="0")
    if not diagnostics:
        suite = ET.SubElement(suites, "testsuite", name="amplint", tests="1", failures="0", errors="0")
        ET.SubElement(suite, "testcase", name="No errors found")
    by_file: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(relative_path(d.filename, root), []).append(d)
    for path, found in by_file.items():
        suite = ET.SubElement(suites, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)), errors="0")
        for d in found:
            where = f"cell {d.cell}:" if d.cell is not None else ""
            case = ET.SubElement(
                suite,
                "testcase",
                name=f"org.amplint.{d.code}",
                classname=path,
                line=str(d.location.row if d.cell is None else (d.raw_rows or (1, 1))[0]),
                column=str(d.location.column if d.cell is None else 1),
            )
            failure = ET.SubElement(case, "failure", message=d.message, type=d.code)
            failure.text = f"{where}line {d.location.row}, col {d.location.column}, {d.code} {d.message}"
    ET.indent(suites, space="    ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
