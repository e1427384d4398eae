"""The handle table as data: :func:`snapshot` a runtime's tree, :func:`restore` it into a
fresh runtime (in another process), strictly.

A snapshot holds what a new process needs to go on with the tree: each handle's id,
agent, carved budget, ledger (tokens, turns, tool calls), inbox, transitions, last
result, task keys, child counters and, while it is suspended, the relayed request and
the halted run (:meth:`RunResult.to_json <toolnexus_trio.RunResult.to_json>`).
Transcripts are not in it: the runtime keeps them in its store under each handle id.

What cannot outlive a process is not kept: a running turn (the handle comes back
``idle``, as after an interrupt, with the inbox items its turn had taken put back), a
queued wake, the Trio plumbing. Wall-time budgets go on from the time already spent.

:func:`restore` reads the snapshot as outside input: every field's kind is checked,
unknown keys are refused, ids must form the tree they claim, every agent must be in the
registry, a suspended handle must have its request and halted run. Anything else is a
:class:`~toolnexus_trio.agents._durable.DurableFormatError` and the runtime is left
untouched.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio
from cattrs.preconf.json import make_converter

from .._converter import make_strict, structure_strictly
from .._wire import Request
from ..loop._results import RunResult
from ._types import Budget, Handle, InboxItem, TaskResult

if TYPE_CHECKING:
    from ._runtime import AgentRuntime


class DurableFormatError(ValueError):
    """A durable record in the store could not be read: damaged, foreign or too new."""


SNAPSHOT_VERSION = 1
"""The version of the snapshot :func:`snapshot` writes and the newest :func:`restore` reads."""

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
class _InboxDoc:
    from_: str
    channel: str
    text: str


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


@attrs.frozen
class _TaskChildDoc:
    agent: str
    prompt: str
    child: str


@attrs.frozen
class _HandleDoc:
    id: str
    agent: str
    state: Literal["idle", "suspended", "closed"]
    budget: _BudgetDoc
    age_ms: float
    transitions: list[str]
    inbox: list[_InboxDoc]
    tokens: int
    own_tokens: int
    turns: int
    tool_calls: int
    seq: dict[str, int]
    last_result: _ResultDoc | None
    task_key: list[str] | None
    task_children: list[_TaskChildDoc]
    pending: dict[str, Any] | None
    pending_run: dict[str, Any] | None
    spawn_hook_done: bool


@attrs.frozen
class _SnapshotDoc:
    version: int
    root_seq: dict[str, int]
    handles: list[_HandleDoc]


# Attribute names as keys, unknown keys refused, value kinds strict.
_docs = make_strict(make_converter(forbid_extra_keys=True))


# -- writing ------------------------------------------------------------------------------


def _result_doc(result: TaskResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "text": result.text,
        "is_error": result.is_error,
        "status": result.status,
        "pending": None if result.pending is None else result.pending.to_json(),
        "turns": result.turns,
        "total_tokens": result.total_tokens,
        "own_tokens": result.own_tokens,
        "limit": result.limit,
    }


def _handle_doc(h: Handle, now: float) -> dict[str, Any]:
    assert h.defn is not None
    suspended = h.state == "suspended" and h.pending is not None and h.pending_run is not None
    state = h.state if h.state in ("closed", "idle") or suspended else "idle"
    # A running turn dies with the process: what it had taken from the inbox goes back.
    inbox = [*h.drained, *h.inbox] if h.state == "running" else list(h.inbox)
    return {
        "id": h.id,
        "agent": h.defn.name,
        "state": state,
        "budget": attrs.asdict(h.budget),
        "age_ms": max(0.0, (now - h.spawned_at) * 1000),
        "transitions": list(h.transitions),
        "inbox": [{"from_": i.from_, "channel": i.channel, "text": i.text} for i in inbox],
        "tokens": h.tokens,
        "own_tokens": h.own_tokens,
        "turns": h.turns,
        "tool_calls": h.tool_calls,
        "seq": dict(h.seq),
        "last_result": _result_doc(h.last_result),
        "task_key": None if h.task_key is None else list(h.task_key),
        "task_children": [
            {"agent": agent, "prompt": prompt, "child": child.id}
            for (agent, prompt), child in h.task_children.items()
        ],
        "pending": h.pending.to_json() if suspended and h.pending is not None else None,
        "pending_run": h.pending_run.to_json() if suspended else None,
        "spawn_hook_done": h.spawn_hook_done,
    }


def _tree(h: Handle) -> list[Handle]:
    out = [h]
    for child in h.children:
        out.extend(_tree(child))
    return out


def snapshot(rt: AgentRuntime) -> dict[str, Any]:
    """The runtime's handle table as JSON-safe data (parents before children)."""
    now = trio.current_time()
    return {
        "version": SNAPSHOT_VERSION,
        "root_seq": dict(rt.root.seq),
        "handles": [_handle_doc(h, now) for h in _tree(rt.root)[1:]],
    }


# -- reading ------------------------------------------------------------------------------


def _request(data: dict[str, Any], where: str) -> Request:
    try:
        return Request.from_json(data)
    except ValueError as exc:
        raise DurableFormatError(f"{where}: {exc}") from None


def _task_result(doc: _ResultDoc | None, where: str) -> TaskResult | None:
    if doc is None:
        return None
    pending = None if doc.pending is None else _request(doc.pending, where)
    return TaskResult(
        doc.text,
        doc.is_error,
        doc.status,
        pending=pending,
        turns=doc.turns,
        total_tokens=doc.total_tokens,
        own_tokens=doc.own_tokens,
        limit=doc.limit,
    )


def _parse(data: Any) -> _SnapshotDoc:
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
    return doc


def _build(rt: AgentRuntime, doc: _SnapshotDoc, now: float) -> dict[str, Handle]:
    """The handles of *doc*, linked and checked, without touching *rt*."""
    built: dict[str, Handle] = {"root": Handle("root", None, None, Budget())}
    for hd in doc.handles:
        where = f"the stored handle {hd.id!r}"
        parent_id, _, leaf = hd.id.rpartition("/")
        agent, _, number = leaf.rpartition(".")
        parent = built.get(parent_id)
        if parent is None or agent != hd.agent or not number.isdigit() or hd.id in built:
            raise DurableFormatError(f"{where} does not fit the tree (parent, agent or number)")
        defn = rt.registry.get(hd.agent)
        if defn is None:
            raise DurableFormatError(f"{where} runs agent {hd.agent!r}, not in this registry")
        if not math.isfinite(hd.age_ms) or hd.age_ms < 0:
            raise DurableFormatError(f"{where} has an age that is not a time: {hd.age_ms!r}")
        budget = Budget(**attrs.asdict(hd.budget))
        h = Handle(hd.id, defn, parent, budget, spawned_at=now - hd.age_ms / 1000)
        h.state = hd.state
        h.transitions = list(hd.transitions)
        h.inbox = [InboxItem(i.from_, i.channel, i.text) for i in hd.inbox]
        h.tokens, h.own_tokens, h.turns, h.tool_calls = (
            hd.tokens,
            hd.own_tokens,
            hd.turns,
            hd.tool_calls,
        )
        h.seq = dict(hd.seq)
        h.last_result = _task_result(hd.last_result, where)
        if hd.task_key is not None:
            if len(hd.task_key) != 2:
                raise DurableFormatError(f"{where} has a task key that is not [agent, prompt]")
            h.task_key = (hd.task_key[0], hd.task_key[1])
        h.spawn_hook_done = hd.spawn_hook_done
        if hd.state == "suspended":
            if hd.pending is None or hd.pending_run is None:
                raise DurableFormatError(f"{where} is suspended without its request and run")
            h.pending = _request(hd.pending, where)
            try:
                h.pending_run = RunResult.from_json(hd.pending_run)
            except ValueError as exc:
                raise DurableFormatError(f"{where}: its halted run: {exc}") from None
        elif hd.pending is not None or hd.pending_run is not None:
            raise DurableFormatError(f"{where} has a pending request but is {hd.state}")
        if hd.state == "closed":
            h.finished.set()
        parent.children.append(h)
        built[h.id] = h
    for hd in doc.handles:
        h = built[hd.id]
        for tc in hd.task_children:
            child = built.get(tc.child)
            if child is None or child.parent is not h:
                raise DurableFormatError(f"the stored handle {hd.id!r} has a task child elsewhere")
            h.task_children[(tc.agent, tc.prompt)] = child
    return built


def restore(rt: AgentRuntime, data: Any) -> None:
    """Rebuild *data*'s tree (a :func:`snapshot`) in *rt*, a runtime with no handles yet.

    Every handle that is not closed gets its service task in its parent's subtree, as a
    spawned one does; suspended handles can then be resumed with :meth:`resume`.
    """
    if rt.root.children:
        raise RuntimeError("restore needs a fresh runtime (this one has handles already)")
    doc = _parse(data)
    built = _build(rt, doc, trio.current_time())
    root = built.pop("root")
    rt.root.seq = dict(doc.root_seq)
    for h in root.children:
        h.parent = rt.root
    rt.root.children = root.children
    for h in built.values():
        rt._handles[h.id] = h
        if h.state != "closed":
            assert h.parent is not None
            parent = h.parent
            rt._start_in(parent, functools.partial(rt._serve, h))
