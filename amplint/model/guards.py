"""Guard clauses as branches: the code after `if c: return` runs only when `c` is false.

The AMP model's branch paths (`Frame`s) come from `if`/`else`, loops and `try`.
A guard clause (`if step % accum: return`, `if not boundary: continue`) makes
the rest of its block an implicit `else` of that `if`, which the model's
paths do not show. Order rules that reason about when a step runs (an
accumulation boundary written as an early return) ask for the guarded path:
the event's path with one `Frame("else", guard)` per guard clause before it, so
`exclusive()` knows the guard's body and what follows it never run in one pass.

Each block's guard clauses are listed once (with every statement's index in the
block), so asking for an event's guards costs the blocks around it and the guards
it gets, not a rescan of the statements before it: n training steps in one loop
stay linear in n.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Dict, List, Tuple

import libcst as cst

from .context import ModuleContext
from .types import Frame, Path

_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_BOUNDARIES = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Module)

#: a block's guard clauses in source order, their indices in the block, and the
#: index of every statement in it (by id)
_Block = Tuple[List[cst.If], List[int], Dict[int, int]]


class GuardedPaths:
    """Guarded paths of one file; one `Frame` per guard, so frames compare by identity."""

    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self._frames: Dict[int, Frame] = {}
        self._blocks: Dict[int, _Block] = {}

    def path(self, path: Path, statement: cst.CSTNode) -> Path:
        """`path` (the branches around `statement`, within its function) with the guard
        clauses before it, each placed after the frames that enclose the guard."""
        levels, chain = self._guards(statement)
        if not levels:
            return path
        # a guard found in the block at step `i` of the walk up is enclosed by the frames
        # whose node lies further up the walk (step > i)
        step_of = {node: i for i, node in enumerate(chain)}
        steps = [step_of.get(id(f.node), -1) for f in path]
        ranked: List[Tuple[int, int, Frame]] = [(i, 1, f) for i, f in enumerate(path)]
        for level, guards in levels:  # outermost block first
            depth = sum(1 for s in steps if s > level)
            for guard in reversed(guards):  # latest first within a block
                ranked.append((depth - 1, 2, self._frame(guard)))
        ranked.sort(key=lambda t: (t[0], t[1]))
        return tuple(f for _, _, f in ranked)

    def _frame(self, guard: cst.If) -> Frame:
        frame = self._frames.get(id(guard))
        if frame is None:
            frame = self._frames[id(guard)] = Frame("else", guard, guard.test)
        return frame

    def _guards(self, statement: cst.CSTNode) -> Tuple[List[Tuple[int, List[cst.If]]], List[int]]:
        """The guard clauses before `statement` in its block and the blocks around it (up to
        its function), outermost block first, each with the step of the walk up at which its
        block was met; and the ids of the nodes met on that walk, in order."""
        levels: List[Tuple[int, List[cst.If]]] = []
        chain: List[int] = []
        child, parent = statement, self.ctx.parent(statement)
        while parent is not None and not isinstance(child, _BOUNDARIES):
            chain.append(id(parent))
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                guards, indices, index_of = self._block(parent)
                before = bisect_left(indices, index_of.get(id(child), len(parent.body)))
                if before:
                    levels.append((len(chain) - 1, guards[:before]))
            child, parent = parent, self.ctx.parent(parent)
        levels.reverse()
        return levels, chain

    def _block(self, block: cst.CSTNode) -> _Block:
        """The block's guard clauses, read once per block."""
        found = self._blocks.get(id(block))
        if found is None:
            guards: List[cst.If] = []
            indices: List[int] = []
            for i, stmt in enumerate(block.body):
                if isinstance(stmt, cst.If) and stmt.orelse is None and _exits(stmt.body):
                    guards.append(stmt)
                    indices.append(i)
            found = self._blocks[id(block)] = (guards, indices, {id(s): i for i, s in enumerate(block.body)})
        return found


def _exits(body: cst.BaseSuite) -> bool:
    """The block always leaves: its last statement returns, raises, continues or breaks."""
    if isinstance(body, cst.SimpleStatementSuite):
        return any(isinstance(s, _EXITS) for s in body.body)
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, _EXITS) for s in last.body)
