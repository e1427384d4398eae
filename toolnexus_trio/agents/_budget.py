"""Hierarchical budgets (SPEC §7D "Budgets"): the carve at spawn and the live chain walk.

The ledger is the handles themselves: every model response adds its tokens to the
handle and to each ancestor (the usage roll-up), every tool call adds one to the
handle and to each ancestor. A check walks the live chain from the handle to the top,
so a sibling's spend after the carve is seen at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import attrs

from ._types import (
    LIMIT_MAX_TOKENS,
    LIMIT_MAX_TOOL_CALLS,
    Budget,
    Handle,
)


def chain(h: Handle) -> Iterator[Handle]:
    """*h* and its ancestors, the root handle excluded (it has no budget)."""
    node: Handle | None = h
    while node is not None and node.parent is not None:
        yield node
        node = node.parent


def _remaining(limit: float | None, used: float) -> float | None:
    return None if limit is None else limit - used


def _min(own: float | None, other: float | None) -> float | None:
    if own is None:
        return other
    if other is None:
        return own
    return min(own, other)


def carve(own: Budget, parent: Handle, now: float) -> Budget:
    """A child's effective budget: each pooled limit is ``min(own, parent remaining)``.

    Tokens and tool calls come from the parent's pool; wall time from the parent's
    deadline. Turns, children, concurrency and depth are the child's own.
    """
    tokens = _remaining(parent.budget.max_tokens, parent.tokens)
    calls = _remaining(parent.budget.max_tool_calls, parent.tool_calls)
    wall = None
    if parent.parent is not None and parent.budget.max_wall_ms is not None:
        wall = max(0.0, parent.budget.max_wall_ms - (now - parent.spawned_at) * 1000)
    carved_tokens = _min(own.max_tokens, tokens)
    carved_calls = _min(own.max_tool_calls, calls)
    return attrs.evolve(
        own,
        max_tokens=None if carved_tokens is None else max(0, int(carved_tokens)),
        max_tool_calls=None if carved_calls is None else max(0, int(carved_calls)),
        max_wall_ms=_min(own.max_wall_ms, wall),
    )


def tokens_exhausted(h: Handle, *, overspent: bool) -> tuple[str, Handle] | None:
    """The first handle of the chain whose token pool is spent (``>=``), or overspent
    (``>``, after a response), with the limit's name."""
    node: Handle | None = h
    while node is not None and node.parent is not None:  # chain(h), without a generator
        cap = node.budget.max_tokens
        if cap is not None and (node.tokens > cap or (not overspent and node.tokens >= cap)):
            return LIMIT_MAX_TOKENS, node
        node = node.parent
    return None


def tool_calls_exhausted(h: Handle) -> tuple[str, Handle] | None:
    """The first handle of the chain with no tool call left, with the limit's name."""
    for node in chain(h):
        cap = node.budget.max_tool_calls
        if cap is not None and node.tool_calls >= cap:
            return LIMIT_MAX_TOOL_CALLS, node
    return None


def wall_deadline(h: Handle) -> float:
    """The earliest ``max_wall_ms`` deadline on the chain (Trio time), or ``inf``."""
    deadline = math.inf
    node: Handle | None = h
    while node is not None and node.parent is not None:  # chain(h), without a generator
        if node.budget.max_wall_ms is not None:
            deadline = min(deadline, node.spawned_at + node.budget.max_wall_ms / 1000)
        node = node.parent
    return deadline


def add_tokens(h: Handle, total: int) -> None:
    """Roll *total* tokens up the chain (the handle's own count too)."""
    h.own_tokens += total
    node: Handle | None = h
    while node is not None:
        node.tokens += total
        node = node.parent


def add_tool_call(h: Handle) -> None:
    """Count one tool call on *h* and each ancestor."""
    node: Handle | None = h
    while node is not None:
        node.tool_calls += 1
        node = node.parent
