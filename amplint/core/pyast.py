"""CPython's own parser, for the places that need a syntax tree but not libcst's.

`ast` is C and several times cheaper than libcst; the gates' second look
(`core/docstrings.py`) and the project model's summaries (`model/project/`)
read statements only, so they walk statement bodies and never expressions.
"""
from __future__ import annotations

import ast
import threading
import warnings
from collections import deque
from contextlib import contextmanager
from typing import Iterator, List, Optional

#: the nodes that hold statement bodies (besides statements): `except` handlers, `match` cases
_NESTING = (ast.stmt, ast.excepthandler, getattr(ast, "match_case", ast.excepthandler))


#: while a file is linted (`remembered`): [(text, its tree)] of the last `parse`, or [None]; the
#: docstring second look, the wrapper rules' view and the lint's summaries read the same text
_LAST: list = []
_SLOT = threading.Lock()
#: texts longer than this are never kept (their tree is many times their size)
REMEMBER_CHARS = 1 << 20


def parse(source: str) -> Optional[ast.Module]:
    """The tree of `source`; None when CPython cannot parse it (invalid, too deep, NUL bytes).
    Warnings about the text (invalid escape sequences) are not the user's business here.
    Callers only read the tree (never change a node), so inside `remembered` the same text
    (the same string object) gets the same tree."""
    with _SLOT:
        last = _LAST[0] if _LAST else None
    if last is not None and last[0] is source:
        return last[1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree: Optional[ast.Module] = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if len(source) <= REMEMBER_CHARS:
        with _SLOT:
            if _LAST:
                _LAST[0] = (source, tree)
    return tree


def forget() -> None:
    """Drop the tree kept by `remembered` (the block goes on, keeping the next one): for its
    last reader, so that the tree is freed before the cycle collector would traverse it."""
    with _SLOT:
        if _LAST:
            _LAST[0] = None


@contextmanager
def remembered() -> Iterator[None]:
    """The last tree `parse` made kept for the same text until the block ends (one file's lint:
    a whole-file tree is several times the file's size, so it is never kept longer)."""
    with _SLOT:
        _LAST[:] = [None]
    try:
        yield
    finally:
        with _SLOT:
            _LAST.clear()


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
