"""Crash-durable agent trees: each agent's turn is a durable run, and a tree whose
process died mid-turn is recovered by :meth:`AgentRuntime.recover`.

There is no second checkpoint mechanism here: with ``open_agent_runtime(durable=True)``
and a :class:`~toolnexus_trio.stores.CheckpointStore`, a turn of a handle that has a
*run id* (:meth:`AgentRuntime.run` with ``id=``, and every child its ``task`` calls
make) runs through the loop's own durable path (``loop/_checkpoint.py``: each model
response and tool result written before the next step, an owner lease). What this
module adds is the tree's shape, kept in each run's checkpoint under ``"tree"``
(:func:`tree_record`)::

    {"agent": "<def name>", "parent": "<parent run id>" | None,
     "children": {"<position>:<task call id>": {"id": "<child run id>", "agent": "<def name>"}}}

(the position is the transcript's length at the model response that made the call, so
a model that reuses call ids from turn to turn still names each call once).

A ``task`` call records its child there, in a flushed write, *before* the child
starts (:func:`durable_child`), so a recovery always finds a child that may have run.

Recovery (:func:`recover_tree`) claims the root's run (one conditional update: of
racing recoverers one wins, the others get
:class:`~toolnexus_trio.loop.RunNotRecoverable`) and continues it from its checkpoint.
Its ``task`` calls in flight are idempotent in a durable tree (a re-run finds the
recorded child, never a second one), so the loop runs them again, and each looks its
child up: a child that finished gives its saved answer without running again; a child
in flight is recovered from its own checkpoint (its finished tool calls not run again,
an in-flight non-idempotent one reported in doubt); a child never started starts.

Leases are per agent, the loop's own: each run keeps its lease while it runs, so a
child is fenced exactly like a plain durable run, and no tree-wide lease has to be
invented or renewed across nurseries. Exactly one worker recovers a tree because only
the root is claimed from outside (:func:`orphaned_trees` lists roots only); a child's
id is recorded only in its parent's checkpoint, so only the worker that won the
parent reaches it, and its claim is itself one conditional update.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._tools import ToolResult
from ..loop._checkpoint import Checkpointer, RunNotRecoverable, durable_ask, in_doubt_default
from ..loop._checkpoint import recover as recover_run
from ..loop._records import InDoubtCall
from ..stores._base import CheckpointStore

if TYPE_CHECKING:
    from .._cancel import CancelToken
    from .._toolkit import Toolkit
    from ..loop._client import Client
    from ..loop._results import RunResult
    from ._runtime import AgentRuntime
    from ._types import AgentDef, Handle, TaskResult

_CLAIM_LEASES: Final = 3
"""How many leases a recovery waits for a child's lease to expire (it expires about
when its parent's does: the same dead process renewed both)."""


def tree_record(agent: str, parent: str | None) -> dict[str, Any]:
    """The tree's record of a new run of *agent* under the run *parent* (None: a root)."""
    return {"agent": agent, "parent": parent, "children": {}}


def durable(rt: AgentRuntime, h: Handle) -> bool:
    """Whether *h*'s turns are durable runs (a def with a completion gate or a typed
    result is not: those turns are not a single loop run the store can continue)."""
    return (
        rt.checkpoints is not None
        and h.durable_id is not None
        and h.defn is not None
        and h.defn.completion is None
        and h.defn.output_type is None
    )


def durable_options(rt: AgentRuntime, defn: AgentDef, options: Any) -> Any:
    """*options* (an agent's ``InProcessOptions`` or ``ClientOptions``) in a durable
    tree: the runtime's lease and in-doubt policy, under which a ``task`` call in doubt
    is always run again (it finds the child it recorded)."""
    inner = rt.on_in_doubt or in_doubt_default
    if not defn.task_targets:
        return attrs.evolve(options, lease_ms=rt.lease_ms, on_in_doubt=inner)

    def on_in_doubt(call: InDoubtCall) -> ToolResult | None:
        return None if call.name == "task" else inner(call)

    return attrs.evolve(options, lease_ms=rt.lease_ms, on_in_doubt=on_in_doubt)


async def durable_turn(
    rt: AgentRuntime, h: Handle, client: Client, text: str, toolkit: Toolkit, token: CancelToken
) -> RunResult:
    """A turn of durable *h*: a new durable run on *text*, or the recovery of its run."""
    store = rt.checkpoints
    assert store is not None
    assert h.durable_id is not None

    def bind(cp: Checkpointer) -> None:
        h.checkpointer = cp
        if cp.meta is not None:  # recovered: the record read back from the checkpoint
            h.tree_meta = cp.meta

    try:
        if not h.recovering:
            # A new run records its own children (a woken handle's earlier runs are over).
            h.tree_meta = {**(h.tree_meta or {}), "children": {}}
            return await durable_ask(
                client, store, text, toolkit, id=h.durable_id, cancel=token, meta=h.tree_meta,
                bind=bind,
            )  # fmt: skip
        h.recovering = False
        tries = 0
        while True:
            try:
                return await recover_run(
                    client, store, h.durable_id, toolkit, cancel=token, bind=bind
                )
            except RunNotRecoverable as exc:
                # A child's lease may outlive its parent's by up to one lease (the dead
                # process renewed them at different times): wait for it, bounded.
                tries += 1
                if exc.status != "running" or h.parent is rt.root or tries > 3 * _CLAIM_LEASES:
                    raise
                await trio.sleep(rt.lease_ms / 3000)
    finally:
        # Only a durable run in progress records children (a resumed turn is not one).
        h.checkpointer = None


async def durable_child(
    rt: AgentRuntime, h: Handle, agent: str, call_id: str | None
) -> ToolResult | tuple[str, bool]:
    """Before a ``task`` call of durable *h* spawns: the child's run id and whether it
    is recovered, or the result of a child that already finished (not run again)."""
    store = rt.checkpoints
    cp = h.checkpointer
    assert store is not None
    assert h.durable_id is not None
    assert isinstance(cp, Checkpointer)
    meta = cp.meta if cp.meta is not None else h.tree_meta
    if meta is None or call_id is None:
        raise RuntimeError(f"the durable run of {h.id} has no tree record or no call id")
    children = meta.setdefault("children", {})
    key = f"{cp.position}:{call_id}"
    known = children.get(key)
    if isinstance(known, dict) and known.get("agent") == agent:
        child_id = str(known["id"])
        found = await store.load_checkpoint(child_id)
        if found is None:
            return child_id, False  # recorded, never started: start it now
        if found.status == "done":
            return ToolResult(await _final_text(store, child_id), False, {"agent": agent})
        if found.status == "failed":
            return ToolResult.error(
                f"the sub-agent {agent!r} failed before the process stopped", {"agent": agent}
            )
        return child_id, True
    child_id = f"{h.durable_id}/{agent}.{uuid.uuid4().hex[:12]}"
    children[key] = {"id": child_id, "agent": agent}
    cp.meta = meta
    # Flushed before the child starts: a child that may have run is always found.
    await cp.note()
    return child_id, False


async def _final_text(store: CheckpointStore, id: str) -> str:
    messages = await store.get(id) or []
    for message in reversed(messages):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


async def recover_tree(rt: AgentRuntime, root_id: str) -> TaskResult:
    """See :meth:`AgentRuntime.recover`."""
    store = rt.checkpoints
    if store is None:
        raise TypeError("recover needs open_agent_runtime(durable=True) with a CheckpointStore")
    found = await store.load_checkpoint(root_id)
    if found is None:
        raise LookupError(f"no durable agent tree is stored under {root_id!r}")
    tree = found.state.get("tree")
    if not isinstance(tree, dict) or tree.get("parent") is not None:
        raise ValueError(f"{root_id!r} is not the root run of a durable agent tree")
    agent = tree.get("agent")
    if not isinstance(agent, str) or agent not in rt.registry:
        raise ValueError(f"the tree {root_id!r} was run by agent {agent!r}, unknown here")
    h = rt.spawn(rt.root, agent)
    h.durable_id, h.tree_meta, h.recovering = root_id, tree, True
    if not durable(rt, h):
        await rt.close(h, force=True, reason="error")
        raise ValueError(f"the agent {agent!r} of {root_id!r} does not run durably here")
    # The wake's prompt is not used: the recovered run goes on from its checkpoint.
    woke = rt.wake(h, "(recovered)")
    assert woke.ok, woke.error
    result = await rt.wait(h)
    if isinstance(h.error, RunNotRecoverable):
        # Another worker won the claim (or the owner is alive): nothing ran here.
        await rt.close(h, force=True, reason="error")
        raise h.error
    return result


async def orphaned_trees(rt: AgentRuntime, limit: int) -> list[str]:
    """See :meth:`AgentRuntime.orphaned_trees`."""
    store = rt.checkpoints
    if store is None:
        raise TypeError("orphaned_trees needs open_agent_runtime(durable=True) with a store")
    roots: list[str] = []
    for id in await store.orphaned_runs(limit):
        found = await store.load_checkpoint(id)
        tree = found.state.get("tree") if found is not None else None
        if isinstance(tree, dict) and tree.get("parent") is None:
            roots.append(id)
    return roots
