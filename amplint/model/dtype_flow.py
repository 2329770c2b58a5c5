"""The dtype a plain name visibly holds at a point of a function, in time linear in the function.

`ModuleContext.known_dtype(name, scope, before)` is the dtype every assignment
to `name` in `scope` before `before` agrees on (None when they disagree or one
is unknown). Asked naively, each question scans the earlier assignments and
asks again about each one's value, which names the same variable again in the
common `scores = scores.masked_fill(...)` chain: n such lines took time
exponential in n (cut only by the recursion limit of 10 levels: 20 lines took
seconds). Here each (name, scope, depth) keeps its assignments in order and the
running agreement of their dtypes, extended as far as a question needs, so n
lines cost O(n) per depth level.

The value of an earlier assignment is judged as `known_dtype` judges it at
that assignment (`before` = its order, one level deeper); the statement whose
own assignments are ignored only matters at the question's own level, because
every earlier assignment precedes that statement.

Asked with the control-flow path of the point (`known_dtype(..., path=)`), the
answer is flow-sensitive: only the assignments from the last one whose path
encloses the point's (it runs on every way there: not in a branch, loop body or
`try` the point is outside of) must agree, each judged at its own place the same
way, once per depth. AMP301 asks so about the arguments a private helper is
called with (`x = x.float()` hides an earlier `x = torch.einsum(...)`).
"""
from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .paths import path_contains

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from .types import Assignment, Path, Scope

_EMPTY = object()  # no assignment yet
_CONFLICT = object()  # two assignments disagree


class _Table:
    """One variable's assignments in one scope, and the running agreement of their dtypes."""

    __slots__ = ("assignments", "orders", "index", "agreement")

    def __init__(self, assignments: "List[Assignment]") -> None:
        self.assignments = assignments
        self.orders = [a.order for a in assignments]
        self.index = {id(a.node): i for i, a in enumerate(assignments)}  # Assign node -> position
        self.agreement: List[object] = []  # agreement[i]: over assignments[0..i]


class NameDtypes:
    """Per AMP model: the answers of `known_dtype` for plain names."""

    def __init__(self, ctx: Any) -> None:  # the ModuleContext (above this module)
        self._ctx = ctx
        self._tables: Dict[Tuple[str, int, int], _Table] = {}
        self._flow_memo: Dict[Tuple[int, str, int], Optional[str]] = {}

    def lookup(
        self, name: str, scope: "Scope", before: int, statement: "Optional[cst.CSTNode]", depth: int, path: "Optional[Path]" = None
    ) -> Optional[str]:
        table = self._table(name, scope, depth)
        count = bisect_left(table.orders, before)
        if count == 0:
            return None
        skipped = _own_assignments(table, count, statement)
        if path is not None:
            return self._flow(table, count, skipped, scope, depth, path)
        if skipped:
            first = min(skipped)
            if any(i not in skipped for i in range(first, count)):
                return self._agreement_without(table, count, skipped, scope, depth)
            count = first  # the statement's own assignments come last: the prefix before them
            if count == 0:
                return None
        state = self._agreement(table, count, scope, depth)
        return None if state is _CONFLICT or state is _EMPTY else state  # type: ignore[return-value]

    def _table(self, name: str, scope: "Scope", depth: int) -> _Table:
        key = (name, id(scope), depth)
        table = self._tables.get(key)
        if table is None:
            found = [
                a
                for a in self._ctx.assignments_to(name, scope)
                if a.scope is scope and (not a.unpacked or self._ctx.unpacks_alike(a.value))
            ]
            found.sort(key=lambda a: a.order)
            table = self._tables[key] = _Table(found)
        return table

    def _dtype(self, assignment: "Assignment", scope: "Scope", depth: int) -> Optional[str]:
        return self._ctx.known_dtype(assignment.value, scope, assignment.order, None, depth + 1)

    def _agreement(self, table: _Table, count: int, scope: "Scope", depth: int) -> object:
        """The agreement over the first `count` assignments (extending the running one)."""
        agreement = table.agreement
        while len(agreement) < count:
            i = len(agreement)
            previous = agreement[i - 1] if i else _EMPTY
            if previous is _CONFLICT:
                agreement.append(_CONFLICT)
                continue
            d = self._dtype(table.assignments[i], scope, depth)
            agreement.append(d if previous is _EMPTY or previous == d else _CONFLICT)
        return agreement[count - 1]

    def _flow(self, table: _Table, count: int, skipped: set, scope: "Scope", depth: int, path: "Path") -> Optional[str]:
        """The agreement of the assignments from the last one that dominates the point (its
        control flow encloses the point's: every way there runs through it) on; without one,
        of all of them, as the flow-insensitive answer. Each assignment's value is judged
        flow-sensitively too, at its own place, once per depth."""
        kept = [i for i in range(count) if i not in skipped]
        start = next((i for i in reversed(kept) if path_contains(table.assignments[i].path, path)), None)
        if start is not None:
            kept = [i for i in kept if i >= start]
        dtypes = {self._flow_dtype(table.assignments[i], scope, depth) for i in kept}
        return dtypes.pop() if len(dtypes) == 1 else None

    def _flow_dtype(self, assignment: "Assignment", scope: "Scope", depth: int) -> Optional[str]:
        key = (id(assignment.node), assignment.target, depth)
        if key not in self._flow_memo:
            self._flow_memo[key] = None  # an assignment that names itself: unknown
            self._flow_memo[key] = self._ctx.known_dtype(
                assignment.value, scope, assignment.order, None, depth + 1, assignment.path
            )
        return self._flow_memo[key]

    def _agreement_without(self, table: _Table, count: int, skipped: set, scope: "Scope", depth: int) -> Optional[str]:
        dtypes = {self._dtype(a, scope, depth) for i, a in enumerate(table.assignments[:count]) if i not in skipped}
        return dtypes.pop() if len(dtypes) == 1 else None


def _own_assignments(table: _Table, count: int, statement: "Optional[cst.CSTNode]") -> set:
    """Positions (below `count`) of the assignments that are small statements of `statement`."""
    import libcst as cst

    if not isinstance(statement, cst.SimpleStatementLine):
        return set()
    found = (table.index.get(id(s)) for s in statement.body)
    return {i for i in found if i is not None and i < count}
