"""Guard clauses as branches: the code after `if c: return` runs only when `c` is false.

The AMP model's branch paths (`Frame`s) come from `if`/`else`, loops and `try`.
A guard clause (`if step % accum: return`, `if not boundary: continue`) makes
the rest of its block an implicit `else` of that `if`, which the model's
paths do not show. Order rules that reason about when a step runs (an
accumulation boundary written as an early return) ask for the guarded path:
the event's path with one `Frame("else", guard)` per guard clause before it, so
`exclusive()` knows the guard's body and what follows it never run in one pass.
"""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import libcst as cst

from .context import ModuleContext
from .types import Frame, Path

_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_BOUNDARIES = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Module)


class GuardedPaths:
    """Guarded paths of one file; one `Frame` per guard, so frames compare by identity."""

    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self._frames: Dict[int, Frame] = {}

    def path(self, path: Path, statement: cst.CSTNode) -> Path:
        """`path` (the branches around `statement`, within its function) with the guard
        clauses before it, each placed after the frames that enclose the guard."""
        guards = self._guards(statement)
        if not guards:
            return path
        ranked: List[Tuple[int, int, Frame]] = [(i, 1, f) for i, f in enumerate(path)]
        for guard, enclosing in guards:
            depth = sum(1 for f in path if id(f.node) in enclosing)
            ranked.append((depth - 1, 2, self._frame(guard)))
        ranked.sort(key=lambda t: (t[0], t[1]))
        return tuple(f for _, _, f in ranked)

    def _frame(self, guard: cst.If) -> Frame:
        frame = self._frames.get(id(guard))
        if frame is None:
            frame = self._frames[id(guard)] = Frame("else", guard, guard.test)
        return frame

    def _guards(self, statement: cst.CSTNode) -> List[Tuple[cst.If, Set[int]]]:
        """Guard clauses before `statement` in its block and the blocks around it (up to its
        function), outermost first, each with the ids of the nodes around its block."""
        found: List[Tuple[cst.If, Set[int]]] = []
        child, parent = statement, self.ctx.parent(statement)
        while parent is not None and not isinstance(child, _BOUNDARIES):
            for _, enclosing in found:
                enclosing.add(id(parent))
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                for stmt in parent.body:
                    if stmt is child:
                        break
                    if isinstance(stmt, cst.If) and stmt.orelse is None and _exits(stmt.body):
                        found.append((stmt, set()))
            child, parent = parent, self.ctx.parent(parent)
        return list(reversed(found))


def _exits(body: cst.BaseSuite) -> bool:
    """The block always leaves: its last statement returns, raises, continues or breaks."""
    if isinstance(body, cst.SimpleStatementSuite):
        return any(isinstance(s, _EXITS) for s in body.body)
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, _EXITS) for s in last.body)
