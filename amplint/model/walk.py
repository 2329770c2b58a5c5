"""A read-only traversal of a libcst tree that is several times cheaper than `node.visit`.

libcst's `CSTNode.visit` is built for transformers: on every node it rebuilds
the node from its (visited) children, re-running the dataclass constructor and
its validation, even for a read-only `CSTVisitor`. On a large file that costs
more than the parse. `walk` calls the same visitor hooks in the same order
(`on_visit`, `visit_<Node>_<field>`, children, `leave_<Node>_<field>`,
`on_leave`) but only reads the children.

The order of a node type's child fields is learnt once per type from libcst
itself (by running its `_visit_and_replace_children` with a recorder that does
not descend), so it is the order libcst visits, i.e. source order. Whitespace,
comments and punctuation (`SKIP`) are never entered: AMP analysis has no use
for them. `tests/test_speed_walk.py` proves that the hooks fire as under
`node.visit` on real code.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Tuple

import libcst as cst

# Token-only nodes: they hold whitespace and punctuation, never code.
SKIP = frozenset(
    {
        cst.SimpleWhitespace,
        cst.ParenthesizedWhitespace,
        cst.TrailingWhitespace,
        cst.Newline,
        cst.EmptyLine,
        cst.Comment,
        cst.Comma,
        cst.Dot,
        cst.Colon,
        cst.Semicolon,
        cst.AssignEqual,
        cst.LeftParen,
        cst.RightParen,
        cst.LeftSquareBracket,
        cst.RightSquareBracket,
        cst.LeftCurlyBrace,
        cst.RightCurlyBrace,
        cst.ImportStar,
        cst.Asynchronous,
    }
    | {
        t
        for base in (cst.BaseBinaryOp, cst.BaseUnaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseAugOp)
        for t in vars(cst).values()
        if isinstance(t, type) and issubclass(t, base) and t is not base
    }
)


class _FieldRecorder(cst.CSTVisitor):
    def __init__(self, node: cst.CSTNode) -> None:
        super().__init__()
        self.node = node
        self.fields: List[str] = []

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.node and attribute not in self.fields:
            self.fields.append(attribute)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


_FIELDS: Dict[type, Tuple[str, ...]] = {}
#: fields libcst visits only when they are not None (no attribute hooks for None)
CONDITIONAL = frozenset({("FormattedStringExpression", "format_spec"), ("TemplatedStringExpression", "format_spec")})


def child_fields(node: cst.CSTNode) -> Tuple[str, ...]:
    """The names of `node`'s child fields in libcst's visiting order."""
    cls = type(node)
    fields = _FIELDS.get(cls)
    if fields is None:
        node = _without_long_sequences(node)
        recorder = _FieldRecorder(node)
        node._visit_and_replace_children(recorder)
        order = list(recorder.fields)
        # a field libcst skips on this instance (a None `format_spec`) still
        # matters on others: keep every dataclass field, unvisited ones last
        order += [f.name for f in dataclasses.fields(node) if f.name not in order]
        fields = _FIELDS[cls] = tuple(order)
    return fields


def _without_long_sequences(node: cst.CSTNode) -> cst.CSTNode:
    """A copy of `node` with its long sequence fields emptied, to learn the field order from:
    libcst calls a field's attribute hooks whatever it holds, but visits every item (the
    340,000 lines of a big module's body, the first time a Module is seen) to return it."""
    changes = {
        f.name: ()
        for f in dataclasses.fields(node)
        if type(getattr(node, f.name)) in (tuple, list) and len(getattr(node, f.name)) > 16
    }
    if not changes:
        return node
    try:
        return dataclasses.replace(node, **changes)
    except Exception:  # a node that must not be empty there: learn from the node itself
        return node


_Plan = Tuple[Tuple[str, Optional[Any], Optional[Any], bool], ...]


def own_hook(visitor_cls: type, name: str) -> Optional[Any]:
    """`visitor_cls.name` unless it is libcst's do-nothing stub (or absent)."""
    fn = getattr(visitor_cls, name, None)
    if fn is None or fn is getattr(cst.CSTVisitor, name, None):
        return None
    return fn


def _plan(visitor_cls: type, node: cst.CSTNode, cache: Dict[type, _Plan]) -> _Plan:
    name = type(node).__name__
    plan = tuple(
        (
            field,
            own_hook(visitor_cls, f"visit_{name}_{field}"),
            own_hook(visitor_cls, f"leave_{name}_{field}"),
            (name, field) in CONDITIONAL,
        )
        for field in child_fields(node)
    )
    cache[type(node)] = plan
    return plan


_PLANS: Dict[type, Dict[type, _Plan]] = {}
#: value type -> whether `walk` descends into it (a node that is not token-only);
#: a dict lookup instead of isinstance against libcst's ABC on every child
_ENTER: Dict[type, bool] = {}


def _enter(kind: type) -> bool:
    enter = _ENTER[kind] = isinstance(kind, type) and issubclass(kind, cst.CSTNode) and kind not in SKIP
    return enter


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Visit `node` and its descendants with `visitor` without rebuilding anything.

    The visitor must not rely on hooks for the `SKIP` node types, and must not
    override `on_visit_attribute`/`on_leave_attribute` (per-field
    `visit_<Node>_<field>` methods are called directly).
    """
    plans = _PLANS.setdefault(type(visitor), {})
    visitor_cls = type(visitor)
    on_visit = visitor.on_visit
    on_leave = visitor.on_leave
    enter_types = _ENTER  # type -> whether to descend into a value of that type

    def go(n: cst.CSTNode) -> None:
        if on_visit(n):
            plan = plans.get(type(n))
            if plan is None:
                plan = _plan(visitor_cls, n, plans)
            for field, enter, leave, conditional in plan:
                value = getattr(n, field)
                if conditional and value is None:
                    continue
                if enter is not None:
                    enter(visitor, n)
                kind = type(value)
                if kind is tuple or kind is list:
                    for child in value:
                        descend = enter_types.get(type(child))
                        if descend is None:
                            descend = _enter(type(child))
                        if descend:
                            go(child)
                else:
                    descend = enter_types.get(kind)
                    if descend is None:
                        descend = _enter(kind)
                    if descend:
                        go(value)
                if leave is not None:
                    leave(visitor, n)
        on_leave(n)

    try:
        go(node)
    finally:
        # `go` refers to itself through its closure cell; breaking that cycle lets reference
        # counting free the visitor and the tree it holds, without the cycle collector
        go = None  # noqa: F841


def parent_map(module: cst.CSTNode) -> Dict[cst.CSTNode, cst.CSTNode]:
    """node -> its parent for every node under `module`, as libcst's
    ParentNodeProvider gives it, without rebuilding the tree."""
    parents: Dict[cst.CSTNode, cst.CSTNode] = {}
    stack = [module]
    node_base = cst.CSTNode
    while stack:
        node = stack.pop()
        for field in child_fields(node):
            value = getattr(node, field)
            if type(value) is tuple or type(value) is list:
                for child in value:
                    if isinstance(child, node_base):
                        parents[child] = node
                        stack.append(child)
            elif isinstance(value, node_base):
                parents[value] = node
                stack.append(value)
    return parents


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node under it (depth first, order not guaranteed), for rules that
    look for a shape anywhere inside an expression without a visitor."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def subnodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node under it in source order, read off the fields (`child_fields`)
    instead of libcst's `children`, which runs a visitor that rebuilds each node to list them
    (several times slower on a big class)."""
    stack: List[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        yield n
        found: List[cst.CSTNode] = []
        for name in child_fields(n):
            value = getattr(n, name, None)
            if isinstance(value, cst.CSTNode):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found.extend(v for v in value if isinstance(v, cst.CSTNode))
        stack.extend(reversed(found))
