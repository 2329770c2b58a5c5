"""Parse only the part of a file that a rule can fire in.

libcst parses about 0.5 MB/s, and a 200 KB model file often passes a gate for
one reason: a single `x + 1e-20` or `masked_fill(m, -1e9)` in one method.
Rules whose findings at a site depend only on the file's module-level
statements (imports, constants) and the function that holds the site say so by
naming a site function (`gate_sites`, in amplint/core/gates.py) that returns the
lines they can fire on or depend on. When every rule a file passes does, the
engine builds an *excerpt*: the source with every top-level function and class
that holds none of those lines replaced by blank lines, and, inside a kept
class, every method (or nested class) that holds none of them. A rule that
needs a whole class (its `self.fc = ...` assignments, an autograd Function's
forward and backward) lists the `class` line among its lines: such a class is
kept whole. Line and column numbers are unchanged, so diagnostics, noqa
comments and fixes apply to the real file as they are.

The statements are read off the indentation (a definition runs to the next
line of code at its own level: column 0 at the top, the class body's indent
inside a class), and the cut is checked by parsing only the small result with
CPython's own parser; when that check fails (such a line inside a string or
bracket), CPython parses the whole file for the exact statements. A file it
cannot parse, or with `\\r` line ends (where line counting differs), is not
cut. Project facts read from an excerpt are partial, so the file counts as
unparsed for the facts pass (parallel.settle_facts), which reads it whole if a
condition needs it.
"""
from __future__ import annotations

import ast
import bisect
import re
import warnings
from typing import Iterable, List, Optional, Tuple

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: a class statement the cut may look inside: one line, no decorator, its body indented below it
_ONE_LINE_CLASS = re.compile(r"class[ \t]+\w+[ \t]*(?:\([^()]*\))?[ \t]*:[ \t]*(?:#.*)?$")


def excerpt(source: str, lines: Iterable[int]) -> Optional[str]:
    """`source` with the definitions holding none of `lines` blanked; None to use it whole."""
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


def _holds(wanted: List[int], first: int, last: int) -> bool:
    """Whether a wanted line lies in first..last (1-based, inclusive); `wanted` is sorted."""
    i = bisect.bisect_left(wanted, first)
    return i < len(wanted) and wanted[i] <= last


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


# ------------------------------------------------------------------ exact: CPython's parser


def _by_ast(source: str, rows: List[str], wanted: List[int]) -> Optional[str]:
    """The exact cut: CPython's parser gives the statements."""
    tree = _parse(source)
    if tree is None:
        return None  # the normal path reports what is wrong
    blank: List[range] = []
    for node in tree.body:
        if not isinstance(node, _DEFINITIONS):
            continue
        first, last = _first_line(node), node.end_lineno or node.lineno
        if not _holds(wanted, first, last):
            blank.append(range(first, last + 1))
        elif isinstance(node, ast.ClassDef) and _may_cut_inside(rows, node.lineno - 1, wanted):
            members = [(_first_line(m), m.end_lineno or m.lineno) for m in node.body]
            inner = [
                range(a, b + 1)
                for (a, b), m in zip(members, node.body)
                if isinstance(m, _DEFINITIONS) and not _holds(wanted, a, b)
            ]
            if len(inner) < len(members):  # something of the body stays
                blank.extend(inner)
    return _blank(rows, blank) if blank else None


def _parse(text: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _may_cut_inside(rows: List[str], index: int, wanted: List[int]) -> bool:
    """A class at rows[index] may lose methods: its `class` line is one line and not wanted."""
    return _ONE_LINE_CLASS.match(rows[index]) is not None and not _holds(wanted, index + 1, index + 1)


# ------------------------------------------------------------------ quick: indentation, checked


#: a line at a statement's own level that continues the statement before it
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b|[)\]}]")
_DEFINES = ("def ", "async def ", "class ", "@")


def _statement_starts(rows: List[str], begin: int, end: int, indent: str) -> Optional[List[int]]:
    """Indexes of the lines in rows[begin:end] that start a statement at `indent` (read off the
    text; may be wrong inside strings and brackets, which the caller's check catches); None
    when a decorator is followed by something no decorator can be."""
    starts: List[int] = []
    decorating = False
    width = len(indent)
    for i in range(begin, end):
        row = rows[i]
        if len(row) <= width or not row.startswith(indent) or row[width] in " \t#\x0c":
            continue
        rest = row[width:] if width else row
        if starts and _CONTINUES.match(rest):
            continue
        if decorating:  # the decorated definition starts at its first decorator
            if rest.startswith("@"):
                continue
            if rest.startswith(("def ", "async def ", "class ")):
                decorating = False
                continue
            return None
        starts.append(i)
        decorating = rest.startswith("@")
    return starts


def _chunks(rows: List[str], starts: List[int], end: int, indent: str) -> List[range]:
    """The 1-based rows of each definition among `starts` (to the next start, or `end`)."""
    out = []
    for first, nxt in zip(starts, starts[1:] + [end]):
        if rows[first][len(indent):].startswith(_DEFINES):
            out.append(range(first + 1, nxt + 1))
    return out


def _members_to_blank(rows: List[str], first: int, end: int, wanted: List[int]) -> Optional[Tuple[List[range], List[int]]]:
    """For a kept class at rows[first] running to rows[end - 1]: (the methods and nested classes
    to blank, the first lines of those kept); None to keep the class whole."""
    if not _may_cut_inside(rows, first, wanted):
        return None
    body = next((r for r in rows[first + 1 : end] if r.strip() and not r.lstrip().startswith("#")), None)
    if body is None:
        return None
    indent = body[: len(body) - len(body.lstrip())]
    if not indent:
        return None
    starts = _statement_starts(rows, first + 1, end, indent)
    if not starts:
        return None
    members = _chunks(rows, starts, end, indent)
    blank = [m for m in members if not _holds(wanted, m.start, m.stop - 1)]
    if not blank or len(blank) == len(starts):  # nothing to cut, or nothing would be left
        return None
    kept = [m.start for m in members if m not in blank]
    return blank, kept


def _by_columns(rows: List[str], wanted: List[int]) -> Optional[str]:
    """The cut read off the indentation, checked by parsing only the (small) result; None when unsure.

    Top-level statements start at column 0, so a definition runs from its line
    (or its first decorator) to the next line of code at column 0; inside a
    class, a method runs to the next line at the class body's indent. Such
    lines inside a multi-line string or bracket make this split wrong; the cut
    is then kept only if the result parses into statements that start exactly
    where the kept definitions start and that never run over a blanked line,
    which a wrong cut through a string or bracket breaks.
    """
    starts = _statement_starts(rows, 0, len(rows), "")
    if starts is None:
        return None
    blank: List[range] = []
    kept_defs: List[int] = []
    kept_members: List[int] = []
    cut_classes = set()
    for chunk in _chunks(rows, starts, len(rows), ""):
        if not _holds(wanted, chunk.start, chunk.stop - 1):
            blank.append(chunk)
            continue
        kept_defs.append(chunk.start)
        inside = _members_to_blank(rows, chunk.start - 1, chunk.stop - 1, wanted)
        if inside is not None:
            blank.extend(inside[0])
            kept_members.extend(inside[1])
            cut_classes.add(chunk.start)
    if not blank:
        return None
    text = _blank(rows, blank)
    tree = _parse(text)
    if tree is None:
        return None
    blanked = sorted(row for span in blank for row in span if rows[row - 1].strip())

    def runs_over_blank(node: ast.stmt) -> bool:
        i = bisect.bisect_right(blanked, _first_line(node))
        return i < len(blanked) and blanked[i] <= (node.end_lineno or node.lineno)

    statement_starts = set()
    member_starts = set()
    for node in tree.body:
        statement_starts.add(_first_line(node))
        if isinstance(node, ast.ClassDef) and node.lineno in cut_classes:
            for member in node.body:
                member_starts.add(_first_line(member))
                if runs_over_blank(member):
                    return None
        elif runs_over_blank(node):
            return None  # a statement runs over a blanked line: the split went through it
    if not set(kept_defs) <= statement_starts or not set(kept_members) <= member_starts:
        return None
    return text
