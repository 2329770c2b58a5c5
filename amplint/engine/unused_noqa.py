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
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import FrozenSet, Iterable, List, Sequence, Set, Tuple

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
        parts = []
        if unused:
            parts.append("unused: " + ", ".join(f"`{c}`" for c in unused))
        if unknown:
            parts.append("unknown: " + ", ".join(f"`{c}`" for c in unknown))
        drop = set(unused) | set(unknown)
        kept = [c for c in codes if c not in drop]
        start = Location(row, col + m.start() + 1)
        end = Location(row, col + m.end() + 1)
        fix = _fix(lines[row - 1] if row - 1 < len(lines) else "", row, col, text, m, kept)
        out.append(
            Diagnostic(
                code=CODE,
                name=NAME,
                message=f"unused `noqa` directive ({'; '.join(parts)})",
                severity=Severity.WARNING,
                filename=path,
                location=start,
                end_location=end,
                fix=fix,
                noqa_row=None,  # it is about the directive itself
            )
        )
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
