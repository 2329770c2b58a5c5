"""Where an order number falls among a scope's events and calls, found by bisection.

A scope's `events` and `calls` are recorded in source order, so "the events after this
one" or "the last region entered before this call" need not rescan the scope from its
start: rules that ask this once per finding stay linear in the number of training steps.
The sorted order numbers are cached on the scope (ints only, so the model gains no
reference cycle), and rebuilt if the lists grew since.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterator, List

from .types import CallInfo, Scope


def _orders(scope: Scope, name: str, items: list) -> List[int]:
    key = "_orders_" + name
    cached = scope.__dict__.get(key)
    if cached is None or len(cached) != len(items):
        cached = [item.order for item in items]
        scope.__dict__[key] = cached
    return cached


def events_after(scope: Scope, order: int) -> int:
    """The index in `scope.events` of the first event whose order is above `order`."""
    return bisect_right(_orders(scope, "events", scope.events), order)


def events_before(scope: Scope, order: int) -> int:
    """The number of events in `scope.events` whose order is below `order`."""
    return bisect_left(_orders(scope, "events", scope.events), order)


def region_calls_before(scope: Scope, order: int) -> Iterator[CallInfo]:
    """The calls inside an autocast region whose order is below `order`, latest first."""
    key = "_region_calls"
    cached = scope.__dict__.get(key)
    if cached is None or cached[0] != len(scope.calls):
        indices = [i for i, call in enumerate(scope.calls) if call.region is not None]
        cached = (len(scope.calls), indices, [scope.calls[i].order for i in indices])
        scope.__dict__[key] = cached
    _, indices, orders = cached
    for at in range(bisect_left(orders, order) - 1, -1, -1):
        yield scope.calls[indices[at]]
