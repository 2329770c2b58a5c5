"""Source positions of nodes, one top-level statement at a time.

libcst's `MetadataWrapper.resolve(PositionProvider)` regenerates the whole
module with position tracking, and first walks the whole tree once more for
batchable providers (none here). For a file with a few findings that is most
of the cost of reporting them: a 10 MB file cut to an excerpt is still 340,000
lines, mostly the blank lines that stand in for what was cut.

`Positions` gives the same ranges (tests/test_positions.py compares every node
of every example and fixture) by generating only the top-level statement that
holds the node asked about, starting at that statement's first line. The first
lines come from one pass over the module's statements that counts the lines of
their code. Both generations are `model.fastgen`'s (libcst's code generation
for the common node classes without its per-node overhead: ~5x cheaper).
"""
from __future__ import annotations

from typing import Dict, Optional

import libcst as cst
from libcst._position import CodeRange
from libcst.metadata.position_provider import NEWLINE_RE

from . import fastgen
from .fastgen import as_range
from .walk import _ENTER, _enter, child_fields


#: after this many statements generated one at a time, a module where they are most of the
#: statements mapped so far is generated whole (`Positions.__getitem__`)
DENSE_AFTER = 64


class Positions:
    """node -> `CodeRange`, as `PositionProvider` gives it, computed per top-level statement.

    The statements are mapped (their nodes, their first lines) in order, only as far as the
    nodes asked about lie: a finding near the top of a big module maps only that far. When
    most statements mapped so far had to be generated (a module of findings: 140,000
    `masked_fill(..., -1e9)` lines, two positions each), the rest of them will be too, and one
    generation of the whole module gives every range at the cost of generating them alone,
    without the mapping and the line counting (~45% less on such a module)."""

    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._tops: Dict[cst.CSTNode, cst.CSTNode] = {}  # node -> its top-level statement, as far as mapped
        self._ranges: dict = {}  # node -> its range (`fastgen`'s tuple, or libcst's `CodeRange`)
        self._starts: Dict[int, int] = {}  # id(top-level statement) -> its first line, as far as mapped
        self._mapped = 0  # statements of the module's body mapped
        self._line = 1 + len(module.header)  # the first line of the statement after `_last` (an EmptyLine is one line)
        self._last: Optional[cst.CSTNode] = None  # the statement mapped last, its lines not yet counted
        self._generated = 0  # statements generated one at a time
        self._whole = False
        self._tokens_mapped = False  # the token-only nodes (`walk.SKIP`) of the statements mapped too

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self._ranges.get(node)
        if found is not None:
            return as_range(found)
        top = self._top_of(node)
        start = self._starts.get(id(top)) if top is not None else None
        if start is None:  # the module itself, its header / footer, or a blank or comment line
            self._generate_whole()
        elif self._generated >= DENSE_AFTER and 2 * self._generated > self._mapped:
            self._generate_whole()
        else:
            self._generated += 1
            self._generate(top, start)
        return as_range(self._ranges[node])

    def _top_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The top-level statement holding `node`, mapping statements until it is found."""
        top = self._tops.get(node)
        body = self._module.body
        while top is None and self._mapped < len(body):
            stmt = body[self._mapped]
            self._map(stmt)
            self._mapped += 1
            top = self._tops.get(node)
        if top is None and not self._tokens_mapped:
            # a token-only node (whitespace, punctuation, an operator: rarely asked about)
            self._map_tokens()
            top = self._tops.get(node)
        return top

    def _map(self, stmt: cst.CSTNode) -> None:
        """Every node under `stmt` -> `stmt`, the token-only ones (`walk.SKIP`: whitespace,
        punctuation, operators, blank and comment lines; over half of a statement's nodes, and
        in an excerpt the blank lines are most of the module) left to `_map_tokens`; and `stmt`'s
        first line. Nothing below a token-only node is another kind of node."""
        tops = self._tops
        enter_types = _ENTER  # type -> whether it is a node that is not token-only
        stack = [stmt]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            tops[node] = stmt
            for name in child_fields(node):
                value = getattr(node, name)
                kind = type(value)
                if kind is tuple or kind is list:
                    for child in value:
                        enter = enter_types.get(type(child))
                        if enter is None:
                            enter = _enter(type(child))
                        if enter:
                            push(child)
                else:
                    enter = enter_types.get(kind)
                    if enter is None:
                        enter = _enter(kind)
                    if enter:
                        push(value)
        self._count_last()
        self._starts[id(stmt)] = self._line
        self._last = stmt

    def _map_tokens(self) -> None:
        """The token-only nodes of every statement mapped -> that statement (blank and comment
        lines, `EmptyLine`, and what they hold left out, as before: the whole module is
        generated for those)."""
        self._tokens_mapped = True
        tops = self._tops
        node_base, empty_line = cst.CSTNode, cst.EmptyLine
        for stmt in self._module.body[: self._mapped]:
            stack = [stmt]
            while stack:
                node = stack.pop()
                tops[node] = stmt
                for name in child_fields(node):
                    value = getattr(node, name)
                    if type(value) is tuple or type(value) is list:
                        stack.extend(c for c in value if isinstance(c, node_base) and type(c) is not empty_line)
                    elif isinstance(value, node_base) and type(value) is not empty_line:
                        stack.append(value)

    def _count_last(self) -> None:
        """Add the lines of the statement mapped last to the next one's first line: only once a
        statement after it is mapped (a module that is mostly one function holding every finding
        never generates that function's code a second time just to count its lines)."""
        last = self._last
        if last is not None:
            # its lines as generated (a blank or comment line before it, `EmptyLine`, is one newline)
            self._line += len(NEWLINE_RE.findall(fastgen.code(self._module, last)))
            self._last = None

    def _generate(self, stmt: cst.CSTNode, first_line: int) -> None:
        fastgen.ranges(self._module, stmt, first_line, self._ranges)

    def _generate_whole(self) -> None:
        if not self._whole:
            fastgen.ranges(self._module, self._module, 1, self._ranges)
            self._whole = True
