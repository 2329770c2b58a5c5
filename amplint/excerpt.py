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

The top-level statements are read off column 0 (a definition runs to the
next line of code there), and the cut is checked by parsing only the small
result with CPython's own parser; when that check fails (a column-0 line
inside a string or bracket), CPython parses the whole file for the exact
statements. A file it cannot parse, or with `\\r` line ends (where line
counting differs), is not cut. Project facts read from an excerpt are
partial, so the file counts as unparsed for the facts pass
(parallel.settle_facts), which reads it whole if a condition needs it.
"""
from __future__ import annotations

import ast
import bisect
import re
import warnings
from typing import Iterable, List, Optional

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def excerpt(source: str, lines: Iterable[int]) -> Optional[str]:
    """`source` with the top-level definitions holding none of `lines` blanked; None to use it whole."""
    if "\r" in source:
        return None
    wanted = sorted(set(lines))
    rows = source.split("\n")
    quick = _by_columns(rows, wanted)
    if quick is not None:
        return quick
    return _by_ast(source, rows, wanted)


def _blank(rows: List[str], spans: List[range]) -> str:
    out = list(rows)
    for span in spans:
        for row in span:
            out[row - 1] = ""
    return "\n".join(out)


def _by_ast(source: str, rows: List[str], wanted: List[int]) -> Optional[str]:
    """The exact cut: CPython's parser gives the top-level statements."""
    tree = _parse(source)
    if tree is None:
        return None  # the normal path reports what is wrong
    blank: List[range] = []
    for node in tree.body:
        if not isinstance(node, _DEFINITIONS):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        last = node.end_lineno or node.lineno
        if not any(first <= line <= last for line in wanted):
            blank.append(range(first, last + 1))
    return _blank(rows, blank) if blank else None


def _parse(text: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


#: a line at column 0 that continues the statement before it
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b|[)\]}]")
_DEFINES = ("def ", "async def ", "class ", "@")


def _by_columns(rows: List[str], wanted: List[int]) -> Optional[str]:
    """The cut read off column 0, checked by parsing only the (small) result; None when unsure.

    Top-level statements start at column 0, so a definition runs from its line
    (or its first decorator) to the next line of code at column 0. Lines at
    column 0 inside a multi-line string or bracket make this split wrong; the
    cut is then kept only if the result parses into top-level statements that
    start exactly where the kept definitions start and that never run over a
    blanked line, which a wrong cut through a string or bracket breaks.
    """
    starts = []
    decorating = False
    for i, row in enumerate(rows):
        if not row or row[0] in " \t#\x0c" or (starts and _CONTINUES.match(row)):
            continue
        if decorating:  # the decorated definition starts at its first decorator
            if row.startswith("@"):
                continue
            if row.startswith(("def ", "async def ", "class ")):
                decorating = False
                continue
            return None  # not what decorators are followed by: let the parser decide
        starts.append(i)
        decorating = row.startswith("@")
    starts.append(len(rows))
    blank: List[range] = []
    kept_defs: List[int] = []
    for first, nxt in zip(starts, starts[1:]):
        if not rows[first].startswith(_DEFINES):
            continue
        span = range(first + 1, nxt + 1)  # 1-based rows of the chunk
        if any(first + 1 <= line <= nxt for line in wanted):
            kept_defs.append(first + 1)
        else:
            blank.append(span)
    if not blank:
        return None
    text = _blank(rows, blank)
    tree = _parse(text)
    if tree is None:
        return None
    blanked = sorted(row for span in blank for row in span if rows[row - 1].strip())
    statement_starts = set()
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        statement_starts.add(first)
        i = bisect.bisect_right(blanked, first)
        if i < len(blanked) and blanked[i] <= last:
            return None  # a statement runs over a blanked line: the split went through it
    if not set(kept_defs) <= statement_starts:
        return None
    return text
