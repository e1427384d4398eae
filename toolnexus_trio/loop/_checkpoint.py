"""Crash-durable runs: checkpoints at step boundaries, an owner lease, and recovery.

With ``durable=True`` in the options and a :class:`~toolnexus_trio.stores.CheckpointStore`,
:meth:`Client.ask` with an id runs through :func:`durable_ask`:

1. ``start_run`` writes the first checkpoint (the transcript with the new user
   message) under a fresh owner token and a lease of ``lease_ms``; a task of the run's
   own nursery renews it every third of that;
2. each model response is written before its tool calls start (the calls are then
   *in flight*), each tool result as its call ends, and the transcript again once the
   turn's nursery has closed (a consistent cut: every call of the turn is finished,
   failed or cancelled) before the next model call;
3. the outcome is saved in the thread and the run marked ``"done"`` in one transaction
   (``finish_run``); a run that raised is marked ``"failed"`` and saves nothing (as a
   plain ``ask``); a run cancelled from outside gives its lease up at once, so another
   worker recovers it without waiting (a graceful shutdown).

Every write is fenced by the owner token: a process whose lease ran out and was taken
over cannot write any more, and its run is cancelled (:class:`LeaseLost`).

:func:`recover` claims an orphaned run (status ``"running"``, lease expired: one
conditional update, so one claimant wins) and goes on from its last checkpoint: a
model call in flight is issued again; finished tool calls are not run again; a call
in flight is *in doubt*, and the ``on_in_doubt`` policy decides (by default: run it
again only if its tool says :attr:`~toolnexus_trio.ToolHints.idempotent`, otherwise
its result is an error saying it may or may not have run).
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import trio

from .._cancel import CancelToken
from .._groups import collapse_groups
from .._runctx import ResumePoint
from .._tools import ToolResult
from ..stores._base import CheckpointStore, ConversationStore, PendingState, begin_run
from ._conversation import _thread_lock
from ._gate import _gate_for
from ._records import InDoubtCall
from ._results import Prompt, RunResult
from ._runjson import RunSnapshots
from ._toolcalls import _Call, _Outcome, _Run

if TYPE_CHECKING:
    from .._toolkit import Toolkit
    from ._client import Client
    from ._results import Message

logger = logging.getLogger("toolnexus_trio")

STATE_VERSION = 1
"""The version of the checkpoint document this release writes and reads."""

_FINISH_GRACE_S = 30.0
"""How long the final write may take once the run's scope is being cancelled."""


_pause_hook: Callable[[str], Awaitable[None]] | None = None
"""Tests only: awaited after each checkpoint write with its kind (``"start"``,
``"responded"``, ``"started"``, ``"resume"``, ``"result"``, ``"step"``, ``"finished"``), so a test
can kill the process exactly there."""


async def _pause(point: str) -> None:
    if _pause_hook is not None:
        await _pause_hook(point)


class LeaseLost(RuntimeError):
    """This process lost the lease of a durable run (it ran out and another worker
    recovered the run, or the store refused a write): the run was stopped here and
    its outcome not saved; the worker that holds the lease now carries it on."""

    def __init__(self, id: str) -> None:
        super().__init__(
            f"the durable run {id!r} is not this process's any more (its lease ran out "
            "and another worker took it over): stopped here, nothing saved"
        )
        self.id = id


class RunNotRecoverable(RuntimeError):
    """:meth:`Client.recover` could not take the run: ``status`` says why.

    ``"running"``: its owner's lease has not expired (it is alive, or another worker
    recovered it first); ``"done"`` or ``"failed"``: it is finished; ``"tree"``: it is
    a run of a durable agent tree, which :meth:`AgentRuntime.recover
    <toolnexus_trio.agents.AgentRuntime.recover>` recovers as a whole. :meth:`Client.ask`
    raises it too (``status="running"``) for an id whose durable run is still running
    or waits to be recovered.
    """

    def __init__(self, id: str, status: str, message: str) -> None:
        super().__init__(message)
        self.id = id
        self.status = status


def in_doubt_default(call: InDoubtCall) -> ToolResult | None:
    """The default ``on_in_doubt`` policy: ``None`` (run it again) for an idempotent
    tool, else an error result telling the model that the call may or may not have run."""
    if call.idempotent:
        return None
    return ToolResult.error(
        f"in doubt: the call of '{call.name}' was running when the run's process stopped; "
        "it may or may not have run, and it was not run again (check before retrying)"
    )


_CHECKPOINT_KINDS: dict[type, bool] = {}
"""Whether each store class seen is a :class:`CheckpointStore` (a few classes)."""


def _store_of(store: ConversationStore) -> CheckpointStore:
    # A runtime protocol's isinstance looks up each of its dozen methods (tens of
    # microseconds, a fifth of a durable ask's own work): asked once per store class.
    # (A class with __getattr__ may answer per instance: asked each time.)
    kind = type(store)
    known = _CHECKPOINT_KINDS.get(kind)
    if known is None:
        known = isinstance(store, CheckpointStore)
        if not hasattr(kind, "__getattr__"):
            _CHECKPOINT_KINDS[kind] = known
    if not known:
        raise TypeError(
            f"{type(store).__name__} keeps no checkpoints: durable runs need a "
            "CheckpointStore (the in-memory, SQLite and PostgreSQL stores are)"
        )
    return cast("CheckpointStore", store)


class Checkpointer:
    """The durable side of one run: its store, id, owner token and lease."""

    def __init__(self, store: CheckpointStore, id: str, lease_ms: int, model: str) -> None:
        self.store = store
        self.id = id
        self.owner = uuid.uuid4().hex
        self.lease_ms = lease_ms
        self.model = model
        self.lost = False
        self.scope: trio.CancelScope | None = None
        # An agent tree's record of this run (its def, parent, children: agents/
        # _recovery.py), kept by reference in every state written; None: a plain run.
        self.meta: dict[str, Any] | None = None
        self._state: dict[str, Any] = {}
        self._snapshots = RunSnapshots()
        # One write at a time, each of the whole current state: a change waits for a
        # write that includes it, so marks made together (a turn's calls starting)
        # share one write instead of one each.
        self._lock = trio.Lock()
        self._changes = 0
        self._written = 0
        self._flushed = 0  # the last change carried by a write the store flushed
        self._flush_wanted = 0

    def load(self, state: dict[str, Any]) -> None:
        """Adopt *state* (recovery): later writes extend it."""
        self._state = state
        tree = state.get("tree")
        self.meta = tree if isinstance(tree, dict) else None

    def snapshot(self, run: _Run) -> dict[str, Any]:
        """The document of *run* between steps: the next step is a model call.

        ``"run"`` is ``RunResult.to_json()`` of the run so far, built incrementally
        (:class:`RunSnapshots`): a step converts its new messages, not the transcript."""
        document = self._snapshots.document(
            text=run.text,
            messages=run.messages,
            records=run.records,
            turns=run.turns,
            usage=run.usage,
            model=self.model,
        )
        state = {"version": STATE_VERSION, "run": document, "calls": None, "results": {}}
        if self.meta is not None:
            state["tree"] = self.meta
        return state

    @property
    def position(self) -> int:
        """The transcript's length in the state last written: the same for every call
        of one model response, in the run and in its recovery (which reads that state)."""
        run = self._state.get("run")
        messages = run.get("messages") if isinstance(run, dict) else None
        return len(messages) if isinstance(messages, list) else 0

    async def note(self) -> None:
        """Write the current state again, flushed: :attr:`meta` changed (an agent tree
        recorded a child before starting it, so a recovery finds it)."""
        if self.meta is not None:
            self._state["tree"] = self.meta
        await self._write(durable=True)

    async def step(self, run: _Run) -> None:
        """A step boundary: the transcript so far; the next step is a model call.

        Skipped when every call of the turn has its result written: that state already
        says the same (recovery records those results and asks the model)."""
        calls = self._state.get("calls")
        results = self._state.get("results") or {}
        if calls and all("output" in results.get(str(i), ()) for i in range(len(calls))):
            await _pause("step")
            return
        self._state = self.snapshot(run)
        await self._write(durable=False)
        await _pause("step")

    async def responded(self, run: _Run, calls: list[_Call]) -> None:
        """The model's response is in the transcript; *calls* are about to run."""
        if not calls:
            # The answer: the run's end (finish_run) writes it next. A crash between
            # the two only asks the model again.
            await _pause("responded")
            return
        state = self.snapshot(run)
        state["calls"] = [
            {"id": c.id, "name": c.name, "args": c.args, "arguments_json": c.arguments_json,
             "error": c.error}
            for c in calls
        ]  # fmt: skip
        # The calls that start at once are marked started in this same write (a call
        # waiting at the concurrency_safe gate marks itself when its turn comes).
        gate = _gate_for(run.toolkit, [c.name for c in calls])
        state["results"] = {
            str(i): {"started": True}
            for i, c in enumerate(calls)
            if c.error is None and (gate is None or not gate.waits[i])
        }
        self._state = state
        # Flushed: a call marked started must never be lost (a power cut would make
        # a call that ran look unstarted, and recovery would run it a second time).
        await self._write(durable=True)
        await _pause("responded")
        for _ in state["results"]:
            await _pause("started")

    async def tool_started(self, index: int) -> None:
        """Call *index* of the turn is about to run: from now on a crash leaves it in
        doubt (a call never started is simply run by the recovery)."""
        if str(index) in self._state["results"]:
            return  # marked by the response's write
        self._state["results"][str(index)] = {"started": True}
        await self._write(durable=True)
        await _pause("started")

    def resume_point(self, index: int) -> ResumePoint:
        """Call *index*'s :class:`~toolnexus_trio._runctx.ResumePoint`: the token an
        earlier process saved for it (recovery), and how to save one."""
        saved = self._state["results"].get(str(index)) or {}
        token = saved.get("resume") if "output" not in saved else None

        async def save(value: dict[str, Any]) -> None:
            await self.tool_resume(index, value)

        return ResumePoint(token if isinstance(token, dict) else None, save)

    async def tool_resume(self, index: int, token: dict[str, Any]) -> None:
        """Call *index* started work elsewhere that it can pick up again with *token*
        (an MCP task id): flushed, so a recovery resumes it instead of calling again."""
        self._state["results"][str(index)] = {"started": True, "resume": dict(token)}
        await self._write(durable=True)
        await _pause("resume")

    async def tool_done(self, index: int, outcome: _Outcome | None) -> None:
        """Call *index* of the turn ended with *outcome* (a suspension is not an end:
        the call asked for an answer and did nothing, so recovery runs it again)."""
        if outcome is None:
            return
        result = outcome.result
        suspended = result.metadata is not None and "pending" in result.metadata
        self._state["results"][str(index)] = {
            "output": result.output,
            "is_error": result.is_error,
            "suspended": suspended,
        }
        # Not flushed: lost in a power cut, the call is merely in doubt.
        await self._write(durable=False)
        await _pause("result")

    async def _write(self, *, durable: bool) -> None:
        self._changes += 1
        mine = self._changes
        if durable:
            self._flush_wanted = mine
        async with self._lock:
            if self.lost or (self._written >= mine and (not durable or self._flushed >= mine)):
                return  # a write since this change already carried it
            # The top level and the results map copied: a call's mark made while the
            # store is still writing never reaches this write half-way.
            state = {**self._state, "results": dict(self._state["results"])}
            upto = self._changes
            flush = self._flush_wanted > self._flushed
            ok = await self.store.save_checkpoint(self.id, self.owner, state, durable=flush)
            if ok:
                self._written = upto
                if flush:
                    self._flushed = upto
        if not ok:
            self._lose()

    def _lose(self) -> None:
        self.lost = True
        if self.scope is not None:
            self.scope.cancel(reason="lease lost")

    async def keep_lease(self) -> None:
        """Renew the lease every third of it, until cancelled or lost."""
        while True:
            await trio.sleep(self.lease_ms / 3000)
            try:
                ok = await self.store.renew_lease(self.id, self.owner, self.lease_ms)
            except (OSError, RuntimeError, TimeoutError) as exc:
                # A store hiccup: the next tick tries again; if the lease runs out
                # meanwhile and another worker takes the run, our next write says so.
                logger.warning(
                    "toolnexus_trio: renewing the lease of a durable run failed: %s", exc
                )
                continue
            if not ok:
                self._lose()
                return


def _emitter(on_text: Callable[[str], Any]) -> Callable[[dict[str, Any]], Any]:
    async def emit(event: dict[str, Any]) -> None:
        if event.get("type") == "text":
            outcome = on_text(event["delta"])
            if inspect.isawaitable(outcome):
                await outcome

    return emit


async def _drive(
    client: Client, cp: Checkpointer, run: _Run, body: Any, cancel: CancelToken | None = None
) -> RunResult:
    """Run *body* (the loop over *run*) with the lease kept, then save the outcome;
    *cancel* ends the run as :meth:`Client.run`'s does (``status="cancelled"``)."""
    store = cp.store
    try:
        with collapse_groups():
            async with trio.open_nursery() as nursery:
                cp.scope = nursery.cancel_scope
                nursery.start_soon(cp.keep_lease)
                result = await client._drive(run, cancel or CancelToken(), body)
                nursery.cancel_scope.cancel(reason="the run ended")
    except trio.Cancelled:
        if not cp.lost:
            # Stopped from outside (a shutdown): another worker may recover it now.
            with trio.move_on_after(_FINISH_GRACE_S, shield=True):
                await store.release_run(cp.id, cp.owner)
        raise
    except Exception:
        # It raised (a model that keeps failing, a hook): as a plain ask, the thread
        # is left as it was; the run is not recovered again.
        if not cp.lost:
            with trio.move_on_after(_FINISH_GRACE_S, shield=True):
                await store.finish_run(cp.id, cp.owner, "failed", None)
        raise
    if cp.lost:
        raise LeaseLost(cp.id)
    pending = PendingState.of(result) if result.status == "pending" else None
    with trio.move_on_after(_FINISH_GRACE_S, shield=True):
        if not await store.finish_run(cp.id, cp.owner, "done", result.messages, pending):
            raise LeaseLost(cp.id)
    await _pause("finished")
    return result


async def _started(client: Client, run: _Run) -> None:
    # Inside the run's scope, so a stop here is a stop of the run (tests).
    await _pause("start")
    await client._loop(run)


async def durable_ask(
    client: Client,
    store: ConversationStore,
    prompt: Prompt,
    toolkit: Toolkit | None,
    *,
    id: str,
    on_text: Callable[[str], Any] | None = None,
    cancel: CancelToken | None = None,
    meta: dict[str, Any] | None = None,
    bind: Callable[[Checkpointer], None] | None = None,
) -> RunResult:
    """:meth:`Client.ask` of a durable client (see the module docs).

    For the agent runtime's durable trees: *cancel* as :meth:`Client.run`'s, *meta*
    the tree's record kept in every checkpoint, *bind* told the run's
    :class:`Checkpointer` before the run starts."""
    checkpoints = _store_of(store)
    options = client.options
    cp = Checkpointer(checkpoints, id, options.lease_ms, options.model)
    cp.meta = meta  # before the first snapshot: the tree's record is in every state
    # The run of a new thread is built here (the toolkit's skill catalog is read on the
    # event loop); a continued one is built by first(), which the store may call in its
    # worker thread: with a history, _new_run reads only the prompt and the options.
    fresh = client._new_run(prompt, toolkit, None)
    runs = []

    def first(history: list[Message] | None) -> dict[str, Any]:
        built = client._new_run(prompt, toolkit, history) if history else fresh
        runs.append(built)
        return cp.snapshot(built)

    async with _thread_lock(store, id):
        # The thread's transcript read and the run started in one step of the store.
        started = await begin_run(checkpoints, id, cp.owner, cp.lease_ms, first)
        run = runs[-1]
        if on_text is not None:
            run.emit = _emitter(on_text)
        run.checkpoint = cp
        if bind is not None:
            bind(cp)
        if not started:
            raise RunNotRecoverable(
                id,
                "running",
                f"a durable run of {id!r} is still running, or waits to be recovered "
                "(Client.recover): a new one cannot start over it",
            )
        return await _drive(client, cp, run, _started(client, run), cancel)


async def recover(
    client: Client,
    store: ConversationStore,
    id: str,
    toolkit: Toolkit,
    *,
    cancel: CancelToken | None = None,
    bind: Callable[[Checkpointer], None] | None = None,
) -> RunResult:
    """See :meth:`Client.recover`; *cancel* and *bind* as :func:`durable_ask`'s (the
    tree's record comes back from the checkpoint as the Checkpointer's ``meta``), and
    only the agent runtime passes *bind*: a plain recovery refuses a tree's run."""
    checkpoints = _store_of(store)
    options = client.options
    policy = options.on_in_doubt or in_doubt_default
    if bind is None:
        # A tree's agent runs with its tree's tools and team and reports to its parent:
        # a plain worker (Client.orphaned_runs lists these too) must leave it alone.
        seen = await checkpoints.load_checkpoint(id)
        if seen is not None and "tree" in seen.state:
            raise RunNotRecoverable(
                id,
                "tree",
                f"the durable run {id!r} belongs to an agent tree: AgentRuntime.recover "
                "recovers its tree as a whole",
            )
    # No in-process thread lock: the claim is the lock (a live run's lease refuses it).
    cp = Checkpointer(checkpoints, id, options.lease_ms, options.model)
    if not await checkpoints.claim_run(id, cp.owner, cp.lease_ms):
        found = await checkpoints.load_checkpoint(id)
        if found is None:
            raise LookupError(f"no durable run is stored under {id!r}")
        why = (
            "its owner's lease has not expired (it is alive, or another worker recovered it first)"
            if found.status == "running"
            else f"it is finished (status {found.status!r})"
        )
        raise RunNotRecoverable(
            id, found.status, f"the durable run {id!r} was not recovered: {why}"
        )
    claimed = await checkpoints.load_checkpoint(id)
    if claimed is None:  # a claim just succeeded: the row is there
        raise LookupError(f"no durable run is stored under {id!r}")
    state = claimed.state
    if state.get("version") != STATE_VERSION:
        raise ValueError(
            f"the checkpoint of {id!r} has version {state.get('version')!r}; "
            f"this release reads {STATE_VERSION}"
        )
    base = RunResult.from_json(state["run"])
    run = _Run(
        toolkit=toolkit,
        messages=list(base.messages),
        records=list(base.tool_calls),
        usage=dict(base.usage),
        turns=base.turns,
        text=base.text,
    )
    run.checkpoint = cp
    cp.load(state)
    if bind is not None:
        bind(cp)

    async def body() -> None:
        calls_state = state.get("calls")
        if calls_state is not None:
            if not calls_state:  # the model's final answer was saved: nothing left
                run.status = "done"
                return
            calls = [_Call(**c) for c in calls_state]
            known = _known_outcomes(id, calls, state.get("results") or {}, toolkit, policy)
            await client._turn(run, calls, run.turns - 1, "", known=known)
            if run.suspended:
                run.status, run.text = "pending", run.suspended[0].request.prompt
                return
            await cp.step(run)
        await client._loop(run)

    return await _drive(client, cp, run, body(), cancel)


def _known_outcomes(
    id: str,
    calls: list[_Call],
    results: dict[str, Any],
    toolkit: Toolkit,
    policy: Callable[[InDoubtCall], ToolResult | None],
) -> list[_Outcome | None]:
    """Each call's outcome as the checkpoint knows it; ``None``: run it (again)."""
    known: list[_Outcome | None] = []
    for i, call in enumerate(calls):
        done = results.get(str(i))
        if done is not None and "output" in done and not done.get("suspended"):
            known.append(_Outcome(ToolResult(done["output"], bool(done["is_error"])), call.args))
        elif done is not None and isinstance(done.get("resume"), dict) and call.error is None:
            # Not in doubt: the call saved how to pick its work up (an MCP task id);
            # run it again and it resumes that work instead of starting it anew.
            known.append(None)
        elif done is not None and done.get("started") and call.error is None:
            tool = toolkit.get(call.name)
            idempotent = tool is not None and tool.hints is not None and tool.hints.idempotent
            decided = policy(InDoubtCall(id, call.id, call.name, call.args, idempotent))
            known.append(None if decided is None else _Outcome(decided, call.args))
        else:
            # It never started, suspended (asked for an answer, did nothing) or could
            # not run (bad arguments): running it now is what the first run would do.
            known.append(None)
    return known


async def orphaned_runs(store: ConversationStore, limit: int) -> list[str]:
    """See :meth:`Client.orphaned_runs`."""
    return await _store_of(store).orphaned_runs(limit)
