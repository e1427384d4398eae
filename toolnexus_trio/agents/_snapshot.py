"""The runtime's state as JSON: the seam durable persistence is built on.

:func:`snapshot` dumps the handle table (ids, defs, states, carved budgets, the usage
ledger, inboxes, transition traces, task keys, the last results) and, for each
suspended handle, its relayed request and its halted run (:meth:`RunResult.to_json`).
:func:`restore` rebuilds that table in a fresh runtime, so ``resume(answer)`` works
there. Transcripts are not in it: they live in the runtime's ``ConversationStore``
under each handle id. Times are stored as ages, so a restored ``max_wall_ms`` counts on
from where it was.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._wire import Request
from ..loop._output import output_data
from ..loop._results import RunResult
from ._types import Budget, Handle, InboxItem, TaskResult

if TYPE_CHECKING:
    from ._runtime import AgentRuntime

SNAPSHOT_VERSION = 1

TRANSITIONS_KEPT = 64
"""The latest transitions of a handle the snapshot keeps (a trace, not resume state)."""

ANSWERED_KEPT = 1_000
"""The latest answered request ids the snapshot keeps (to refuse a replay after a restore;
a durable tree's take-once records refuse any older one)."""

RESULT_CHARS_KEPT = 65_536
"""The longest last-result text kept for a handle no resume reads it from (an idle one);
a longer one is cut (its full text is the last message of the handle's transcript)."""


def _durable_result(h: Handle) -> dict[str, Any] | None:
    result = h.last_result
    if result is not None and h.state == "idle" and len(result.text) > RESULT_CHARS_KEPT:
        cut = len(result.text) - RESULT_CHARS_KEPT
        note = f"\n[cut: {cut} more characters; the full text ends the handle's transcript]"
        result = attrs.evolve(result, text=result.text[:RESULT_CHARS_KEPT] + note)
    return _result_json(result)


def _result_json(result: TaskResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    out = attrs.asdict(result, recurse=False)
    out["pending"] = result.pending.to_json() if result.pending is not None else None
    if result.output is None:
        del out["output"]  # the document of a result without one is as it always was
    else:
        out["output"] = output_data(result.output)  # JSON: it reads back as decoded JSON
    return out


def _result_from(data: dict[str, Any] | None) -> TaskResult | None:
    if data is None:
        return None
    pending = data.get("pending")
    return TaskResult(**{**data, "pending": Request.from_json(pending) if pending else None})


def snapshot(rt: AgentRuntime) -> dict[str, Any]:
    """The handle table of *rt* as a JSON-safe dict (parents before children).

    Only what a resume needs: the open handles and the closed children a halted run
    may reattach to (not every handle ever spawned), each with its latest transitions
    and, when idle, its last result's text cut to :data:`RESULT_CHARS_KEPT`.
    """
    now = trio.current_time()
    handles = []
    for h in rt.table.kept():
        assert h.defn is not None
        assert h.parent is not None
        handles.append(
            {
                "id": h.id,
                "def": h.defn.name,
                "parent": h.parent.id,
                "state": h.state,
                "budget": attrs.asdict(h.budget),
                "transitions": h.transitions[-TRANSITIONS_KEPT:],
                "inbox": [[i.from_, i.channel, i.text] for i in h.inbox],
                "tokens": h.tokens,
                "own_tokens": h.own_tokens,
                "turns": h.turns,
                "tool_calls": h.tool_calls,
                "age_ms": (now - h.spawned_at) * 1000,
                "seq": dict(h.seq),
                "task_key": list(h.task_key) if h.task_key is not None else None,
                "task_children": [[a, p, c.id] for (a, p), c in h.task_children.items()],
                "pending": h.pending.to_json() if h.pending is not None else None,
                "pending_run": h.pending_run.to_json() if h.pending_run is not None else None,
                "budget_ask": h.budget_ask.to_json() if h.budget_ask is not None else None,
                "last_result": _durable_result(h),
                "spawn_hook_done": h.spawn_hook_done,
            }
        )
    return {
        "version": SNAPSHOT_VERSION,
        "root": {"seq": dict(rt.root.seq), "tokens": rt.root.tokens},
        "answered": dict(list(rt.answered.items())[-ANSWERED_KEPT:]),
        "handles": handles,
    }


def restore(rt: AgentRuntime, data: dict[str, Any]) -> None:
    """Rebuild *data*'s handle table in *rt*, which must have spawned nothing yet.

    A handle that was ``running`` when the snapshot was taken comes back ``idle`` (its
    run died with its process). :class:`ValueError` for a snapshot of another version,
    a def the registry lacks or a runtime already in use.
    """
    if data.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"agent runtime snapshot version {data.get('version')!r} is unknown")
    if rt.root.children:
        raise ValueError("restore needs a fresh runtime (this one has spawned already)")
    now = trio.current_time()
    rt.root.seq = dict(data["root"]["seq"])
    rt.root.tokens = data["root"]["tokens"]
    rt.answered.update(data.get("answered", {}))
    for item in data["handles"]:
        defn = rt.registry.get(item["def"])
        if defn is None:
            raise ValueError(f"snapshot handle {item['id']} runs {item['def']!r}: not in registry")
        parent = rt.table[item["parent"]]
        h = Handle(
            item["id"],
            defn,
            parent,
            Budget(**item["budget"]),
            spawned_at=now - item["age_ms"] / 1000,
        )
        h.state = "idle" if item["state"] == "running" else item["state"]
        h.transitions = list(item["transitions"])
        h.inbox = [InboxItem(*i) for i in item["inbox"]]
        h.tokens, h.own_tokens = item["tokens"], item["own_tokens"]
        h.turns, h.tool_calls = item["turns"], item["tool_calls"]
        h.seq = dict(item["seq"])
        key = item["task_key"]
        h.task_key = (key[0], key[1]) if key else None
        h.pending = Request.from_json(item["pending"]) if item["pending"] else None
        h.pending_run = RunResult.from_json(item["pending_run"]) if item["pending_run"] else None
        h.last_result = _result_from(item["last_result"])
        ask = item.get("budget_ask")
        h.budget_ask = Request.from_json(ask) if ask else None
        h.spawn_hook_done = item["spawn_hook_done"]
        rt.table.add(h)
        if h.state == "closed":
            h.finished.set()
            h.kick.set()
        else:
            rt._start_in(parent, functools.partial(rt._serve, h))
    for item in data["handles"]:
        h = rt.table[item["id"]]
        for agent, prompt, child_id in item["task_children"]:
            h.task_children[(agent, prompt)] = rt.table[child_id]
