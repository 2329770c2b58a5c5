"""`--add-noqa`: suppress every current finding with a `# noqa: CODE` on its line.

For adopting amplint on a codebase with known findings, as ruff's `--add-noqa`.
A code joins an existing `# noqa: ...` list; a bare `# noqa` already covers
everything. A row that ends inside a string or a backslash continuation cannot
take a comment and is left alone (reported). Notebooks are left alone too, and so
are the config files some rules report in (a DeepSpeed JSON has no comments):
`per-file-ignores` silences those.
Files keep their encoding and newlines (`writer`).
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, List, Sequence, Set, Tuple

from ..core.config import Config

#: codes a `# noqa` cannot or need not suppress
_SKIPPED = ("AMP000", "AMP900")


def commentable_rows(source: str) -> Set[int]:
    """Rows whose end is outside any string or continuation, where `# ...` may be appended."""
    rows: Set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT):
                rows.add(tok.start[0])
            elif tok.type == tokenize.ENDMARKER and tok.start[1] == 0 and not source.endswith(("\n", "\r")):
                rows.add(tok.start[0] - 1)
    except (tokenize.TokenError, SyntaxError):
        pass
    return rows


def with_noqa(line: str, codes: Sequence[str]) -> str:
    """`line` (with its line ending) carrying `# noqa` for `codes`."""
    from ..core.noqa import _NOQA

    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    m = _NOQA.search(body)
    if m is not None:
        if m.group("codes") is None:
            return line  # a bare noqa suppresses everything already
        have = [c.upper() for c in re.split(r"[\s,]+", m.group("codes")) if c]
        merged = have + [c for c in codes if c not in have]
        return body[: m.start()] + "# noqa: " + ", ".join(merged) + body[m.end() :] + ending
    return f"{body.rstrip()}  # noqa: {', '.join(codes)}{ending}"


def add_noqa_text(source: str, rows: Dict[int, Set[str]]) -> Tuple[str, int, List[int]]:
    """(new text, directives added, rows that could not take one)."""
    from ..core.text import split_lines

    lines = split_lines(source, keepends=True)
    ok = commentable_rows(source)
    added, refused = 0, []
    for row, codes in sorted(rows.items()):
        if row not in ok or not 0 < row <= len(lines):
            refused.append(row)
            continue
        new = with_noqa(lines[row - 1], sorted(codes))
        if new != lines[row - 1]:
            lines[row - 1] = new
            added += 1
    return "".join(lines), added, refused


def add_noqa_paths(paths: Sequence[str], config: Config, jobs: int = 1) -> Tuple[int, List[str], List[str]]:
    """Lint `paths` and add the directives; returns (directives added, error lines, notes: the
    config files left alone, which is no error)."""
    from . import writer
    from ..engine.notebook import is_notebook
    from ..engine.run import lint_paths

    by_file: Dict[str, Dict[int, Set[str]]] = {}
    for d in lint_paths(paths, config, jobs=jobs).diagnostics:
        if d.code in _SKIPPED or d.noqa_row is None:
            continue
        by_file.setdefault(d.filename, {}).setdefault(d.noqa_row, set()).add(d.code)
    total, errors, notes = 0, [], []
    for path, rows in by_file.items():
        if is_notebook(path):
            errors.append(f"{path}: notebooks are left alone by --add-noqa")
            continue
        if not path.endswith((".py", ".pyi")):  # a DeepSpeed JSON or accelerate YAML the code names
            codes = ", ".join(sorted({c for found in rows.values() for c in found}))
            notes.append(f"{path}: a config file takes no noqa comment; silence {codes} with per-file-ignores")
            continue
        try:
            original = writer.read_source(path)
            new, added, refused = add_noqa_text(original.text, rows)
            if added:
                writer.write_text(new, original)
        except (OSError, UnicodeError, SyntaxError, LookupError) as exc:
            errors.append(f"{path}: not changed: {exc}")
            continue
        total += added
        errors.extend(f"{path}:{row}: the line ends inside a string or continuation; no noqa added" for row in refused)
    return total, errors, notes
