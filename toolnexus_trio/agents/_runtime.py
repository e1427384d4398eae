"""The agent runtime (SPEC §7D): the handle tree, the six verbs, gates and escalation;
long because the verbs share one state machine per handle (admission, settle, interrupt,
close and resume each move it), which reads best in one place. The handle table itself
(ids, walks, closed handles) is :mod:`._table`, a turn :mod:`._turn`, ``task`` :mod:`._task`.

``async with open_agent_runtime(registry, ...) as runtime`` opens the runtime's nursery;
it is the root handle's subtree. Every spawned handle gets a service task in its
parent's subtree nursery, which opens the handle's own subtree nursery: its turns and
its children's service tasks run there. So no task outlives the runtime, and a handle's
work is a branch of one Trio task tree.

A turn is one :meth:`Client.run` (or :meth:`Client.resume`) of the shared loop, under a
:class:`CancelToken` of the handle: ``interrupt``, a budget stop, ``max_wall_ms`` and
``close`` all cancel that token, which is bound to the run's cancel scope, so a model
call in flight and every tool call of the turn are cancelled at once (SPEC §7D
cancellation table: the "mid-request abort" row). Turn execution is in :mod:`._turn`,
the ``task`` tool in :mod:`._task`.
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._cancel import CancelToken
from .._groups import collapse_groups, reraise_single
from .._wire import Answer
from ..loop._durable import AlreadyAnswered
from ..loop._results import Generate, Hooks, InDoubtPolicy, OnMetric
from ..stores._base import CheckpointStore, ConversationStore
from ..stores._memory import InMemoryConversationStore
from . import _budget, _recovery, _snapshot
from ._durable import keep_durable
from ._escalation import suspended_path
from ._inbox import turn_input
from ._table import HandleTable
from ._turn import Turns
from ._types import (
    LIMIT_MAX_CHILDREN,
    LIMIT_MAX_DEPTH,
    LIMIT_TIMEOUT,
    AgentDef,
    Budget,
    Handle,
    HandleState,
    HandleView,
    InboxItem,
    PostResult,
    SpawnError,
    TaskResult,
)

if TYPE_CHECKING:
    from ..models import ClientOptions

TRACE_LIMIT = 10_000
"""The most runtime events (``trace``) and per-handle transitions kept."""

DEFAULT_MAX_DEPTH = 32
"""The deepest a handle may be under the root (``open_agent_runtime(max_depth=...)``):
a model that keeps delegating to its own agent stops there with a ``maxDepth`` refusal."""


_Ids = list[str]  # (the class's own ``list`` verb shadows the builtin in its body)

OnChange = Callable[["AgentRuntime", str, Handle], Awaitable[None]]
"""The persistence seam: awaited after a handle settles, suspends, resumes or closes."""


def _closed_result(h: Handle, text: str = "closed") -> TaskResult:
    return TaskResult(
        text, True, "closed", turns=h.turns, total_tokens=h.tokens, own_tokens=h.own_tokens
    )


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


class AgentRuntime:
    """The §7D runtime. Made by :func:`open_agent_runtime`; use its verbs inside the block.

    ``root`` is the host's handle (id ``"root"``); spawn the first agents under it.
    ``trace`` lists the latest runtime events (``"wake QUEUED"``, ``"DEQUEUED wake"``, ``"task
    replay → REATTACH"``...), each prefixed with the handle id.
    """

    def __init__(
        self,
        registry: Mapping[str, AgentDef],
        *,
        generate: Generate | None,
        llm: ClientOptions | None,
        inbox_cap: int,
        max_concurrent_turns: int,
        shutdown_ms: float,
        store: ConversationStore | None,
        hooks: Hooks | Any | None,
        on_metric: OnMetric | None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        durable: bool = False,
        lease_ms: int = 30_000,
        on_in_doubt: InDoubtPolicy | None = None,
    ) -> None:
        if (generate is None) == (llm is None):
            raise ValueError("open_agent_runtime needs exactly one of generate= or llm=")
        if inbox_cap < 1:
            raise ValueError("inbox_cap must be at least 1")
        if max_concurrent_turns < 1:
            raise ValueError("max_concurrent_turns must be at least 1")
        if type(max_depth) is not int or max_depth < 1:
            raise ValueError("max_depth must be an integer of at least 1")
        self.max_depth = max_depth
        # The key names the agent (spawn, task, ids); a def called otherwise takes it.
        self.registry: dict[str, AgentDef] = {
            key: defn if defn.name == key else attrs.evolve(defn, name=key)
            for key, defn in sorted(registry.items())
        }
        self._generate = generate
        self._llm = llm
        self._inbox_cap = inbox_cap
        self._shutdown_ms = shutdown_ms
        self._store: ConversationStore = store if store is not None else InMemoryConversationStore()
        # Without a store the runtime owns an in-memory one and reads and writes it in
        # place (see load/keep): no scheduling round trip nor shielded scope per turn.
        self._own_store = self._store if store is None else None
        self._hooks = hooks
        self._on_metric = on_metric
        # A durable tree (agents/_recovery.py): the store its runs checkpoint in.
        self.checkpoints: CheckpointStore | None = None
        if durable:
            if not isinstance(store, CheckpointStore):
                raise TypeError(
                    "open_agent_runtime(durable=True) needs a CheckpointStore (the "
                    "in-memory, SQLite and PostgreSQL stores are)"
                )
            if type(lease_ms) is not int or lease_ms < 1:
                raise ValueError("lease_ms must be a positive integer")
            self.checkpoints = store
        self.lease_ms = lease_ms
        self.on_in_doubt = on_in_doubt
        # The turn gate: held only around a model call (SPEC §7D gate 3). A
        # CapacityLimiter is released by `async with` on any exit, cancellation included.
        self.turn_gate = trio.CapacityLimiter(max_concurrent_turns)
        self.root = Handle("root", None, None, Budget())
        self.table = HandleTable(self.root, self._forget_transcript)
        # Bounded: a long-lived runtime (a persona's heartbeats) keeps the latest events.
        self.trace: collections.deque[str] = collections.deque(maxlen=TRACE_LIMIT)
        self.on_change: OnChange | None = None
        # The take-once seam of a durable runtime (_durable.keep_durable): awaited first
        # in resume, before anything runs; raising (AlreadyAnswered) aborts the resume.
        self.before_resume: Callable[[Answer], Awaitable[None]] | None = None
        # Request ids resume() has taken: a replayed answer is refused (AlreadyAnswered).
        self.answered: dict[str, str] = {}
        # True while leaving the runtime block: the leaf-first close then is the end
        # of this process's view, not of a durable tree (persistence should skip it).
        self.shutting_down = False
        self._sources: dict[str, Any] = {}  # shared HTTP turn sources, one per model
        self._turns = Turns(self)

    # -- transcripts -------------------------------------------------------------

    async def load(self, id: str) -> list[Any] | None:
        """The transcript stored under handle id *id* (a copy), or ``None``."""
        own = self._own_store
        if own is None:
            return await self._store.get(id)
        assert isinstance(own, InMemoryConversationStore)
        # What its get() does, without the checkpoint: this store is the runtime's own.
        messages = own._threads.get(id)
        if messages is None:
            return None
        own._threads.move_to_end(id)
        return list(messages)

    async def keep(self, id: str, messages: list[Any]) -> None:
        """Save *messages* as handle *id*'s transcript; a cancelled caller still saves."""
        own = self._own_store
        if own is None:
            with trio.move_on_after(5, shield=True):
                await self._store.save(id, messages)
            return
        assert isinstance(own, InMemoryConversationStore)
        own._keep(id, messages)  # save() without the checkpoint (no pending states here)

    # -- views -----------------------------------------------------------------

    @property
    def conversation_store(self) -> ConversationStore:
        """The one store of every handle's transcript (conversation id = handle id)."""
        return self._store

    def handle(self, id: str) -> Handle:
        """The handle with this id (:class:`KeyError` when there is none)."""
        return self.table[id]

    def inspect(self, h: Handle) -> HandleView:
        """A read-only view of *h*."""
        return HandleView(h.id, h.state, h.tokens, len(h.inbox), tuple(h.transitions))

    def list(self, h: Handle | None = None) -> list[HandleView]:
        """Views of *h*'s subtree (the whole tree by default), parents before children.

        A closed handle is listed until 256 more recent ones have closed (then it is
        forgotten, see :mod:`._table`), so the list of a long-lived runtime stays short."""
        return [self.inspect(node) for node in self.table.subtree(h or self.root)]

    def _note(self, h: Handle, event: str) -> None:
        self.trace.append(f"{h.id}: {event}")

    def _move(self, h: Handle, state: HandleState) -> None:
        h.transitions.append(f"{h.state}→{state}")
        if len(h.transitions) > TRACE_LIMIT:
            # Memory stays bounded for a handle woken forever; the oldest half goes.
            del h.transitions[: TRACE_LIMIT // 2]
        h.state = state

    # -- spawn -------------------------------------------------------------------

    def spawn(self, parent: Handle, def_name: str, budget: Budget | None = None) -> Handle:
        """A new idle child of *parent* running *def_name* (SPEC §7D ``spawn``).

        Its id is ``<parent id>/<def>.<n>``; its budget is *budget* (else the def's)
        carved against the parent's remaining pool. Raises :class:`SpawnError` naming the
        cap (``maxChildren``, ``maxDepth``, ``maxTokens``...) or the problem.
        """
        defn = self.registry.get(def_name)
        if defn is None:
            raise SpawnError(f"unknown agent {def_name!r}; known: {', '.join(self.registry)}")
        if parent.state == "closed" or parent.closing:
            raise SpawnError(f"handle {parent.id} is closed")
        cap = parent.budget.max_children
        live = parent.live_children  # kept up to date: no walk of the children per spawn
        if cap is not None and live >= cap:
            raise SpawnError(
                f"spawn refused: {parent.id} has {live} children (maxChildren {cap})",
                LIMIT_MAX_CHILDREN,
            )
        for node in _budget.chain(parent):
            depth = node.budget.max_depth
            if depth is not None and parent.depth + 1 - node.depth > depth:
                raise SpawnError(
                    f"spawn refused: deeper than maxDepth {depth} of {node.id}", LIMIT_MAX_DEPTH
                )
        if parent.depth + 1 > self.max_depth:
            raise SpawnError(
                f"spawn refused: {parent.id} is at the runtime's max_depth {self.max_depth}",
                LIMIT_MAX_DEPTH,
            )
        spent = _budget.tokens_exhausted(parent, overspent=False)
        if spent is not None:
            limit, holder = spent
            raise SpawnError(f"spawn refused: budget exhausted ({limit} of {holder.id})", limit)
        now = trio.current_time()
        own = budget if budget is not None else (defn.budget or Budget())
        carved = _budget.carve(own, parent, now) if parent.parent is not None else own
        number = parent.seq.get(def_name, 0) + 1
        parent.seq[def_name] = number
        child = Handle(f"{parent.id}/{def_name}.{number}", defn, parent, carved, spawned_at=now)
        self.table.add(child)
        self._start_in(parent, functools.partial(self._serve, child))
        return child

    def _start_in(self, h: Handle, fn: Callable[[], Awaitable[None]]) -> None:
        # A handle's nursery opens when its service task first runs; work asked for
        # before that (a wake right after spawn) waits in `starts`.
        if h.nursery is not None:
            h.nursery.start_soon(fn)
        else:
            h.starts.append(fn)

    def _run_turn(self, h: Handle, turn: Callable[[], Awaitable[None]]) -> None:
        # A handle runs one turn at a time, in its own service task (no task per turn).
        h.turn_job = turn
        h.kick.set()

    async def _serve(self, h: Handle) -> None:
        """The handle's service task: its subtree nursery (its children's service tasks
        run there) and, in its own body, the handle's turns one after the other.

        Groups are collapsed at every level: a cancel that ends a deep tree at once (the
        runtime's exit) reaches the top as one ``Cancelled``, not a group nested once
        per level (which a tree deeper than the stack could not even print)."""
        try:  # collapse_groups(), without a generator context manager per handle
            await self._serve_in_nursery(h)
        except BaseExceptionGroup as group:
            reraise_single(group)

    async def _serve_in_nursery(self, h: Handle) -> None:
        async with trio.open_nursery() as nursery:
            h.nursery = nursery
            # Popped, not iterated: a loop variable would keep the last child's service
            # (and so the child) alive for as long as this handle serves.
            starts, h.starts = h.starts, []
            while starts:
                nursery.start_soon(starts.pop(0))
            while not h.finished.is_set():
                job, h.turn_job = h.turn_job, None
                if job is not None:
                    if h.kick.is_set():
                        # The kick that announced this job is spent here: waiting on it
                        # after the turn would be a needless trip through the scheduler
                        # per turn. A close during the turn kicks the new event, and
                        # `finished` is checked before any wait.
                        h.kick = trio.Event()
                    await job()
                    continue
                await h.kick.wait()
                h.kick = trio.Event()
            # close() ended the children and the turn first; nothing real is left. Only
            # what is still unwinding is cancelled (an empty nursery exits as it is,
            # without a Cancelled raised and caught per handle).
            if nursery.child_tasks:
                nursery.cancel_scope.cancel()
        h.nursery = None  # nothing starts under a closed handle

    # -- post / wake ---------------------------------------------------------------

    def post(self, h: Handle, item: InboxItem) -> PostResult:
        """Append *item* to *h*'s inbox; no transition. Full inbox or closed handle: a
        synchronous ``ok=False`` with ``error`` (never silent)."""
        if h.state == "closed" or h.closing:
            return PostResult(False, f"handle {h.id} is closed")
        if len(h.inbox) >= self._inbox_cap:
            return PostResult(False, f"inbox full ({self._inbox_cap} items) at {h.id}")
        h.inbox.append(item)
        return PostResult(True)

    def wake(self, h: Handle, prompt: str | None = None) -> PostResult:
        """Start a turn of idle *h* on *prompt* plus its drained inbox (synchronous).

        Admission is atomic: the check, the slot and the state flip happen in this call.
        Over the parent's ``max_concurrent`` the wake queues (FIFO) and starts when a
        sibling's run ends (its slot transfers). A handle that is not idle, or has
        nothing to do, gives ``ok=False`` with ``error``.
        """
        if h is self.root:
            return PostResult(False, "the root handle has no turns: spawn an agent under it")
        if h.state == "closed" or h.closing:
            return PostResult(False, f"handle {h.id} is closed")
        if h.state != "idle" or h.queued:
            return PostResult(False, f"handle {h.id} is {'queued' if h.queued else h.state}")
        if not prompt and not h.inbox:
            return PostResult(False, f"nothing to wake {h.id} with: no prompt, empty inbox")
        parent = h.parent
        assert parent is not None
        cap = parent.budget.max_concurrent
        if cap is not None and parent.running_children >= cap:
            h.queued, h.queued_prompt = True, prompt
            parent.wake_queue.append(h)
            self._note(h, "wake QUEUED")
            return PostResult(True)
        self._admit(h, prompt)
        return PostResult(True)

    def _admit(self, h: Handle, prompt: str | None) -> None:
        assert h.parent is not None
        h.parent.running_children += 1
        h.drained, h.inbox = h.inbox, []
        text = turn_input(prompt, h.drained, h.id)
        self._begin(h)
        self._move(h, "running")
        self._run_turn(h, lambda: self._turns.fresh(h, text))

    def _begin(self, h: Handle) -> None:
        h.token = CancelToken()
        h.stop_reason = h.stop_limit = None
        if h.extended:  # a fresh set only when the last wake extended something
            h.extended = set()

    def _release_slot(self, h: Handle) -> None:
        parent = h.parent
        assert parent is not None
        parent.running_children -= 1
        # Slot transfer: the completed sibling's slot goes to the queue's head.
        while parent.wake_queue:
            cap = parent.budget.max_concurrent
            if cap is not None and parent.running_children >= cap:
                break
            nxt = parent.wake_queue.pop(0)
            nxt.queued = False
            self._note(nxt, "DEQUEUED wake")
            self._admit(nxt, nxt.queued_prompt)

    # -- settle (called by _turn when a run ends) ------------------------------------

    async def _settle(self, h: Handle, result: TaskResult, *, restore_drain: bool) -> None:
        if restore_drain:
            # Transactional drain: an aborted turn consumed nothing.
            h.inbox[:0] = h.drained
        h.drained = []
        h.token = None
        h.last_result = result
        if result.status == "pending":
            self._move(h, "suspended")
        elif h.state == "running":
            self._move(h, "idle")
        if result.status != "pending":
            # A settled run's task keys end with it (reattachment is for the replay of
            # a suspended run), and so does the pending state.
            h.task_children.clear()
            h.pending = h.pending_run = h.budget_ask = None
            self.table.forget_closed()
        self._release_slot(h)
        await self._signal(h, "suspended" if result.status == "pending" else "settled")

    async def _signal(self, h: Handle, event: str) -> None:
        """Make *h*'s change durable, then tell its waiters (never the other way round:
        what a host is told, a pending result above all, is already in the store)."""
        try:
            if self.on_change is not None:
                h.settling = True  # wait() meanwhile waits for the event set below
                await self.on_change(self, event, h)
        finally:
            h.settling = False
            settled, h.settled = h.settled, trio.Event()
            settled.set()

    # -- wait / interrupt -----------------------------------------------------------

    async def wait(self, h: Handle, timeout_ms: float | None = None) -> TaskResult:
        """The next result of *h*, or its last one when it is settled (answers at once).

        On *timeout_ms* the result is ``status="timeout"``; *h* keeps running.
        """
        if h.state not in ("running",) and not h.queued and not h.settling:
            if h.last_result is not None:
                return h.last_result
            if h.state == "closed":
                return _closed_result(h)
        event = h.settled
        if timeout_ms is None:  # no cancel scope for a wait without a timeout
            await event.wait()
            assert h.last_result is not None
            return h.last_result
        with trio.move_on_after(timeout_ms / 1000):
            await event.wait()
            assert h.last_result is not None
            return h.last_result
        text = f"wait timed out after {timeout_ms:g}ms; {h.id} keeps running"
        return self._result(h, text, "timeout", LIMIT_TIMEOUT)

    async def wait_idle(self, h: Handle) -> HandleState:
        """Return once *h* is neither running nor queued (its state then: ``idle``,
        ``suspended`` or ``closed``). A heartbeat uses it to wake only at idle."""
        while h.state == "running" or h.queued or h.settling:
            await h.settled.wait()
        await trio.lowlevel.checkpoint()
        return h.state

    def interrupt(self, h: Handle) -> None:
        """Abort *h*'s run, and its descendants', through their cancel scopes.

        A running handle's model call and tools are cancelled at once; it goes back to
        ``idle`` with its drained inbox restored and waiters get ``"interrupted"``. A
        suspended handle's pending request is cancelled (``suspended→idle``); a queued
        wake is dropped. Never a kill: the handle stays usable.
        """
        self._stop_tree(h, "interrupt")
        dropped: Handle | None = None
        for node in reversed(list(self.table.subtree(h, into_closed=False))):
            if node.state == "suspended":
                self._drop_pending(node, "interrupted")
                dropped = node
            elif node.queued:
                self._unqueue(node)
                self._finish_now(node, self._result(node, "interrupted", "interrupted"))
        if dropped is not None and self.on_change is not None and self.root.nursery is not None:
            # This verb is synchronous: the store learns of the cancelled approvals at
            # once after (the durable record becomes "superseded"), not at the next change.
            self.root.nursery.start_soon(self._store_change, dropped)

    async def _store_change(self, h: Handle) -> None:
        if self.on_change is not None:
            await self.on_change(self, "interrupted", h)

    def _drop_pending(self, h: Handle, status: str) -> None:
        h.pending = h.pending_run = h.budget_ask = None
        h.task_children.clear()
        self.table.forget_closed()
        self._move(h, "idle")
        self._finish_now(h, self._result(h, f"{status}: pending request cancelled", status))

    def _unqueue(self, h: Handle) -> None:
        assert h.parent is not None
        h.parent.wake_queue.remove(h)
        h.queued = False

    def _finish_now(self, h: Handle, result: TaskResult) -> None:
        h.last_result = result
        settled, h.settled = h.settled, trio.Event()
        settled.set()

    def _result(self, h: Handle, text: str, status: str, limit: str | None = None) -> TaskResult:
        return TaskResult(
            text,
            status != "done",
            status,
            turns=h.turns,
            total_tokens=h.tokens,
            own_tokens=h.own_tokens,
            limit=limit,
        )

    def _stop_tree(self, h: Handle, reason: str, limit: str | None = None) -> None:
        """Cancel the running turn of *h* and of every descendant (synchronously)."""
        for node in self.table.subtree(h, into_closed=False):
            token = node.token
            if node.state == "running" and token is not None and not token.is_cancelled:
                node.stop_reason, node.stop_limit = reason, limit
                token.cancel(reason if limit is None else f"{reason}: {limit}")

    async def _quiesce(self, h: Handle) -> None:
        """Return once no descendant of *h* is running (their turns were cancelled)."""
        while True:
            busy = next(
                (
                    d
                    for d in self.table.subtree(h, into_closed=False)
                    if d is not h and d.state == "running"
                ),
                None,
            )
            if busy is None:
                return
            await busy.settled.wait()

    # -- close ------------------------------------------------------------------------

    async def close(self, h: Handle, *, force: bool = False, reason: str | None = None) -> None:
        """Close *h*: stop accepting, close its children leaf-first, let a running turn
        finish within ``shutdown_ms`` (at once with *force*) then interrupt it, call
        ``on_close(h, reason)``, and keep the final state (``closed``) queryable."""
        while h.closing and h.state != "closed":
            # Another close of this handle is under way (the host's and a parent's
            # `task`, say): one close, one on_close. Wait for it; if it was cancelled
            # half-way, carry on here.
            assert h.close_attempt is not None  # closing is set with it
            await h.close_attempt.wait()
        if h.state == "closed":
            return
        h.closing = True
        h.close_attempt = attempt = trio.Event()
        try:
            await self._close(h, force=force, reason=reason)
        finally:
            # Cancelled half-way, the handle stays usable (mypy narrows state too far).
            h.closing = h.state == "closed"  # type: ignore[comparison-overlap]
            attempt.set()

    async def _close(self, h: Handle, *, force: bool, reason: str | None) -> None:
        # Leaf-first without recursion (a tree may be deeper than the stack): the open
        # descendants, deepest first; again if a running one spawned meanwhile.
        while True:
            below = [
                n
                for n in self.table.subtree(h, into_closed=False)
                if n is not h and n.state != "closed"
            ]
            if not below:
                break
            for node in reversed(below):
                await self.close(node, force=force, reason=reason)
        if h.queued:
            self._unqueue(h)
        if h.state == "running":
            if not force:
                with trio.move_on_after(self._shutdown_ms / 1000):
                    await h.settled.wait()
            if h.state == "running":
                self._stop_tree(h, "close")
                await h.settled.wait()
        if h.state == "suspended":
            self._drop_pending(h, "closed")
        why = reason or "closed"
        if h.defn is not None and h.defn.on_close is not None:
            await _maybe_await(h.defn.on_close(h, why))
        self._move(h, "closed")
        if h.last_result is None:
            h.last_result = _closed_result(h)
        h.finished.set()
        h.kick.set()
        # What a closed handle leaves behind: its view and last result, for a while.
        self.table.closed(h)
        await self._signal(h, "closed")

    def _forget_transcript(self, id: str) -> None:
        # A forgotten handle's transcript goes with it from the runtime's own store.
        own = self._own_store
        if own is not None:
            assert isinstance(own, InMemoryConversationStore)
            own._threads.pop(id, None)

    # -- runs and resume ----------------------------------------------------------------

    async def run(
        self, def_name: str, prompt: str, budget: Budget | None = None, *, id: str | None = None
    ) -> TaskResult:
        """Spawn *def_name* under the root, wake it with *prompt* and wait for its result
        (the child stays open, so a ``pending`` result can be resumed).

        With *id* (a runtime opened with ``durable=True``) the tree is crash-durable:
        its root's run is checkpointed under *id*, each sub-agent's under an id of its
        own recorded in its parent's checkpoint; a process that dies mid-turn leaves it
        to :meth:`recover` (see "Crash-durable agent trees" in the docs)."""
        if id is not None and self.checkpoints is None:
            raise ValueError("run(id=...) needs open_agent_runtime(durable=True)")
        h = self.spawn(self.root, def_name, budget)
        if id is not None:
            h.durable_id, h.tree_meta = id, _recovery.tree_record(def_name, None)
        woke = self.wake(h, prompt)
        if not woke.ok:
            return TaskResult(woke.error or "wake refused", True, "error")
        return await self.wait(h)

    async def resume(self, answer: Answer) -> TaskResult:
        """Route *answer* to the deepest handle suspended on its request and run the
        upward cascade; the result of the top suspended handle (under the root).

        Each level traces ``suspended→idle`` (answer accepted, checkpoint restored) then
        ``idle→running`` (the replay); re-invoked ``task`` calls reattach to their child
        by task key. An answer is taken once: a replay raises :class:`AlreadyAnswered`;
        :class:`LookupError` when no handle is suspended on ``answer.id``.
        """
        if self.before_resume is not None:
            await self.before_resume(answer)
        seen = self.answered.get(answer.id)
        if seen is not None:
            raise AlreadyAnswered(answer.id, seen)
        path = suspended_path(self.root, answer.id)
        if not path:
            raise LookupError(f"no suspended handle for answer {answer.id!r}")
        top = path[0]
        self.answered[answer.id] = "taken"
        if len(self.answered) > TRACE_LIMIT:
            del self.answered[next(iter(self.answered))]
        result: TaskResult | None = None
        for h in reversed(path):
            if h.state != "suspended":
                break  # an upper level's replay already took care of it
            if self.on_change is not None:
                await self.on_change(self, "resumed", h)
            self._move(h, "idle")
            self._replay(h, answer)
            # A level that asks again (a new request) is relayed by its parent's
            # replayed task call, so the cascade goes on and the top is pending again.
            result = await self.wait(h)
        assert result is not None
        self.answered[answer.id] = "answered"
        return top.last_result or result

    async def recover(self, root_id: str) -> TaskResult:
        """Continue the durable tree *root_id* whose process died, from its checkpoints.

        The root agent is spawned again (under a new handle id) and its run recovered
        as :meth:`Client.recover` does; each ``task`` call in flight finds its
        sub-agent: one that finished gives its saved answer (it is not run again), one
        in flight is recovered from its own checkpoint, one never started starts. The
        root's result when the tree finishes. Of workers racing to recover one tree,
        one wins; the others (and a tree whose owner is alive, or that finished) get
        :class:`~toolnexus_trio.loop.RunNotRecoverable`; :class:`LookupError` when
        nothing is stored under *root_id*.
        """
        return await _recovery.recover_tree(self, root_id)

    async def orphaned_trees(self, limit: int = 100) -> _Ids:
        """Root ids of durable trees whose owner's lease expired: what a worker passes
        to :meth:`recover`. Among the store's oldest *limit* orphaned runs (a tree's
        orphaned sub-agents are listed there too, and left out here)."""
        return await _recovery.orphaned_trees(self, limit)

    def _replay(self, h: Handle, answer: Answer) -> None:
        assert h.parent is not None
        h.parent.running_children += 1
        self._begin(h)
        self._move(h, "running")
        self._run_turn(h, lambda: self._turns.resumed(h, answer))

    async def resume_inline(self, h: Handle, answer: Answer) -> TaskResult:
        """The inline resume of a suspended child by its parent's ``task`` (the parent's
        interpreter answered): ``suspended→running``, the halted run goes on."""
        assert h.parent is not None
        h.parent.running_children += 1
        self._begin(h)
        self._move(h, "running")
        self._run_turn(h, lambda: self._turns.resumed(h, answer))
        return await self.wait(h)

    # -- persistence seam -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The handle table as JSON-safe data (see :mod:`._snapshot`): ids, states,
        budgets, ledgers, inboxes, traces, task keys, last results and, per suspended
        handle, its request and halted run. Transcripts live in the store."""
        return _snapshot.snapshot(self)

    def restore(self, data: dict[str, Any]) -> None:
        """Rebuild a :meth:`snapshot` in this fresh runtime (nothing spawned yet); a
        pending tree can then be answered with :meth:`resume`."""
        _snapshot.restore(self, data)

    # -- shutdown ---------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self.shutting_down = True
        await self.close(self.root)

    async def _aclose_sources(self) -> None:
        for source in self._sources.values():
            await source.aclose()


@asynccontextmanager
async def open_agent_runtime(
    registry: Mapping[str, AgentDef],
    *,
    generate: Generate | None = None,
    llm: ClientOptions | None = None,
    inbox_cap: int = 8,
    max_concurrent_turns: int = 8,
    shutdown_ms: float = 200,
    store: ConversationStore | None = None,
    hooks: Hooks | Any | None = None,
    on_metric: OnMetric | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    durable: bool = False,
    lease_ms: int = 30_000,
    on_in_doubt: InDoubtPolicy | None = None,
) -> AsyncIterator[AgentRuntime]:
    """Open the §7D agent runtime over *registry* (agent name → :class:`AgentDef`).

    The model is exactly one of *generate* (an in-process model: the callable
    :class:`~toolnexus_trio.InProcessOptions` takes) or *llm* (the HTTP client's
    :class:`~toolnexus_trio.models.ClientOptions`; a def's ``model`` overrides its model).
    *store* keeps every handle's transcript under the handle id; *hooks* and
    *on_metric* are forwarded verbatim to every agent's client unless its def sets its
    own. *max_depth* caps how deep a handle may be under the root (a deeper spawn is
    refused with ``maxDepth``; 32 unless given), so a model that keeps delegating to its
    own agent stops. Leaving the block closes the tree leaf-first (each running turn
    gets *shutdown_ms* to finish) and cancels whatever is left.

    *durable* (with a :class:`~toolnexus_trio.stores.CheckpointStore` as *store*) makes
    a tree run with :meth:`AgentRuntime.run`'s ``id=`` crash-durable: every agent's
    turn is checkpointed as a durable :meth:`Client.ask` is, under an owner lease of
    *lease_ms*; *on_in_doubt* is the in-doubt policy of its recoveries
    (:meth:`AgentRuntime.recover`).
    """
    runtime = AgentRuntime(
        registry,
        generate=generate,
        llm=llm,
        inbox_cap=inbox_cap,
        max_concurrent_turns=max_concurrent_turns,
        shutdown_ms=shutdown_ms,
        store=store,
        hooks=hooks,
        on_metric=on_metric,
        max_depth=max_depth,
        durable=durable,
        lease_ms=lease_ms,
        on_in_doubt=on_in_doubt,
    )
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            runtime.root.nursery = nursery
            try:
                # With a PendingStore the tree is kept in it (restored on entry); the
                # keeping ends before the shutdown below, so closing the tree in memory
                # leaves the stored one resumable from another process.
                async with keep_durable(runtime, store):
                    yield runtime
                # A clean exit: close the tree leaf-first, bounded (each level's
                # shutdown_ms, then interrupt), under a shield so it really runs.
                with trio.move_on_after(max(1.0, shutdown_ms / 1000 * 4), shield=True):
                    await runtime._shutdown()
            finally:
                nursery.cancel_scope.cancel()
                with trio.move_on_after(1, shield=True):
                    await runtime._aclose_sources()
