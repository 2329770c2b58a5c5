"""Jupyter notebooks: lint the code cells as one program, report per cell, fix in place.

The code cells are joined in order into one Python program (a training loop
split over cells is one training loop), each preceded by a marker comment.
IPython syntax is replaced line for line by placeholders so every other line
keeps its row and column: line magics (`%time x`), shell lines (`!pip ...`),
help (`obj?`) and `x = !cmd` become a comment (or `pass` when indented; the
lines a `\\` at the end continues it onto stay comments, as IPython joins them); a
cell magic whose body is Python (`%%time`, `%%timeit`, `%%capture`, ...) has
only its first line replaced; any other cell magic (`%%bash`, `%%writefile`)
leaves the cell out. Raw and markdown cells are left out.

Cells are numbered like ruff does: `cell N` is the N-th cell of the notebook
(1-based, markdown cells counted), rows and columns are within the cell.

Fixes are applied to the program; the fixed program is split back at the
markers, the placeholders get their original lines back, and only the
`source` of changed cells is replaced, so outputs, execution counts and
metadata stay as they were. If a fix disturbed a marker the notebook is
not written.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core.diagnostics import Diagnostic, Edit, Fix, Location, Related
from .notebook_rows import file_rows, source_rows

NOTEBOOK_SUFFIX = ".ipynb"

#: cell magics whose body is Python code
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_MARKER = "# %% amplint cell {} %%"
_MARKER_RE = re.compile(r"^# %% amplint cell (\d+) %%$")
_PLACEHOLDER = "# amplint-ipython {}"
_PLACEHOLDER_RE = re.compile(r"^[ \t]*(?:pass  )?# amplint-ipython (\d+)$")
_SHELL_ASSIGN = re.compile(r"^[ \t]*[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[!%]")


class NotebookError(ValueError):
    """The file is not a notebook amplint can read."""


class NotPython(NotebookError):
    """A notebook of another language (an R or Julia kernel): nothing to lint."""


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


def _is_ipython_line(line: str) -> bool:
    stripped = line.lstrip()
    if not stripped or stripped.startswith("#"):
        return False
    if stripped[0] in "%!?":
        return True
    if stripped.rstrip().endswith("?") and "#" not in stripped:  # `obj?`, `obj??`
        return True
    return bool(_SHELL_ASSIGN.match(line))


@dataclass
class CellSpan:
    index: int  # 1-based position in the notebook's cell list
    first_row: int  # the program row of the cell's first line
    rows: int  # how many program rows the cell has
    trailing_newline: bool  # whether the cell's source ended with a newline


@dataclass
class Notebook:
    data: Dict[str, Any]
    raw: str  # the file's text
    source: str  # the program
    spans: List[CellSpan]
    ipython_lines: List[str]  # original lines behind the placeholders
    _file_rows: Optional[tuple] = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------- reading

    @classmethod
    def from_text(cls, raw: str) -> "Notebook":
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise NotebookError(f"invalid notebook JSON: {exc}") from None
        except RecursionError:  # the JSON scanner recurses per nested array or object
            raise NotebookError("invalid notebook JSON: arrays or objects nested too deeply to read") from None
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise NotebookError("not a notebook (no 'cells' list)")
        lang = (data.get("metadata") or {}).get("language_info", {}) or {}
        if isinstance(lang, dict) and lang.get("name") not in (None, "python"):
            raise NotPython(f"not a Python notebook (language {lang.get('name')!r})")
        lines: List[str] = []
        spans: List[CellSpan] = []
        ipython: List[str] = []
        for i, cell in enumerate(data["cells"], start=1):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            text = _cell_text(cell)
            cell_lines = text.split("\n")
            trailing = text.endswith("\n")
            if trailing:
                cell_lines.pop()
            if cell_lines and cell_lines[0].lstrip().startswith("%%"):
                magic = cell_lines[0].lstrip()[2:].split(None, 1)
                if not magic or magic[0] not in PYTHON_CELL_MAGICS:
                    continue  # %%bash, %%writefile, ...: not Python
            lines.append(_MARKER.format(i))
            first = len(lines) + 1
            continued = False  # the IPython line before ended in `\`: this line is more of it
            for line in cell_lines:
                line = line.rstrip("\r")
                if continued or _is_ipython_line(line):
                    ipython.append(line)
                    indent = line[: len(line) - len(line.lstrip())]
                    holder = _PLACEHOLDER.format(len(ipython) - 1)
                    # a continuation line is a comment at any indent; the line it continues holds the `pass`
                    lines.append(f"{indent}{holder}" if continued or not indent else f"{indent}pass  {holder}")
                    continued = line.endswith("\\")
                else:
                    lines.append(line)
            spans.append(CellSpan(i, first, len(cell_lines), trailing))
        source = "\n".join(lines) + "\n" if lines else ""
        return cls(data=data, raw=raw, source=source, spans=spans, ipython_lines=ipython)

    # ------------------------------------------------------------- positions

    def span_of_row(self, row: int) -> Optional[CellSpan]:
        found = None
        for span in self.spans:
            if span.first_row - 1 <= row:  # the marker row belongs to the cell after it
                found = span
            else:
                break
        return found

    def to_cell(self, loc: Location) -> Tuple[Optional[int], Location]:
        span = self.span_of_row(loc.row)
        if span is None:
            return None, loc
        return span.index, Location(max(loc.row - span.first_row + 1, 1), loc.column)

    def map_diagnostic(self, d: Diagnostic) -> Diagnostic:
        """A program diagnostic -> the same finding in cell coordinates."""
        cell, start = self.to_cell(d.location)
        end_cell, end = self.to_cell(d.end_location)
        if end_cell != cell:
            end = start
        noqa_row = None
        if d.noqa_row is not None:
            _, noqa = self.to_cell(Location(d.noqa_row, 1))
            noqa_row = noqa.row
        fix = d.fix
        if fix is not None:
            edits = []
            for e in fix.edits:
                _, a = self.to_cell(e.location)
                _, b = self.to_cell(e.end_location)
                edits.append(Edit(a, b, e.content))
            fix = Fix(fix.applicability, fix.message, tuple(edits))
        related = tuple(self._map_related(r) if r.filename is None else r for r in d.related)
        raw_rows = file_rows(self.file_rows(), cell, start.row, end.row)
        return replace(d, location=start, end_location=end, cell=cell, noqa_row=noqa_row, fix=fix, related=related, raw_rows=raw_rows)

    def _map_related(self, r: Related) -> Related:
        cell, start = self.to_cell(r.location)
        end_cell, end = self.to_cell(r.end_location)
        return Related(start, end if end_cell == cell else start, r.message, None, cell)

    def file_rows(self) -> Optional[Dict[int, List[int]]]:
        """cell -> the .ipynb row of each of its lines (computed once; see notebook_rows)."""
        if self._file_rows is None:
            self._file_rows = (source_rows(self.raw),)
        return self._file_rows[0]

    # ------------------------------------------------------------- writing

    def cell_sources(self, program: str) -> Optional[Dict[int, str]]:
        """cell index -> its new source text, from a (fixed) program; None if the markers are broken."""
        out: Dict[int, List[str]] = {}
        current: Optional[int] = None
        expected = [s.index for s in self.spans]
        seen: List[int] = []
        program_lines = program.split("\n")
        if program_lines and program_lines[-1] == "":
            program_lines.pop()  # the newline ending the program
        for line in program_lines:
            m = _MARKER_RE.match(line)
            if m:
                current = int(m.group(1))
                seen.append(current)
                out[current] = []
                continue
            if current is None:
                if line.strip():
                    return None
                continue
            p = _PLACEHOLDER_RE.match(line)
            if p:
                k = int(p.group(1))
                if k >= len(self.ipython_lines):
                    return None
                line = self.ipython_lines[k]
            out[current].append(line)
        if seen != expected:
            return None
        texts: Dict[int, str] = {}
        for span in self.spans:
            text = "\n".join(out[span.index])
            if span.trailing_newline:
                text += "\n"
            texts[span.index] = text
        return texts

    def render(self, program: str) -> Optional[str]:
        """The notebook file's text with the cells of `program`; None if it cannot be split back."""
        if program == self.source:
            return self.raw
        texts = self.cell_sources(program)
        if texts is None:
            return None
        data = json.loads(self.raw)  # a fresh copy, key order kept
        changed = False
        for span in self.spans:
            cell = data["cells"][span.index - 1]
            old = _cell_text(cell)
            new = texts[span.index]
            if old.replace("\r\n", "\n") == new:
                continue
            changed = True
            cell["source"] = new.splitlines(keepends=True) if isinstance(cell.get("source"), list) else new
        if not changed:
            return self.raw
        return dump_like(data, self.raw)

    def changed_cells(self, program: str) -> List[Tuple[int, str, str]]:
        """(cell index, old source, new source) for each cell `program` changes (for --diff)."""
        texts = self.cell_sources(program) or {}
        out = []
        for span in self.spans:
            cell = self.data["cells"][span.index - 1]
            old = _cell_text(cell).replace("\r\n", "\n")
            new = texts.get(span.index, old)
            if old != new:
                out.append((span.index, old, new))
        return out


def _cell_text(cell: Dict[str, Any]) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(str(s) for s in source)
    return str(source)


def dump_like(data: Any, raw: str) -> str:
    """JSON text for `data` in the layout of `raw` (indent, ASCII escaping, final newline).

    nbformat writes `indent=1, ensure_ascii=False`; a notebook written that way
    and left unchanged comes back byte for byte.
    """
    m = re.search(r"\n( +)\"", raw)
    indent: Optional[int] = len(m.group(1)) if m else None
    ensure_ascii = raw.isascii() and "\\u" in raw
    separators = None if indent is not None or ", " in raw else (",", ":")
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii, separators=separators)
    return text + "\n" if raw.endswith("\n") else text


# ------------------------------------------------------------------ linting


def lint_notebook_text(raw: str, path: str, config, rules: Sequence, codes) -> Tuple[Optional[Notebook], "object"]:
    """(notebook, FileResult with diagnostics in cell coordinates)."""
    from .pipeline import NO_AMP_CODE, UNREADABLE, FileResult, SYNTAX_ERROR_CODE, lint_file_source, syntax_error

    try:
        nb = Notebook.from_text(raw)
    except NotebookError as exc:
        result = FileResult(path=path, read=NO_AMP_CODE if isinstance(exc, NotPython) else UNREADABLE)
        if SYNTAX_ERROR_CODE in codes and not isinstance(exc, NotPython):
            result.diagnostics.append(syntax_error(path, 1, 1, f"cannot lint: {exc}"))
        return None, result
    result = lint_file_source(nb.source, path, config, rules, codes)
    result.diagnostics = [nb.map_diagnostic(d) for d in result.diagnostics]
    return nb, result


def read_notebook_text(path: str) -> str:
    from ..core.safe_read import read_bytes

    return read_bytes(path).decode("utf-8-sig")


def lint_notebook_path(path: str, config, rules: Sequence, codes) -> "object":
    from .pipeline import UNREADABLE, FileResult, SYNTAX_ERROR_CODE, syntax_error

    try:
        raw = read_notebook_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        result = FileResult(path=path, read=UNREADABLE)
        if SYNTAX_ERROR_CODE in codes:
            reason = getattr(exc, "strerror", None) or str(exc)
            result.diagnostics.append(syntax_error(path, 1, 1, f"cannot lint: {reason}"))
        return result
    return lint_notebook_text(raw, path, config, rules, codes)[1]


def lint_notebook(raw: str, path: str = "<notebook>.ipynb", config=None) -> List[Diagnostic]:
    """Lint one notebook's text as if it were the whole project (like `lint_source`)."""
    from ..core.config import Config
    from .pipeline import resolve_conditions, selected_rules
    from ..model.facts import ProjectFacts

    config = config or Config()
    codes, rules = selected_rules(config)
    _, result = lint_notebook_text(raw, path, config, rules, codes)
    facts = ProjectFacts.from_files([result.facts])
    return sorted(resolve_conditions(result.diagnostics, facts, config), key=Diagnostic.sort_key)
