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
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: a class statement the cut may look inside: one line, no decorator, its body indented below it
_ONE_LINE_CLASS = re.compile(r"class[ \t]+\w+[ \t]*(?:\([^()]*\))?[ \t]*:[ \t]*(?:#.*)?$")


def excerpt(source: str, lines: Iterable[int], exact: bool = True) -> Optional[str]:
    """`source` with the definitions holding none of `lines` blanked; None to use it whole.
    `exact` False: only the cut read off the indentation (`_by_columns`), never CPython's tree
    of the whole file (`exact_excerpt`: ~8 KB a line, 1.2 GB for 140,000 lines)."""
    if "\r" in source:
        return None
    wanted = sorted(set(lines))
    rows = source.split("\n")
    if not any(row.startswith(_DEFINES) for row in rows):
        return None  # no top-level definition to blank (and no whole-file CPython tree to build: ~8 KB a line)
    quick = _by_columns(rows, wanted)
    if quick is not None or not exact:
        return quick
    return _by_ast(source, rows, wanted)


def exact_excerpt(source: str, lines: Iterable[int]) -> Optional[str]:
    """`excerpt`'s exact cut alone (CPython's parse of the whole file gives the statements), for
    a caller that already had `excerpt(source, lines, exact=False)` answer None."""
    if "\r" in source:
        return None
    rows = source.split("\n")
    if not any(row.startswith(_DEFINES) for row in rows):
        return None
    return _by_ast(source, rows, sorted(set(lines)))


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


# ------------------------------------------------------------------ pieces: a huge excerpt parsed a part at a time

#: an excerpt longer than this is parsed in pieces when it can be (`pieces`): libcst's tree and
#: the AMP model take ~50-90 KB a dense line, so a 6 MB module of sites does not fit in 1 GB
PIECE_BYTES = 256 * 1024
_WORD = re.compile(r"\w+")
#: `NAME = ...` / `NAME: T = ...` / `a = b = ...` at column 0 (checked against CPython's tree)
_LEAF_TARGETS = (ast.Assign, ast.AnnAssign)


def pieces(text: str, limit: Optional[int] = None, wanted: Optional[Iterable[int]] = None) -> Optional[List[Tuple[str, range]]]:
    """`text` (a whole file or an excerpt) as texts of at most about `limit` bytes of their own,
    each with the rows whose findings it gives (together: every row, in order); None to parse it
    whole.

    A *leaf* is a top-level assignment to plain names that no other part of the file mentions
    (not as a word anywhere: code, strings, comments): nothing else can read what it binds, so
    no other statement's findings depend on it, and what its own findings depend on lies in the
    other statements. Every piece keeps all the other statements (imports, constants,
    definitions, compound statements: the *core*) and one run of leaves, the other leaves
    blanked, so a rule sees in each piece what it would see around those leaves in the whole
    file. Rows keep their numbers: a long run of blanked rows becomes one string statement over
    the same rows (`\"\"\"` ... `\"\"\"`), which parses as one token where as many empty lines
    would cost libcst a node each. A piece takes the findings on its own rows: the core's at
    its place among the leaves, so each rule's findings come in the order of the whole file.
    Used only when the core is small beside the leaves (else there is nothing to gain)."""
    limit = PIECE_BYTES if limit is None else limit
    if len(text) <= limit or "\r" in text:
        return None
    rows = text.split("\n")
    starts = _statement_starts(rows, 0, len(rows), "")
    if not starts:
        return None
    spans = list(zip(starts, starts[1:] + [len(rows)]))  # 0-based [first, next start)
    candidates = [(a, b) for a, b in spans if _LEAF_LINE.match(rows[a]) and ";" not in rows[a]]
    leaves, words = _leaf_statements(text, rows, rows, candidates, lambda last: False)
    # a statement a rule can fire in may depend on every mention of what it binds (the uses of
    # `NEG = -1e9`, the calls of a private function holding a site): no leaf may mention it
    sites = sorted(set(wanted)) if wanted is not None else None
    leaves = _unwatched(leaves, words, rows, spans, sites, set(), lambda a: rows[a])
    del words
    leaf_bytes = sum(len(rows[r - 1]) + 1 for a, b in leaves for r in range(a, b + 1))
    if leaf_bytes < len(text) // 2 or len(text) - leaf_bytes > limit:
        # the core is most of the file, or too big to repeat in every piece: a huge function's
        # body may still be cut
        return _body_pieces(text, rows, spans, limit, sites)
    groups = _leaf_groups(leaves, rows, limit)
    if len(groups) < 2:
        return None
    leaf_rows = {a for a, _ in leaves}
    core_starts = [a + 1 for a, _ in spans if a + 1 not in leaf_rows and rows[a].strip()]
    # the runs of blanked rows of every piece: those of all the leaves' rows, less the rows
    # from its group's first to its last (its leaves are consecutive ones: no other leaf there);
    # each piece's own scan of every other leaf made the pieces quadratic (3.4 M rows sorted for
    # the 140,000-line file's 25 pieces)
    all_runs = _runs([row for a, b in leaves for row in range(a, b + 1)])
    run_ends = [b for _, b in all_runs]
    out: List[Tuple[str, range]] = []
    for i, group in enumerate(groups):
        first_row = 1 if i == 0 else group[0][0]
        end_row = groups[i + 1][0][0] if i + 1 < len(groups) else len(rows) + 1
        piece = _filled(rows, _runs_outside(all_runs, run_ends, group[0][0], group[-1][1]), sorted(core_starts + [a for a, _ in group]), group)
        if piece is None:
            return None
        out.append((piece, range(first_row, end_row)))
    return out


#: what a definition or an assignment at column 0 binds: its name, its targets
_BINDS = re.compile(r"(?:(?:async[ \t]+)?def|class)[ \t]+(\w+)|((?:[A-Za-z_]\w*[ \t]*=[ \t]*)+)(?!=)")
#: a line that may start `NAME = ...`, `NAME: T = ...` or `a = b = ...` (CPython's tree decides)
_LEAF_LINE = re.compile(r"[A-Za-z_]\w*[ \t]*(?:=[^=]|:)")


def _statements(rows: List[str], spans: List[Tuple[int, int]]) -> List[Optional[ast.stmt]]:
    """CPython's statement for each span of rows (0-based [first, next start)) when it is one
    assignment alone, with line numbers from 1 at its first row; None for the others."""
    texts = ["\n".join(rows[a:b]) for a, b in spans]
    tree = _parse("\n".join(texts))
    if tree is not None and len(tree.body) == len(spans):
        out: List[Optional[ast.stmt]] = []
        line = 1
        for text, node in zip(texts, tree.body):
            if node.lineno != line:
                break
            node.lineno, node.end_lineno = 1, (node.end_lineno or node.lineno) - line + 1
            out.append(node if isinstance(node, _LEAF_TARGETS) else None)
            line += text.count("\n") + 1
        else:
            return out
    one = [_parse(t) for t in texts]  # one at a time
    return [m.body[0] if m is not None and len(m.body) == 1 and isinstance(m.body[0], _LEAF_TARGETS) else None for m in one]


def _runs(gone: List[int]) -> List[Tuple[int, int]]:
    """The rows of `gone` (sorted, 1-based) as maximal runs of consecutive rows, (first, last)."""
    runs: List[List[int]] = []
    for row in gone:
        if runs and runs[-1][1] == row - 1:
            runs[-1][1] = row
        else:
            runs.append([row, row])
    return [(a, b) for a, b in runs]


def _runs_outside(runs: List[Tuple[int, int]], ends: List[int], first: int, last: int) -> List[Tuple[int, int]]:
    """`runs` (maximal, sorted; `ends` their last rows) without the rows `first`..`last`."""
    i = bisect.bisect_left(ends, first)  # the first run ending at or after `first`
    j = i
    middle: List[Tuple[int, int]] = []
    while j < len(runs) and runs[j][0] <= last:
        a, b = runs[j]
        if a < first:
            middle.append((a, first - 1))
        if b > last:
            middle.append((last + 1, b))
        j += 1
    return runs[:i] + middle + runs[j:]


def _filled(rows: List[str], runs: List[Tuple[int, int]], expected: List[int], kept: Sequence[Tuple[int, int]] = ()) -> Optional[str]:
    """`rows` with the rows of `runs` (maximal runs of consecutive rows, sorted, (first, last),
    1-based) emptied and each run of 3 or more of them (after some code)
    written as one string statement over the same rows; None unless the result parses into
    statements starting exactly at the `expected` rows (1-based) and the filler strings (a split
    read off the text wrongly, through a string or bracket, breaks that).

    `kept`: leaves of the result, (first row, last row), each already read by CPython as one
    whole assignment from its first row at column 0 (`_statements`). The check parses each as
    `pass` on its first row, its other rows empty, instead of parsing every leaf a second time:
    whether a statement starts at a leaf's row depends on the text before it only (the same in
    both), and from a clean start at column 0 the leaf and `pass` are each one simple statement
    ending at a line's end with nothing open, so the rest is read the same way after either
    (a leaf whose last row ends with a backslash keeps its text)."""
    out = list(rows)
    for a, b in runs:
        out[a - 1 : b] = [""] * (b - a + 1)
    code_before = _first_code_row(out)  # a string before any code would be the docstring
    for a, b in runs:
        if b - a >= 2 and code_before is not None and a > code_before:
            out[a - 1] = '"""'
            out[b - 1] = '"""'
    fillers = [a for a, b in runs if out[a - 1] == '"""' and b > a]
    text = "\n".join(out)
    if kept:
        for first, last in kept:
            if rows[last - 1].rstrip().endswith("\\"):
                continue
            out[first - 1] = "pass"
            for row in range(first + 1, last + 1):
                out[row - 1] = ""
        tree = _parse("\n".join(out))
    else:
        tree = _parse(text)
    if tree is None or [_first_line(n) for n in tree.body] != sorted(expected + fillers):
        return None
    return text


def _first_code_row(rows: List[str]) -> Optional[int]:
    for i, row in enumerate(rows):
        stripped = row.strip()
        if stripped and not stripped.startswith("#"):
            return i + 1
    return None


# ------------------------------------------------------------------ whether CPython accepts a huge text


def python_parses(text: str, limit: Optional[int] = None) -> bool:
    """Whether CPython's parser accepts `text`, without its whole tree when `text` is over
    `limit` (`PIECE_BYTES`) bytes: the top-level statements are read off the text
    (`_statement_starts`) and parsed in runs of about `limit` bytes, each alone (a statement
    bigger than that is a run of its own). A run that parses alone ends outside
    every string and bracket, after a complete statement, and the next run starts at column 0
    with a statement that continues none before it (no `else`, no decorated definition split
    from its decorator), so the whole text is those runs' statements one after the other and
    parses too; when a run does not parse alone (a real error, or a split read wrongly through
    a string or bracket), the whole text is parsed to decide. CPython's tree of a whole file is
    ~8 KB a line (1.5 GB for 140,000 lines; libcst's ~60 KB): a fix check must not need it."""
    limit = PIECE_BYTES if limit is None else limit
    if len(text) <= limit:
        return _parse(text) is not None
    rows = text.split("\n")
    if all(_parse(run) is not None for run in _runs_to_parse(rows, limit)):
        return True
    del rows
    return _parse(text) is not None


def _runs_to_parse(rows: List[str], limit: int) -> Iterable[str]:
    """`python_parses`' runs of top-level statements, one text at a time; a top-level function
    bigger than `limit` with a one-line header (`def NAME(...):`, no decorator) and a body
    indented by spaces is its header followed by each run of its body's statements in turn
    (`_body_runs`): the function shape's 140,000-line body would otherwise be one tree of 1.5 GB."""
    starts = _statement_starts(rows, 0, len(rows), "") or []
    first_row = 0
    size = 0
    for first, nxt in zip(starts, starts[1:] + [len(rows)]):
        n = sum(len(rows[r]) + 1 for r in range(first, nxt))
        body = _body_runs(rows, first, nxt, limit) if n > limit else None
        if body is not None:
            if first > first_row:
                yield "\n".join(rows[first_row:first])
            yield from body
            first_row, size = nxt, 0
            continue
        if size > limit:
            yield "\n".join(rows[first_row:first])
            first_row, size = first, 0
        size += n
    yield "\n".join(rows[first_row:])


def _body_runs(rows: List[str], head: int, end: int, limit: int) -> Optional[List[str]]:
    """The texts `rows[head]` (a one-line `def` header at column 0) + each run of about `limit`
    bytes of its body's statements (`rows[head + 1:end]`, cut where a line at the body's indent
    starts a statement), or None to keep the function one run. When every such text parses,
    the function does: the first is a prefix of it, so it ends outside every string and bracket
    after a complete statement; by induction each next run starts there, at the body's indent
    (a level on the indentation stack), with a statement that continues none before it (no
    `else`, `elif`, `except`, `finally`, closing bracket, decorated definition split from its
    decorator: `_statement_starts`), and reads as it does after the header alone; the body is
    those runs' statements one after the other. A split read wrongly (through a string or a
    bracket) leaves some text that does not parse alone: the whole is then parsed to decide."""
    if _ONE_LINE_DEF.match(rows[head]) is None:
        return None
    body_first = next((r for r in range(head + 1, end) if rows[r].strip() and not rows[r].lstrip().startswith("#")), None)
    if body_first is None:
        return None
    indent = rows[body_first][: len(rows[body_first]) - len(rows[body_first].lstrip())]
    if not indent or indent.strip(" "):
        return None
    starts = _statement_starts(rows, head + 1, end, indent)
    if not starts or starts[0] != body_first:
        return None
    cuts = [head + 1]
    size = 0
    for first, nxt in zip(starts, starts[1:] + [end]):
        if size > limit:
            cuts.append(first)
            size = 0
        size += sum(len(rows[r]) + 1 for r in range(first, nxt))
    cuts.append(end)
    if len(cuts) < 3:
        return None
    return [rows[head] + "\n" + "\n".join(rows[a:b]) for a, b in zip(cuts, cuts[1:])]


# ------------------------------------------------------------------ the body of one huge function

#: a one-line `def NAME(...):` header at column 0
_ONE_LINE_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(.*\)[^:#]*:[ \t]*(?:#.*)?$")
#: what makes a body unsure to cut: nested scopes, scope declarations, generators
_UNSURE = re.compile(r"\b(?:def|class|lambda|global|nonlocal|yield|await|async)\b|^[ \t]*@")


def _body_pieces(text: str, rows: List[str], spans: List[Tuple[int, int]], limit: int, sites: Optional[List[int]]) -> Optional[List[Tuple[str, range]]]:
    """`pieces` for a file most of which is the body of one top-level function with a one-line
    header: the same leaves (assignments to plain names no other word mentions, mentioning
    nothing a site-holding statement binds) among the body's statements, every piece keeping
    the header, the body's other statements and the rest of the file; None (parse whole) when
    anything is unsure: nested definitions, lambdas, `global`/`nonlocal`, `yield`, a body not
    indented by spaces, or a piece whose statements do not start where the text said."""
    big = max(spans, key=lambda s: sum(len(rows[r]) + 1 for r in range(s[0], s[1])))
    head, end = big
    match = _ONE_LINE_DEF.match(rows[head])
    if match is None or sum(len(rows[r]) + 1 for r in range(head, end)) < len(text) // 2:
        return None
    body_first = next((r for r in range(head + 1, end) if rows[r].strip() and not rows[r].lstrip().startswith("#")), None)
    if body_first is None:
        return None
    indent = rows[body_first][: len(rows[body_first]) - len(rows[body_first].lstrip())]
    if not indent or indent.strip(" "):
        return None
    if any(_UNSURE.search(rows[r]) for r in range(head + 1, end)):
        return None
    starts = _statement_starts(rows, head + 1, end, indent)
    if not starts or starts[0] != body_first:
        return None
    width = len(indent)
    flat = [r[width:] if r.startswith(indent) else r for r in rows]  # the body at column 0
    body = list(zip(starts, starts[1:] + [end]))
    candidates = [(a, b) for a, b in body if _LEAF_LINE.match(flat[a]) and ";" not in rows[a]]

    def runs_on(last: int) -> bool:  # the next row continues the statement deeper in the body
        return last < end and rows[last].startswith(indent) and len(rows[last]) > width and rows[last][width] in " \t"

    leaves, words = _leaf_statements(text, flat, rows, candidates, runs_on)
    others = [s for s in spans if s != big] + body
    leaves = _unwatched(leaves, words, rows, others, sites, {match.group(1)}, lambda a: flat[a] if a > head else rows[a])
    del words
    leaf_bytes = sum(len(rows[r - 1]) + 1 for a, b in leaves for r in range(a, b + 1))
    if leaf_bytes < len(text) // 2 or len(text) - leaf_bytes > limit:
        return None
    groups = _leaf_groups(leaves, rows, limit)
    if len(groups) < 2:
        return None
    leaf_rows = {a for a, _ in leaves}
    top_starts = [a + 1 for a, _ in spans if rows[a].strip()]
    body_core = [a + 1 for a, _ in body if a + 1 not in leaf_rows]
    all_runs = _runs([row for a, b in leaves for row in range(a, b + 1)])
    run_ends = [b for _, b in all_runs]
    out: List[Tuple[str, range]] = []
    for i, group in enumerate(groups):
        first_row = 1 if i == 0 else group[0][0]
        end_row = groups[i + 1][0][0] if i + 1 < len(groups) else len(rows) + 1
        runs = _runs_outside(all_runs, run_ends, group[0][0], group[-1][1])
        piece = _body_filled(rows, runs, top_starts, head + 1, sorted(body_core + [a for a, _ in group]), indent, body_first + 1)
        if piece is None:
            return None
        out.append((piece, range(first_row, end_row)))
    return out


def _body_filled(rows: List[str], runs: List[Tuple[int, int]], top: List[int], head: int, expected: List[int], indent: str, body_first: int) -> Optional[str]:
    """`rows` with the rows of `runs` (inside the body of the function at row `head`) emptied,
    each run of 3 or more after the body's first statement written as one string statement at
    the body's indent; None unless the result parses into top-level statements starting at the
    `top` rows and a function at `head` whose body's statements start at the `expected` rows
    and the filler strings."""
    out = list(rows)
    fillers = []
    for a, b in runs:
        out[a - 1 : b] = [""] * (b - a + 1)
        if b - a >= 2 and a > body_first:
            out[a - 1] = indent + '"""'
            out[b - 1] = '"""'
            fillers.append(a)
    text = "\n".join(out)
    tree = _parse(text)
    if tree is None or [_first_line(n) for n in tree.body] != top:
        return None
    func = next((n for n in tree.body if _first_line(n) == head), None)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.decorator_list or func.lineno != head:
        return None
    if [n.lineno for n in func.body] != sorted(expected + fillers):
        return None
    return text


def _word_counts(text: str) -> dict:
    counts: dict = {}
    for word in _WORD.findall(text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def _leaf_statements(
    text: str, parse_rows: List[str], rows: List[str], candidates: List[Tuple[int, int]], runs_on: Callable[[int], bool]
) -> Tuple[List[Tuple[int, int]], List[dict]]:
    """The candidate statements that are leaves: a plain `name = ...` binding (parsed from
    `parse_rows`, the rows at column 0) whose names the rest of `text` never mentions, so a piece
    may leave it out. Returns their 1-based (first, last) rows and the words of each."""
    totals = _word_counts(text)
    leaves: List[Tuple[int, int]] = []
    words: List[dict] = []
    for i in range(0, len(candidates), 2000):  # CPython's tree of 2,000 statements at a time
        batch = candidates[i : i + 2000]
        for (a, b), node in zip(batch, _statements(parse_rows, batch)):
            if node is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not all(isinstance(t, ast.Name) for t in targets):
                continue
            if isinstance(node, ast.AnnAssign) and node.value is None:
                continue
            last = a + (node.end_lineno or node.lineno)  # 1-based
            if any(";" in rows[r] for r in range(a, last)) or runs_on(last):
                continue
            own = _word_counts("\n".join(rows[a:last]))
            if all(totals.get(t.id, 0) == own.get(t.id, 0) for t in targets):  # type: ignore[attr-defined]
                leaves.append((a + 1, last))
                words.append(own)
    return leaves, words


def _unwatched(
    leaves: List[Tuple[int, int]], words: List[dict], rows: List[str], statements: List[Tuple[int, int]],
    sites: Optional[List[int]], watched: set, bound_row: Callable[[int], str],
) -> List[Tuple[int, int]]:
    """The leaves that mention nothing a kept statement depends on: a statement that holds a
    site (every one when `sites` is None) watches the names it binds (`bound_row(a)`, its first
    row at column 0), or every word it spells when it binds none."""
    firsts = {a for a, _ in leaves}
    for a, b in statements:
        if a + 1 in firsts or (sites is not None and not _holds(sites, a + 1, b)):
            continue
        bind = _BINDS.match(bound_row(a))
        if bind is not None:
            watched.update(_WORD.findall(bind.group(1) or bind.group(2)))
        else:
            watched.update(_WORD.findall("\n".join(rows[a:b])))
    return [leaf for leaf, own in zip(leaves, words) if not any(w in watched for w in own)]


def _leaf_groups(leaves: List[Tuple[int, int]], rows: List[str], limit: int) -> List[List[Tuple[int, int]]]:
    """The leaves (row spans, in order) in consecutive runs of at most `limit` bytes each (a
    leaf longer than that is a run of its own): one run per piece."""
    groups: List[List[Tuple[int, int]]] = [[]]
    size = 0
    for a, b in leaves:
        n = sum(len(rows[r - 1]) + 1 for r in range(a, b + 1))
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append((a, b))
        size += n
    return groups
