"""`# noqa` comments: which rows suppress which codes (the engine applies them;
rules' fixes ask whether a node is already suppressed)."""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)


def noqa_map(source: str) -> Dict[int, Optional[FrozenSet[str]]]:
    """row -> the codes its `# noqa: ...` names (None: a bare `# noqa`, all codes)."""
    out: Dict[int, Optional[FrozenSet[str]]] = {}
    if "noqa" not in source and "NOQA" not in source:
        return out
    from .text import split_lines

    for row, line in enumerate(split_lines(source), start=1):
        if "#" not in line:
            continue
        m = _NOQA.search(line)
        if m is None:
            continue
        codes = m.group("codes")
        out[row] = None if codes is None else frozenset(c.upper() for c in re.split(r"[\s,]+", codes) if c)
    return out


_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*amplint[ \t]*:[ \t]*noqa(?:[ \t]*:[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[ \t,]+[A-Za-z]+[0-9]+)*))?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


def file_exemption(source: str) -> Optional[FrozenSet[str]]:
    """The codes an own-line `# amplint: noqa: CODES` turns off for the whole file (ruff's
    `# ruff: noqa`); an empty set for a bare `# amplint: noqa` (everything); None when the
    file has neither. Text inside a string is not a directive."""
    if "amplint" not in source:
        return None
    found: Optional[set] = None
    matches = list(_FILE_NOQA.finditer(source))
    comments = _comment_rows(source) if matches else set()
    for m in matches:
        if source.count("\n", 0, m.start()) + 1 not in comments:
            continue  # the text of a string, not a comment
        codes = m.group("codes")
        if codes is None:
            return frozenset()
        found = (found or set()) | {c.upper() for c in re.split(r"[\s,]+", codes) if c}
    return frozenset(found) if found is not None else None


def _comment_rows(source: str) -> set:
    import io
    import tokenize

    rows = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                rows.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass
    return rows
