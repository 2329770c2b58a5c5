"""A text with its docstrings blanked out, for a second look at gates before a whole-file parse.

Gates read words on raw text and cannot tell a docstring from code when the line
alone does not say (`gates.in_prose` answers "code" inside triple quotes): a
150 KB `training_args.py` whose only "AdamW (" is in a help text, or a utils module
that mentions `DataParallel` in a docstring, was parsed whole by libcst for
nothing. Before a file is parsed whole, the pipeline asks the gates again on the
text returned here: a rule whose gate then fails can only have passed on
docstring words, and no rule reads docstrings, so it cannot fire. CPython's
parser (C, several times cheaper than libcst's) finds the string statements.

Only ever used to drop rules: an unparsable text gives None and the gates keep
their first answer.
"""
from __future__ import annotations

import ast
import re
from typing import List, Optional, Tuple

from .pyast import parse, statements


def has_triple_quotes(source: str) -> bool:
    return '"""' in source or "'''" in source


def without_docstrings(source: str) -> Optional[str]:
    """`source` with every statement that is a plain string literal (docstrings, strings
    used as block comments) replaced by spaces, newlines kept; None when it does not parse."""
    if source.count("\r") != source.count("\r\n"):
        return None  # lone carriage returns end lines for CPython, not for the offsets below
    tree = parse(source)
    if tree is None:
        return None
    spans = _string_statements(tree)
    if not spans:
        return source
    data = bytearray(source.encode("utf-8", "surrogatepass"))
    starts = _line_starts(data)
    for (row, col), (end_row, end_col) in spans:
        begin, end = starts[row - 1] + col, starts[end_row - 1] + end_col
        data[begin:end] = data[begin:end].translate(_BLANK)
    return data.decode("utf-8", "surrogatepass")


#: every byte to a space but the newline (a docstring's bytes blanked, its lines kept): one C
#: call per docstring, where a generator over its bytes cost ~40 ms per MB of a file
_BLANK = bytes(10 if b == 10 else 32 for b in range(256))


def _string_statements(tree: ast.Module) -> List[Tuple[Tuple[int, int], Tuple[int, int]]]:
    """((row, byte column), (end row, end byte column)) of each plain-string statement."""
    out = []
    for node in statements(tree.body):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            v = node.value
            if v.end_lineno is not None and v.end_col_offset is not None:
                out.append(((v.lineno, v.col_offset), (v.end_lineno, v.end_col_offset)))
    return out


def _line_starts(data: bytearray) -> List[int]:
    return [0, *(m.end() for m in _NEWLINE.finditer(data))]


_NEWLINE = re.compile(b"\n")
