"""AMP900 unused-noqa: a `# noqa: AMPxxx` that suppresses nothing.

An engine pseudo-rule (like AMP000): off by default, enabled with
`--extend-select AMP900` (or `ALL`). Only amplint's own codes are judged, and
only those the run could have reported: a code that is not selected, or that
`per-file-ignores` turns off for the file, may well be needed by another
configuration, so it is left alone. Codes of other linters (`E501`, `F401`)
and bare `# noqa` comments (which other linters read too) are never reported.
A code that is no amplint code at all (`AMP999`, a prefix like `AMP1`) never
suppresses anything and is reported as unknown.

The fix (safe) removes the unused codes, or the whole `# noqa` directive when
none is left, keeping any other text of the comment.

A file's AMP900 findings are made with its own findings; the run's cross-file
findings (engine/crossfile.py), made later, are suppressed by the same comments,
and `discount` takes the codes they use out again (`used_keys` names each by code
and the text of its line before the directive, so it survives fixes that move
rows: `--fix` re-lints each file alone, and the editor's buffer changes between
the project model's runs).
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import AbstractSet, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from ..core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity

CODE = "AMP900"
NAME = "unused-noqa"
OWN_PREFIX = "AMP"

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_SPLIT = re.compile(r"[\s,]+")


def _comments(source: str) -> Iterable[Tuple[int, int, str]]:
    """(row, 0-based column, text) of every real comment (not text inside strings)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.start[1], tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return


def unused_noqa(
    diagnostics: Sequence[Diagnostic],
    source: str,
    path: str,
    judged: FrozenSet[str],
    known: Sequence[str],
) -> List[Diagnostic]:
    """AMP900 diagnostics for `source`.

    `diagnostics`: what the rules reported before `# noqa` filtering;
    `judged`: the codes this run could have reported in this file.
    """
    if "noqa" not in source.lower():
        return []
    known_set = set(known)
    suppressed: Set[Tuple[int, str]] = set()
    for d in diagnostics:
        if d.noqa_row is not None:
            suppressed.add((d.noqa_row, d.code))
    from ..core.text import split_lines

    lines = split_lines(source)
    out: List[Diagnostic] = []
    for row, col, text in _comments(source):
        m = _NOQA.search(text)
        if m is None or m.group("codes") is None:
            continue  # a bare noqa is for every linter: never judged
        codes = [c for c in _SPLIT.split(m.group("codes")) if c]
        upper = [c.upper() for c in codes]
        if CODE in upper:
            continue  # `# noqa: AMP900` keeps the directive as it is
        unknown = [c for c, u in zip(codes, upper) if u.startswith(OWN_PREFIX) and u not in known_set]
        unused = [c for c, u in zip(codes, upper) if u in known_set and u in judged and (row, u) not in suppressed]
        if not unknown and not unused:
            continue
        out.append(_finding(path, lines, row, col, text, m, codes, unused, unknown))
    return out


def _finding(path: str, lines: List[str], row: int, col: int, text: str, m: "re.Match[str]", codes: List[str], unused: List[str], unknown: List[str]) -> Diagnostic:
    parts = []
    if unused:
        parts.append("unused: " + ", ".join(f"`{c}`" for c in unused))
    if unknown:
        parts.append("unknown: " + ", ".join(f"`{c}`" for c in unknown))
    drop = set(unused) | set(unknown)
    kept = [c for c in codes if c not in drop]
    fix = _fix(lines[row - 1] if row - 1 < len(lines) else "", row, col, text, m, kept)
    return Diagnostic(
        code=CODE,
        name=NAME,
        message=f"unused `noqa` directive ({'; '.join(parts)})",
        severity=Severity.WARNING,
        filename=path,
        location=Location(row, col + m.start() + 1),
        end_location=Location(row, col + m.end() + 1),
        fix=fix,
        noqa_row=None,  # it is about the directive itself
        data={"unused": unused, "unknown": unknown},
    )


def _line_key(line: str, column: Optional[int] = None) -> Optional[str]:
    """What names a `# noqa` line across edits elsewhere: its text before the directive
    (`column`: the directive's 1-based column; else the first directive of the line, the
    one `core.noqa.noqa_map` reads)."""
    if column is None:
        m = _NOQA.search(line)
        if m is None:
            return None
        column = m.start() + 1
    return line[: column - 1].strip()


def used_keys(suppressed: Iterable[Diagnostic], source: str) -> Set[Tuple[str, str]]:
    """(code, line key) for each finding of `source` that a `# noqa` suppressed (made
    outside the file's own lint: the cross-file pass)."""
    from ..core.text import split_lines

    lines = split_lines(source)
    out: Set[Tuple[str, str]] = set()
    for d in suppressed:
        row = d.noqa_row
        if row is None or not 0 < row <= len(lines):
            continue
        key = _line_key(lines[row - 1])
        if key is not None:
            out.add((d.code.upper(), key))
    return out


def discount(diagnostics: Sequence[Diagnostic], source: str, used: AbstractSet[Tuple[str, str]]) -> List[Diagnostic]:
    """`diagnostics` (of `source`) with each AMP900 finding rebuilt without the codes `used`
    holds for its line (see `used_keys`); one left with no code to report is dropped."""
    if not used or not any(d.code == CODE for d in diagnostics):
        return list(diagnostics)
    from ..core.text import split_lines

    lines = split_lines(source)
    by_key: Dict[str, Set[str]] = {}
    for code, key in used:
        by_key.setdefault(key, set()).add(code)
    comments: Optional[Dict[int, Tuple[int, str]]] = None
    out: List[Diagnostic] = []
    for d in diagnostics:
        row = d.location.row
        taken = by_key.get(_line_key(lines[row - 1], d.location.column) or "", set()) if d.code == CODE and 0 < row <= len(lines) else set()
        unused = [c for c in d.data.get("unused", ()) if c.upper() not in taken]
        if not taken or len(unused) == len(d.data.get("unused", ())):
            out.append(d)
            continue
        unknown = list(d.data.get("unknown", ()))
        if not unused and not unknown:
            continue
        if comments is None:
            comments = {r: (c, t) for r, c, t in _comments(source)}
        col, text = comments.get(row, (None, ""))
        m = _NOQA.search(text) if col is not None else None
        if m is None or m.group("codes") is None:
            out.append(d)
            continue
        codes = [c for c in _SPLIT.split(m.group("codes")) if c]
        out.append(_finding(d.filename, lines, row, col, text, m, codes, unused, unknown))
    return out


def _fix(line: str, row: int, col: int, comment: str, m: "re.Match[str]", kept: List[str]) -> Fix:
    if kept:
        c0 = col + m.start("codes")
        c1 = col + m.end("codes")
        edit = Edit(Location(row, c0 + 1), Location(row, c1 + 1), ", ".join(kept))
        return Fix(Applicability.SAFE, "Remove the unused codes", (edit,))
    rest = comment[m.end() :]
    if m.start() > 0:
        # another comment precedes the directive (`# type: ignore  # noqa: AMP101`): drop the directive
        # and the spaces before it
        before = comment[: m.start()]
        trimmed = len(before.rstrip())
        c0, c1 = col + trimmed, col + m.end()
        content = "" if not rest.strip() else " " + rest.lstrip()
        if content and not rest.lstrip().startswith("#"):
            content = "  # " + rest.strip()
        edit = Edit(Location(row, c0 + 1), Location(row, c1 + 1), content)
    elif rest.strip():
        # `# noqa: AMP101 because ...`: keep the explanation as a plain comment
        edit = Edit(Location(row, col + 1), Location(row, col + m.end() + 1), "#" if rest.startswith(" ") else "# ")
    else:
        # the whole comment goes, with the spaces before it
        c0 = len(line[:col].rstrip())
        edit = Edit(Location(row, c0 + 1), Location(row, col + len(comment) + 1), "")
    return Fix(Applicability.SAFE, "Remove the unused `noqa` directive", (edit,))
