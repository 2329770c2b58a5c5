"""Branch paths (tuples of `Frame`s): containment, mutual exclusion
(if/else, try/except), order and loops, so rules reason about paths, not lines."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

from .types import Event, Frame, Path

_EMPTY = cst.Module(body=[])


def enclosing(path: Path, kind: str) -> Optional[Frame]:
    """The innermost frame of `kind` in `path`."""
    for frame in reversed(path):
        if frame.kind == kind:
            return frame
    return None


def path_contains(outer: Path, inner: Path) -> bool:
    """True when `inner` runs whenever `outer` runs (outer is a prefix of inner)."""
    return len(outer) <= len(inner) and tuple(inner[: len(outer)]) == tuple(outer)


def exclusive(a: Path, b: Path) -> bool:
    """True when code at `a` and code at `b` never run in the same pass
    (the body and the else of one `if`, or a try body and its handler), or
    sit on opposite sides of two `if`s that test the same condition
    (`if use_amp: ... else: ...` written twice, or `if c:` and `if not c:`).

    Linear in the two paths: `a`'s tested frames are filed by the text of their
    condition (without a leading `not`) and side, so each frame of `b` meets only
    the frames of `a` that can contradict it (a guarded path holds one frame per
    guard clause before it, and rules ask this for every pair of steps they compare)."""
    kinds_a = {id(f.node): f.kind for f in a}
    for f in b:
        other = kinds_a.get(id(f.node))
        if other is not None and other != f.kind:
            if {other, f.kind} == {"if", "else"} or {other, f.kind} == {"try-else", "except"}:
                return True
    sides: Optional[Dict[Tuple[str, bool], List[Frame]]] = None
    for fb in b:
        key_b = _side(fb)
        if key_b is None:
            continue
        if sides is None:
            sides = {}
            for fa in a:
                key_a = _side(fa)
                if key_a is not None:
                    sides.setdefault(key_a, []).append(fa)
        text, positive = key_b
        for fa in sides.get((text, not positive), ()):
            if fa.node is not fb.node and _opposite_tests(fa, fb):
                return True
    return False


def _side(frame: Frame) -> Optional[Tuple[str, bool]]:
    """(the condition's text without one leading `not`, whether the frame runs when that
    condition holds) for an `if`/`else` frame with a test; cached on the frame.
    Two frames can only contradict each other (`_opposite_tests`) when their texts
    are equal (`deep_equals` implies equal code) and their sides differ."""
    if frame.kind not in ("if", "else") or frame.test is None:
        return None
    cached = frame.__dict__.get("_side")
    if cached is None:
        inner = _negated(frame.test)
        base = frame.test if inner is None else inner
        cached = frame.__dict__["_side"] = (_EMPTY.code_for_node(base), (frame.kind == "if") != (inner is not None))
    return cached


def _negated(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    return None


def _opposite_tests(fa: Frame, fb: Frame) -> bool:
    """The two frames run under contradicting values of one condition
    (the condition is assumed unchanged between the two `if`s)."""
    ta, tb = fa.test, fb.test
    flip = False
    na, nb = _negated(ta), _negated(tb)
    if na is not None and nb is None:
        ta, flip = na, True
    elif nb is not None and na is None:
        tb, flip = nb, True
    elif na is not None and nb is not None:
        ta, tb = na, nb
    if not ta.deep_equals(tb):
        return False
    return (fa.kind != fb.kind) != flip


def precedes(a: Event, b: Event) -> bool:
    return a.order < b.order


def loops(path: Path) -> Sequence[Frame]:
    return [f for f in path if f.kind == "loop"]
