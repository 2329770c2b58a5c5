"""CPython's own parser, for the places that need a syntax tree but not libcst's.

`ast` is C and several times cheaper than libcst; the gates' second look
(`core/docstrings.py`) and the project model's summaries (`model/project/`)
read statements only, so they walk statement bodies and never expressions.
"""
from __future__ import annotations

import ast
import warnings
from collections import deque
from typing import Iterator, List, Optional

#: the nodes that hold statement bodies (besides statements): `except` handlers, `match` cases
_NESTING = (ast.stmt, ast.excepthandler, getattr(ast, "match_case", ast.excepthandler))


def parse(source: str) -> Optional[ast.Module]:
    """The tree of `source`; None when CPython cannot parse it (invalid, too deep, NUL bytes).
    Warnings about the text (invalid escape sequences) are not the user's business here."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def statements(body: List[ast.stmt]) -> Iterator[ast.AST]:
    """Every statement of `body` and of the bodies nested in it (functions, classes, branches,
    `try` with its handlers, `match` cases), in the order `ast.walk` meets them (breadth
    first), without visiting expressions."""
    queue = deque(body)
    while queue:
        node = queue.popleft()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if value.__class__ is list and value and isinstance(value[0], _NESTING):
                queue.extend(value)
