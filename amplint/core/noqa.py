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
