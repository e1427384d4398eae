"""A stored handle table is outside input: :func:`check_snapshot` reads it strictly
before :meth:`AgentRuntime.restore` builds anything from it.

The shape is :func:`toolnexus_trio.agents._snapshot.snapshot`'s. Every field's kind is
checked (``"1"`` is not a number, ``"false"`` not a boolean), unknown keys are refused,
a newer version is refused with a message that says so, the ids must form the tree
they claim (each under a parent listed before it, named ``<parent>/<agent>.<n>``), each
agent must be in the registry, a suspended handle must carry its request, and every
request and halted run must parse. Anything else is a :class:`DurableFormatError`, raised
before the runtime is touched, so a damaged store never leaves a half-restored tree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import attrs
from cattrs.gen import make_dict_structure_fn, override
from cattrs.preconf.json import make_converter

from .._converter import make_strict, structure_strictly
from .._wire import Request
from ..loop._results import RunResult
from ._snapshot import SNAPSHOT_VERSION


class DurableFormatError(ValueError):
    """A durable record in the store could not be read: damaged, foreign or too new."""


_Status = Literal["done", "pending", "incomplete", "interrupted", "closed", "timeout", "error"]


@attrs.frozen
class _BudgetDoc:
    max_turns: int | None
    max_tokens: int | None
    max_tool_calls: int | None
    max_wall_ms: float | None
    max_children: int | None
    max_concurrent: int | None
    max_depth: int | None


@attrs.frozen
class _ResultDoc:
    text: str
    is_error: bool
    status: _Status
    pending: dict[str, Any] | None
    turns: int
    total_tokens: int
    own_tokens: int
    limit: str | None
    output: Any = None  # a typed result's JSON; written only when there is one


@attrs.frozen
class _HandleDoc:
    id: str
    def_: str  # the key is "def"
    parent: str
    state: Literal["idle", "running", "suspended", "closed"]
    budget: _BudgetDoc
    transitions: list[str]
    inbox: list[list[str]]
    tokens: int
    own_tokens: int
    turns: int
    tool_calls: int
    age_ms: float
    seq: dict[str, int]
    task_key: list[str] | None
    task_children: list[list[str]]
    pending: dict[str, Any] | None
    pending_run: dict[str, Any] | None
    budget_ask: dict[str, Any] | None
    last_result: _ResultDoc | None
    spawn_hook_done: bool


@attrs.frozen
class _RootDoc:
    seq: dict[str, int]
    tokens: int


@attrs.frozen
class _SnapshotDoc:
    version: int
    root: _RootDoc
    handles: list[_HandleDoc]
    answered: dict[str, Literal["taken", "answered"]] = attrs.field(factory=dict)


# Attribute names as keys (but "def"), unknown keys refused, value kinds strict.
_docs = make_strict(make_converter(forbid_extra_keys=True))
_docs.register_structure_hook(
    _HandleDoc,
    make_dict_structure_fn(
        _HandleDoc, _docs, _cattrs_forbid_extra_keys=True, def_=override(rename="def")
    ),
)


def _request(data: dict[str, Any] | None, where: str) -> None:
    if data is not None:
        try:
            Request.from_json(data)
        except ValueError as exc:
            raise DurableFormatError(f"{where}: {exc}") from None


def _check_handle(h: _HandleDoc, seen: set[str], registry: Mapping[str, Any]) -> None:
    where = f"the stored handle {h.id!r}"
    _, _, leaf = h.id.rpartition("/")
    agent, _, number = leaf.rpartition(".")
    if (
        h.parent not in seen
        or h.id != f"{h.parent}/{leaf}"
        or agent != h.def_
        or not number.isdigit()
        or h.id in seen
    ):
        raise DurableFormatError(f"{where} does not fit the tree (parent, agent or number)")
    if h.def_ not in registry:
        raise DurableFormatError(f"{where} runs agent {h.def_!r}, not in this registry")
    counts = (h.tokens, h.own_tokens, h.turns, h.tool_calls)
    if not math.isfinite(h.age_ms) or h.age_ms < 0 or min(counts) < 0:
        raise DurableFormatError(f"{where} has a negative or infinite count or age")
    if any(len(item) != 3 for item in h.inbox):
        raise DurableFormatError(f"{where} has an inbox item that is not [from, channel, text]")
    if h.task_key is not None and len(h.task_key) != 2:
        raise DurableFormatError(f"{where} has a task key that is not [agent, prompt]")
    for key in h.task_children:
        if len(key) != 3 or key[2].rpartition("/")[0] != h.id:
            raise DurableFormatError(f"{where} has a task child elsewhere in the tree")
    if h.state == "suspended" and (
        h.pending is None or (h.pending_run is None and h.budget_ask is None)
    ):
        raise DurableFormatError(f"{where} is suspended without its request and run")
    _request(h.pending, where)
    _request(h.budget_ask, where)
    _request(None if h.last_result is None else h.last_result.pending, where)
    if h.pending_run is not None:
        try:
            RunResult.from_json(h.pending_run)
        except ValueError as exc:
            raise DurableFormatError(f"{where}: its halted run: {exc}") from None


def check_snapshot(data: Any, registry: Mapping[str, Any]) -> None:
    """Raise :class:`DurableFormatError` unless *data* is a snapshot *registry* can restore."""
    if not isinstance(data, dict) or type(data.get("version")) is not int:
        raise DurableFormatError("the stored handle table has no integer version")
    if data["version"] > SNAPSHOT_VERSION:
        raise DurableFormatError(
            f"the stored handle table was written by a newer toolnexus_trio (version "
            f"{data['version']}, this one reads up to {SNAPSHOT_VERSION})"
        )
    try:
        doc: _SnapshotDoc = structure_strictly(_docs, data, _SnapshotDoc)
    except ValueError as exc:
        raise DurableFormatError(f"the stored handle table is damaged: {exc}") from None
    if doc.version != SNAPSHOT_VERSION:
        raise DurableFormatError(f"the stored handle table has an unknown version {doc.version}")
    seen = {"root"}
    for h in doc.handles:
        _check_handle(h, seen, registry)
        seen.add(h.id)
    for h in doc.handles:
        if any(key[2] not in seen for key in h.task_children):
            raise DurableFormatError(f"the stored handle {h.id!r} has a task child elsewhere")
