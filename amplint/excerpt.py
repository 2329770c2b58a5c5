"""Parse only the part of a file that a rule can fire in.

libcst parses about 0.5 MB/s, and a 200 KB model file often passes a gate for
one reason: a single `x + 1e-20` or `masked_fill(m, -1e9)` in one class. Rules
whose findings at a site depend only on the file's module-level statements
(imports, constants) and the top-level `def`/`class` that holds the site say
so by naming a site function (`gate_sites`, in amplint/gates.py) that returns
the lines they can fire on or depend on. When every rule a file passes does,
the engine builds an *excerpt*: the source with every top-level function and
class that holds none of those lines replaced by blank lines. Line and column
numbers are unchanged, so diagnostics, noqa comments and fixes apply to the
real file as they are.

CPython's own parser (several times faster than libcst) finds the top-level
statements exactly, strings and brackets included; a file it cannot parse, or
with `\\r` line ends (where line counting differs), is not cut. Project facts
read from an excerpt are partial, so the file counts as unparsed for the facts
pass (parallel.settle_facts), which reads it whole if a condition needs it.
"""
from __future__ import annotations

import ast
import warnings
from typing import Iterable, List, Optional

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def excerpt(source: str, lines: Iterable[int]) -> Optional[str]:
    """`source` with the top-level definitions holding none of `lines` blanked; None to use it whole."""
    if "\r" in source:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the normal path reports what is wrong
    wanted = sorted(set(lines))
    rows = source.split("\n")
    blank: List[range] = []
    for node in tree.body:
        if not isinstance(node, _DEFINITIONS):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        last = node.end_lineno or node.lineno
        if not any(first <= line <= last for line in wanted):
            blank.append(range(first, last + 1))
    if not blank:
        return None
    for span in blank:
        for row in span:
            rows[row - 1] = ""
    return "\n".join(rows)
