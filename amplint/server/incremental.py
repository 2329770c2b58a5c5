"""The server's keystroke path: re-lint only the edited top-level definition.

A full lint of a 5,000-line buffer costs seconds (libcst's parse alone is over
a second); a keystroke changes one function. `Base` is the last exact lint of
a buffer: its text, its top-level statements (line ranges and `shapes.Shape`),
the findings before project-fact conditions were resolved, its own facts and
gate. `relint` takes the next text and, when the change lies inside one
top-level `def`/`class` E that nothing else in the file depends on, lints an
excerpt instead of the file: the module-level statements, E, the definitions E
names (transitively) and those adding to the file-wide registries, with every
other definition blanked (`engine/excerpt.py` does the same for gates; line
numbers stay). E's findings come from the excerpt; the others' are the base's,
moved by E's change in line count. Anything else returns None and the caller
lints the whole buffer:

- the change is not inside one top-level definition, or the new buffer's
  statement there does not parse alone as one definition;
- E (before or after) holds an import or `global`/`nonlocal`;
- another statement names E or a class inside it, or calls `self.m` for a
  function `m` defined in E (the per-file model resolves those by name); or E
  names another top-level function or calls `self.m` for a method `m` another
  statement defines and E does not (a function's findings may depend on its
  callers);
- E's registry contributions (GradScalers, optimizers, held autocasts: see
  `shapes.py`) changed, or an assignment in E changed to a name another
  statement uses (some rules read a name's assignments file-wide);
- the rules passing the gate, the file-level `# amplint: noqa`, or E's facts
  changed in a way the excerpt cannot tell (see `_facts`);
- a kept finding of another statement points into E (a related site, a line
  in its data), or the excerpt's lint fails (syntax, an internal error);
- AMP900 (unused noqa) is selected: it is about the whole file;
- the background full lint once found other findings in E than its excerpt
  did (`Base.distrust`): the excerpt would show them again at every keystroke.

The server publishes this result at once and then runs the full lint in the
background (`recheck.py`), re-publishing if it differs, so the editor is
always eventually exact; tests/test_server_incremental.py checks that this
result equals a full lint after many scripted edits of real files.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..core.config import Config
from ..core.diagnostics import Diagnostic, Edit, Fix, Location
from ..core.noqa import file_exemption
from ..core.pyast import parse as parse_python
from ..model.facts import FileFacts
from .shapes import DEFINITIONS, Shape, aliases, registry_of, shape


@dataclass(frozen=True)
class Statement:
    first: int  # 1-based, its first decorator included
    last: int  # 1-based, inclusive
    shape: Shape


@dataclass
class Base:
    """An exact lint of one buffer, and what the next keystroke's re-lint needs from it."""

    source: str
    rows: List[str]
    statements: List[Statement]
    starts: List[int]  # each statement's `first`, for bisect
    raw: List[Diagnostic]  # after noqa and per-file ignores, before project-fact conditions
    facts: FileFacts
    active: Tuple[str, ...]  # the codes of the rules that passed the gate
    exemption: Optional[FrozenSet[str]]
    aliases: Dict[str, str]
    config: Config
    confirmed: bool = True  # from a full lint (False: from an incremental one, not yet checked)
    #: definitions whose excerpt once gave other findings than the full lint: edits in them
    #: re-lint the whole buffer (see `distrusted`)
    distrust: FrozenSet[str] = frozenset()


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def base_of(
    source: str, raw: Sequence[Diagnostic], facts: FileFacts, active: Sequence[str], config: Config, distrust: FrozenSet[str] = frozenset()
) -> Optional[Base]:
    """The base for incremental re-lints after a full lint of `source`; None when it cannot be one.
    `distrust`: the previous base's (`Base.distrust`)."""
    from ..engine.pipeline import SYNTAX_ERROR_CODE

    if "\r" in source or any(d.code == SYNTAX_ERROR_CODE for d in raw):
        return None
    tree = parse_python(source)
    if tree is None:
        return None
    rows = source.split("\n")
    table = aliases(tree)
    statements = []
    for node in tree.body:
        first, last = _first_line(node), node.end_lineno or node.lineno
        text = "\n".join(rows[first - 1 : last])
        statements.append(Statement(first, last, shape(node, table, text)))
    return Base(
        source=source,
        rows=rows,
        statements=statements,
        starts=[s.first for s in statements],
        raw=list(raw),
        facts=facts,
        active=tuple(active),
        exemption=file_exemption(source),
        aliases=table,
        config=config,
        distrust=distrust,
    )


def distrusted(fast: Base, full: Sequence[Diagnostic]) -> FrozenSet[str]:
    """`fast.distrust` and the definitions where `fast` (an incremental result) and `full` (the
    full lint of the same text) disagree on a finding. A rule that looks a name up file-wide
    (`ModuleContext.assignments_to(name)`) can see, in the whole file, an assignment the
    excerpt left out; the next keystroke in that definition would show the excerpt's finding
    again until the background lint corrects it. Edits in these lint the whole buffer."""
    differing = _missing(fast.raw, full) + _missing(full, fast.raw)
    names = set(fast.distrust)
    for d in differing:
        i = bisect.bisect_right(fast.starts, d.location.row) - 1
        if i >= 0 and d.location.row <= fast.statements[i].last and fast.statements[i].shape.name is not None:
            names.add(fast.statements[i].shape.name)
    return frozenset(names)


def _missing(these: Sequence[Diagnostic], there: Sequence[Diagnostic]) -> List[Diagnostic]:
    """The findings of `these` not in `there` (compared within their sort key: not quadratic)."""
    by_key: Dict[tuple, List[Diagnostic]] = {}
    for d in there:
        by_key.setdefault(d.sort_key(), []).append(d)
    return [d for d in these if d not in by_key.get(d.sort_key(), ())]


@dataclass
class Relinted:
    raw: List[Diagnostic]
    facts: FileFacts
    base: Base  # the base for the next keystroke


def relint(base: Base, source: str, path: str, config: Config, rules: Sequence, codes: FrozenSet[str]) -> Optional[Relinted]:
    """The findings of `source` from `base` and a lint of one definition; None: lint it whole."""
    from ..core.gating import passing
    from ..engine.pipeline import UNUSED_NOQA_CODE

    if config is not base.config or UNUSED_NOQA_CODE in codes or "\r" in source:
        return None
    if source == base.source:
        return Relinted(base.raw, base.facts, base)
    rows = source.split("\n")
    found = _changed(base, rows)
    if found is None:
        return None
    index, new_stmt, delta, changed_to = found
    old_stmt = base.statements[index]
    if old_stmt.shape.name in base.distrust:
        return None
    others = base.statements[:index] + base.statements[index + 1 :]
    if not _independent(old_stmt.shape, new_stmt.shape, others):
        return None
    active = passing(rules, source)
    if tuple(r.code for r in active) != base.active or file_exemption(source) != base.exemption:
        return None
    if any(getattr(r, "text_only", False) for r in active):
        return None  # a text-only rule (the wrapper rules) reads the whole file's names: no excerpt
    # the statements of the new buffer
    after = [Statement(s.first + delta, s.last + delta, s.shape) for s in base.statements[index + 1 :]]
    statements = base.statements[:index] + [new_stmt] + after
    real = _excerpt(statements, index)
    text = "\n".join(rows[r - 1] for r in real)
    result = _lint_excerpt(text, path, config, active, codes, base.exemption)
    if result is None:
        return None
    facts = _facts(base, old_stmt, new_stmt, result, text, path, config)
    if facts is None:
        return None

    def back(r: int) -> int:  # an excerpt row -> the buffer's
        return real[r - 1] if 0 < r <= len(real) else real[-1] + r - len(real)

    own = []
    for d in result.diagnostics:
        mapped = _remap(d, back)
        if mapped is not None and new_stmt.first <= mapped.location.row <= new_stmt.last:
            own.append(mapped)

    def shift(r: int) -> Optional[int]:
        if old_stmt.first <= r <= changed_to:
            return None  # a kept finding points into the edited rows
        return r + delta if r > changed_to else r

    kept: List[Diagnostic] = []
    for d in base.raw:
        if old_stmt.first <= d.location.row <= changed_to:
            continue
        moved = _remap(d, shift) if delta or d.related or d.data else d
        if moved is None:
            return None
        kept.append(moved)
    raw = kept + own
    new_base = Base(
        source=source,
        rows=rows,
        statements=statements,
        starts=[s.first for s in statements],
        raw=raw,
        facts=facts,
        active=base.active,
        exemption=base.exemption,
        aliases=base.aliases,
        config=config,
        confirmed=False,
        distrust=base.distrust,
    )
    return Relinted(raw, facts, new_base)


# ------------------------------------------------------------------ where the change is


def _changed(base: Base, rows: List[str]) -> Optional[Tuple[int, Statement, int, int]]:
    """(index of the edited statement, its new Statement, line delta, the last changed old
    row), or None. The changed rows lie in one top-level definition, or run from it into the
    blank and comment lines before the next statement (typing at the end of a function)."""
    old = base.rows
    limit = min(len(old), len(rows))
    a = _common(lambda k: old[:k] == rows[:k], limit)
    b = _common(lambda k: old[len(old) - k :] == rows[len(rows) - k :], limit - a)
    lo, hi_old, hi_new = a + 1, len(old) - b, len(rows) - b  # the changed rows (1-based, hi may be lo - 1)
    delta = len(rows) - len(old)
    i = bisect.bisect_right(base.starts, lo if hi_old >= lo else lo - 1) - 1
    if i < 0:
        return None
    stmt = base.statements[i]
    following = base.statements[i + 1].first if i + 1 < len(base.statements) else len(old) + 1
    if not stmt.shape.is_def or lo < stmt.first or hi_old >= following:
        return None
    region = rows[stmt.first - 1 : max(stmt.last + delta, hi_new)]
    tree = parse_python("\n".join(region))
    if tree is None or len(tree.body) != 1 or not isinstance(tree.body[0], DEFINITIONS):
        return None
    node = tree.body[0]
    first = stmt.first - 1 + _first_line(node)
    last = stmt.first - 1 + (node.end_lineno or node.lineno)
    if first != stmt.first:
        return None  # lines above it became comments: let the whole file decide
    text = "\n".join(rows[first - 1 : last])
    return i, Statement(first, last, shape(node, base.aliases, text)), delta, max(hi_old, stmt.last)


def _common(same: Callable[[int], bool], limit: int) -> int:
    """The largest k <= limit with same(k) (monotone), by bisection: list slices compare in C."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------ what depends on it


def _independent(old: Shape, new: Shape, others: Sequence[Statement]) -> bool:
    """Whether no other statement's findings can change with the edit (see the module docstring)."""
    if old.imports or new.imports or old.scoping or new.scoping or old.exported != new.exported:
        return False
    exported = old.exported | new.exported
    methods = old.methods | new.methods
    keys = old.keys.union(new.keys, *(s.shape.keys for s in others if s.shape.keys))
    if registry_of(old, keys) != registry_of(new, keys):
        return False
    changed = {name for name, _ in set(old.assigns) ^ set(new.assigns)}
    if changed:  # rules look some assignments up by name, file-wide: who reads these names?
        heads = {n.split(".", 1)[0] for n in changed if not n.startswith("self.")}
        attrs = {n.split(".")[1] for n in changed if n.startswith("self.")}
        if any(heads & s.shape.bare or attrs & s.shape.self_attrs for s in others):
            return False
    bare = old.bare | new.bare
    calls = (old.self_attrs | new.self_attrs) - methods  # `self.m` that E may not resolve itself
    for s in others:
        if exported & s.shape.bare or methods & s.shape.self_attrs:
            return False  # it names E, or may run one of E's methods
        if s.shape.function in bare or calls & s.shape.methods:
            return False  # E runs it: its findings may depend on its callers
    return True


def _excerpt(statements: List[Statement], index: int) -> List[int]:
    """The rows (1-based) of the excerpt: every statement but the definitions other than
    `index` that it does not reach by name (transitively: classes, whose attributes its
    `self.` may read) and that hold no registry entry or import. Only the kept rows are parsed: blank lines in their place cost libcst
    (and position generation) as much as short code."""
    edited = statements[index]
    keys = frozenset().union(*(s.shape.keys for s in statements if s.shape.keys))
    keep = [not s.shape.is_def or s.shape.imports or bool(s.shape.registry and registry_of(s.shape, keys)) for s in statements]
    keep[index] = True
    bare, attrs = set(edited.shape.bare), set(edited.shape.self_attrs)
    changed = True
    while changed:
        changed = False
        for i, s in enumerate(statements):
            if not keep[i] and (s.shape.exported & bare or s.shape.methods & attrs):
                keep[i] = changed = True
                bare |= s.shape.bare
                attrs |= s.shape.self_attrs
    out: List[int] = []
    for s, kept in zip(statements, keep):
        if kept:
            start = max(s.first, out[-1] + 1) if out else s.first  # `a = 1; b = 2`: one row, two statements
            out.extend(range(start, s.last + 1))
    return out


def _lint_excerpt(text: str, path: str, config: Config, active: Sequence, codes: FrozenSet[str], exemption: Optional[FrozenSet[str]]):
    from ..engine.budget import BudgetExceeded, file_budget
    from ..engine.pipeline import FileResult, SYNTAX_ERROR_CODE, lint_active

    if exemption is not None and not exemption:
        return FileResult(path=path)  # the whole file is exempt (never reached: the gate of a full lint)
    try:
        with file_budget(config.file_timeout):
            result = lint_active(text, path, config, active, codes, exemption)
    except BudgetExceeded:
        return None
    if any(d.code == SYNTAX_ERROR_CODE for d in result.diagnostics):
        return None
    return result


def _facts(base: Base, old: Statement, new: Statement, result, text: str, path: str, config: Config) -> Optional[FileFacts]:
    """The new buffer's facts, or None when only a full lint can tell.

    A fact needs trigger text: an edit whose definition has none before and
    after leaves them as they were. Otherwise the excerpt's facts are a subset
    of the new buffer's, and the new buffer's are at most the old ones plus the
    excerpt's: equal to the excerpt's when those hold every old one.
    """
    if not old.shape.facts_text and not new.shape.facts_text:
        return base.facts
    mine, known = result.facts, base.facts
    if not result.parsed:  # the engine cut the excerpt further: read all of it
        from ..engine.parallel import facts_of_source

        mine = facts_of_source(text, path, config) or FileFacts()
    fields = ("fp16", "bf16", "dtype_unknown", "autocast")
    if all(getattr(mine, f) or not getattr(known, f) for f in fields):
        return mine
    return None


# ------------------------------------------------------------------ moving findings


def _remap(d: Diagnostic, row: Callable[[int], Optional[int]]) -> Optional[Diagnostic]:
    """`d` with every row in this file (its span, noqa row, fix, related sites, `*_line` and
    `*_row` data) mapped by `row`; None when `row` refuses one."""
    bad = False

    def new_row(r: int) -> int:
        nonlocal bad
        moved = row(r)
        if moved is None:
            bad = True
            return r
        return moved

    def loc(at: Location) -> Location:
        moved = new_row(at.row)
        return at if moved == at.row else Location(moved, at.column)

    def end(start: Location, at: Location) -> Location:
        """A span ending at column 1 ends with the newline of the row above: that row is mapped
        (the excerpt's next row may lie many buffer rows further on, past blank lines it left out)."""
        if at.column != 1 or at.row <= start.row:
            return loc(at)
        moved = new_row(at.row - 1) + 1
        return at if moved == at.row else Location(moved, 1)

    changes: dict = {"location": loc(d.location), "end_location": end(d.location, d.end_location)}
    if d.noqa_row is not None:
        changes["noqa_row"] = new_row(d.noqa_row)
    if d.fix is not None:
        edits = tuple(Edit(loc(e.location), end(e.location, e.end_location), e.content) for e in d.fix.edits)
        changes["fix"] = Fix(d.fix.applicability, d.fix.message, edits)
    if d.related:
        changes["related"] = tuple(
            r if r.filename is not None
            else dataclasses.replace(r, location=loc(r.location), end_location=end(r.location, r.end_location))
            for r in d.related
        )
    if d.data:
        data = dict(d.data)
        for k, v in d.data.items():
            if isinstance(v, int) and not isinstance(v, bool) and (k.endswith("_line") or k.endswith("_row")):
                data[k] = new_row(v)
        changes["data"] = data
    if bad:
        return None
    return dataclasses.replace(d, **changes)
