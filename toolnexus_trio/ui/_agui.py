"""The AG-UI endpoint: our typed run events, translated to AG-UI 1.0 events over SSE.

Long because a thread's three ways to go on (a new prompt, a live interrupt answered,
a durable one answered at another worker) share its run and event translation here.

One AG-UI thread holds one conversation (its transcript) and at most one live run. A
run is a task in the server's nursery under a cancel scope of its own: the root agent's
loop (:func:`~toolnexus_trio.loop._events.stream_events`), an agent runtime for its
sub-agents (the ``delegate`` tool), every model call, tool and process group inside it.
Its events go through one size-0 channel to the request that is streaming them, so a
slow browser slows the run and nothing is queued.

- A request whose client disconnects cancels the run's scope: everything in it ends.
- An approval (a tool's §10 request) ends the SSE response with ``RUN_FINISHED`` and an
  ``interrupt`` outcome; the run stays parked on it. The client's next request on the
  thread carries ``resume: [{interruptId, status, payload: {approved}}]`` and streams
  the rest of the same run. Unanswered for :attr:`AguiAgent.approval_ttl` seconds, the
  run is cancelled (nobody is there to read it).
- With a *store* (a :class:`~toolnexus_trio.stores.PendingStore`: SQLite or
  PostgreSQL), approvals are durable: the run halts, its pending state is saved under
  the thread id before the client hears of the interrupt, and the ``resume`` may come
  to any worker sharing the store, which answers it with :meth:`Client.answer`
  (take-once: a second answer gets ``RUN_ERROR``) and streams the continuation. A
  sub-agent's approval suspends the sub-agent in the thread's agent tree, kept in the
  same store (:mod:`._scoped`); the root halts on the sub-agent's request, and the
  resume restores the tree and answers it there.
- The agent tree is the AG-UI state: ``STATE_SNAPSHOT`` at the start of each response,
  then ``STATE_DELTA`` (JSON Patch) as sub-agents spawn, run and finish.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

import attrs
import trio

from .._tools import Tool
from .._wire import Answer, Request
from ..agents import AgentRuntime, Budget
from ..loop._events import (
    AgentFinished,
    AgentSpawned,
    AgentStateChanged,
    ApprovalAnswered,
    ApprovalRequested,
    ReasoningDelta,
    RunEvent,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolCallArgs,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
)
from ..loop._records import SuspendedCall
from ..loop._results import Message
from ..models import ClientOptions
from ..stores._base import PendingState, PendingStore
from ._scoped import TreeStore, check_thread
from ._tree import stream_tree

logger = logging.getLogger("toolnexus_trio.ui")

MAX_THREADS: Final = 64
"""Threads kept (their transcripts); the least recently used idle one goes first."""


@attrs.define
class _Run:
    """One live run of a thread."""

    scope: trio.CancelScope
    receive: trio.MemoryReceiveChannel[RunEvent]
    answers: dict[str, tuple[trio.Event, list[Answer]]] = attrs.Factory(dict)
    runtime: AgentRuntime | None = None
    streaming: bool = False

    def opened(self, runtime: AgentRuntime) -> None:  # its sub-agents' (interrupt)
        self.runtime = runtime


@attrs.define
class _Thread:
    history: list[Message] = attrs.Factory(list)
    agents: dict[str, dict[str, Any]] = attrs.Factory(dict)
    run: _Run | None = None


class AguiAgent:
    """The agent an AG-UI endpoint serves: a model (*llm*, the HTTP client's options),
    *tools* for it and for its sub-agents (``helper``, spawned by a ``delegate`` tool
    with *helper_budget*), and what a run may wait for a person: *approval_ttl* seconds
    in this process, or, with *store* (a :class:`~toolnexus_trio.stores.PendingStore`),
    as long as the store keeps it, answered by any worker sharing the store.

    ``await handle(body, send_frame, disconnected)`` is one ``POST /agui``;
    :class:`~toolnexus_trio.ui.UiServing` serves it over HTTP. Run ``await
    nursery.start(agent.run)`` first: the runs live in that nursery.
    """

    def __init__(
        self,
        llm: ClientOptions,
        tools: Sequence[Tool] = (),
        *,
        system_prompt: str | None = None,
        helper_budget: Budget | None = None,
        approval_ttl: float = 600.0,
        store: PendingStore | None = None,
    ) -> None:
        self.llm = llm
        self.tools = list(tools)
        self.system_prompt = system_prompt
        self.helper_budget = helper_budget or Budget(max_turns=20, max_tool_calls=50)
        self.approval_ttl = approval_ttl
        self.store = store
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The nursery of every run; cancelling it ends them all."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def live_runs(self) -> int:
        """How many runs are live (streaming or parked on an approval)."""
        return sum(1 for t in self._threads.values() if t.run is not None)

    def interrupt(self, thread_id: str, agent: str) -> bool:
        """Interrupt *agent* of the thread's live run (``root``: stop the whole run)."""
        thread = self._threads.get(thread_id)
        run = thread.run if thread is not None else None
        if run is None:
            return False
        if agent == "root":
            run.scope.cancel()
            if not run.streaming:  # parked: the thread is free for its next prompt now
                assert thread is not None
                thread.run = None
            return True
        if run.runtime is None:
            return False
        try:
            h = run.runtime.handle(agent)
        except KeyError:
            return False
        run.runtime.interrupt(h)
        return True

    def _thread(self, thread_id: str) -> _Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            idle = [k for k, t in self._threads.items() if t.run is None]
            if len(self._threads) >= MAX_THREADS and idle:
                del self._threads[idle[0]]
            thread = self._threads[thread_id] = _Thread()
        self._threads.move_to_end(thread_id)
        return thread

    # -- one request -------------------------------------------------------------------

    async def frames(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The AG-UI events (camelCase dicts) of one ``POST /agui`` with *body* (a
        ``RunAgentInput``). Leaving the iteration early (the client went away) cancels
        the run, unless it stopped on an approval."""
        thread_id = str(body.get("threadId") or uuid.uuid4())
        run_id = str(body.get("runId") or uuid.uuid4())
        thread = self._thread(thread_id)
        entries = body.get("resume") or []
        resume = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        messages = body.get("messages") or []
        run = thread.run
        yield {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
        durable = self.store is not None and bool(resume) and run is None
        refused = None if durable else _refusal(run, resume)
        if self.store is not None and refused is None:
            refused = check_thread(thread_id)
        if refused is not None:
            yield {"type": "RUN_ERROR", "message": refused}
            return
        if durable:
            # The pending run is in the store, saved here or by another worker.
            answers = {str(e.get("interruptId")): _answer_of(e) for e in resume}
            run = self._start(thread, thread_id, None, answers)
        elif run is None:
            prompt = _last_user_text(messages if isinstance(messages, list) else [])
            if prompt is None:
                yield {"type": "RUN_ERROR", "message": "no user message to answer"}
                return
            run = self._start(thread, thread_id, prompt)
        elif resume:
            for entry in resume:
                slot = run.answers.get(str(entry.get("interruptId")))
                if slot is not None and not slot[1]:
                    slot[1].append(_answer_of(entry))
                    slot[0].set()
        yield {"type": "STATE_SNAPSHOT", "snapshot": {"agents": dict(thread.agents)}}
        translator = _Translator(thread, run, thread_id, run_id)
        run.streaming = True
        parked = False
        try:
            async for event in run.receive:
                for frame in translator.frames(event):
                    yield frame
                if translator.interrupted:
                    parked = True
                    return
            if not translator.finished:  # cancelled: the run ended without a word
                yield {"type": "RUN_ERROR", "message": "run cancelled", "code": "cancelled"}
        finally:
            run.streaming = False
            if not parked:
                run.scope.cancel()

    def _start(
        self,
        thread: _Thread,
        thread_id: str,
        prompt: str | None,
        answers: dict[str, Answer] | None = None,
    ) -> _Run:
        assert self._nursery is not None, "start the agent's service first (nursery.start)"
        # Size 0: the run waits for the request streaming it, so nothing is queued.
        send, receive = trio.open_memory_channel[RunEvent](0)
        run = _Run(trio.CancelScope(), receive)
        thread.run = run
        thread.agents = {"root": {"parent": None, "state": "running", "budget": {}}}
        self._nursery.start_soon(self._drive, thread, thread_id, run, prompt, answers, send)
        return run

    async def _drive(
        self,
        thread: _Thread,
        thread_id: str,
        run: _Run,
        prompt: str | None,
        answers: dict[str, Answer] | None,
        send: trio.MemorySendChannel[RunEvent],
    ) -> None:
        try:
            with run.scope, send:
                if self.store is None:
                    assert prompt is not None
                    await self._body(thread, run, prompt, send)
                else:
                    await self._durable_body(thread_id, run, prompt, answers, send)
        except Exception:
            logger.exception("an AG-UI run failed")  # the client got RUN_ERROR
        finally:
            if thread.run is run:  # a stopped run may have been replaced already
                thread.run = None

    async def _body(
        self,
        thread: _Thread,
        run: _Run,
        prompt: str,
        send: trio.MemorySendChannel[RunEvent],
    ) -> None:
        async def wait_for(agent: str, request: Request) -> Answer:
            # The slot is made by whichever comes first: this, or the translator that
            # tells the client (so an answer can never arrive before its slot).
            done, answers = run.answers.setdefault(request.id, (trio.Event(), []))
            try:
                with trio.move_on_after(self.approval_ttl):
                    await done.wait()
                if not answers:  # nobody came back: nobody reads this run any more
                    run.scope.cancel()
                    await trio.lowlevel.checkpoint()
                return answers[0]
            finally:
                run.answers.pop(request.id, None)

        result = await stream_tree(
            self.llm,
            prompt,
            send.send,
            self.tools,
            wait_for=wait_for,
            history=thread.history or None,
            system_prompt=self.system_prompt,
            helper_budget=self.helper_budget,
            on_runtime=run.opened,
        )
        thread.history = list(result.messages)

    async def _durable_body(
        self,
        thread_id: str,
        run: _Run,
        prompt: str | None,
        answers: dict[str, Answer] | None,
        send: trio.MemorySendChannel[RunEvent],
    ) -> None:
        store = self.store
        assert store is not None

        async def tell(event: RunEvent) -> None:
            # Saved before the client hears of the interrupt: its resume may come to
            # another worker at once. (An answer's own outcome is saved by answer.)
            if (
                isinstance(event, RunFinished)
                and event.agent == "root"
                and answers is None
                and event.result is not None
            ):
                result = event.result
                if result.status == "pending":
                    await store.save_pending(thread_id, result.messages, PendingState.of(result))
                else:
                    await store.save(thread_id, result.messages)
            await send.send(event)

        history = None if answers is not None else await store.get(thread_id)
        # The thread's sub-agents keep their tree in the store too: a sub-agent's
        # approval halts the tree as the root's does, and any worker resumes it.
        await stream_tree(
            attrs.evolve(self.llm, store=store),
            prompt or "",
            tell,
            self.tools,
            history=history or None,
            system_prompt=self.system_prompt,
            helper_budget=self.helper_budget,
            on_runtime=run.opened,
            halt=True,
            answer=(thread_id, answers) if answers is not None else None,
            tree_store=TreeStore(store, thread_id),
        )


def _answer_of(entry: dict[str, Any]) -> Answer:
    """An AG-UI ``resume`` entry as our :class:`Answer`: approved only when resolved
    with ``payload.approved`` true."""
    payload = entry.get("payload") or {}
    ok = entry.get("status") == "resolved" and bool(
        isinstance(payload, dict) and payload.get("approved")
    )
    return Answer(str(entry.get("interruptId")), ok)


def _refusal(run: _Run | None, resume: list[Any]) -> str | None:
    """Why a request cannot go on with the thread's run (``None``: it can)."""
    if run is not None and run.streaming:
        return "a run is already streaming on this thread"
    if run is not None and not resume:
        return "the run on this thread waits for an answer: send resume"
    if run is None and resume:
        return "no run on this thread waits for an answer (it ended or expired)"
    if run is not None:
        ids = {str(e.get("interruptId")) for e in resume}
        if not ids & set(run.answers):
            return "resume names no interrupt this run waits on"
    return None


def _last_user_text(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # AG-UI input content parts: the text ones
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return None


def _asker(call: SuspendedCall) -> str:
    """Who asks in a halted tree: the root, or for a ``delegate`` call its sub-agent,
    named by the ``data.path`` the runtime stamps on the request it relays."""
    path = call.request.data.get("path") if isinstance(call.request.data, dict) else None
    if call.name != "delegate" or not isinstance(path, list) or path[:1] != ["root"]:
        return "root"
    return "/".join(path) if all(isinstance(p, str) for p in path) else "root"


def _pointer(agent: str) -> str:
    return "/agents/" + agent.replace("~", "~0").replace("/", "~1")


class _Translator:
    """Our events to AG-UI's, for one response (its open text message, its tree)."""

    def __init__(self, thread: _Thread, run: _Run, thread_id: str, run_id: str) -> None:
        self.thread = thread
        self.run = run
        self.thread_id = thread_id
        self.run_id = run_id
        self.message: str | None = None
        self.reasoning: str | None = None
        self.interrupted = False
        self.finished = False
        self.steps: list[str] = []
        self.streamed: set[str] = set()  # calls whose arguments came as ToolCallArgs

    def _close_text(self) -> list[dict[str, Any]]:
        frames: list[dict[str, Any]] = []
        if self.message is not None:
            frames.append({"type": "TEXT_MESSAGE_END", "messageId": self.message})
            self.message = None
        if self.reasoning is not None:
            frames.append({"type": "REASONING_MESSAGE_END", "messageId": self.reasoning})
            frames.append({"type": "REASONING_END", "messageId": self.reasoning})
            self.reasoning = None
        return frames

    def _close_all(self) -> list[dict[str, Any]]:
        """Before the response ends: its text, then its open steps (AG-UI's order)."""
        frames = self._close_text()
        frames += [{"type": "STEP_FINISHED", "stepName": name} for name in reversed(self.steps)]
        self.steps.clear()
        return frames

    def _tree(self, agent: str, change: dict[str, Any], add: bool = False) -> dict[str, Any]:
        agents = self.thread.agents
        if add or agent not in agents:
            agents[agent] = change
            return {
                "type": "STATE_DELTA",
                "delta": [{"op": "add", "path": _pointer(agent), "value": change}],
            }
        agents[agent] = {**agents[agent], **change}
        return {
            "type": "STATE_DELTA",
            "delta": [
                {"op": "replace", "path": f"{_pointer(agent)}/{key}", "value": value}
                for key, value in change.items()
            ],
        }

    def _interrupt(self, asks: list[tuple[str, Request]]) -> dict[str, Any]:
        """``RUN_FINISHED`` with the interrupts of *asks* (the agent asking, its request)."""
        interrupts = []
        for who, request in asks:
            show = request.data.get("show") if isinstance(request.data, dict) else None
            interrupts.append(
                {
                    "id": request.id,
                    "reason": request.kind or "approval",
                    "message": request.prompt,
                    "metadata": {"agent": who, "show": show if show is not None else ""},
                    "responseSchema": {
                        "type": "object",
                        "properties": {"approved": {"type": "boolean"}},
                        "required": ["approved"],
                    },
                }
            )
        return {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": {"type": "interrupt", "interrupts": interrupts},
        }

    def frames(self, event: RunEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if isinstance(event, TextDelta):
            if self.message is None:
                out += self._close_text()
                self.message = f"msg-{uuid.uuid4().hex}"
                out.append(
                    {"type": "TEXT_MESSAGE_START", "messageId": self.message, "role": "assistant"}
                )
            if event.delta:
                out.append(
                    {
                        "type": "TEXT_MESSAGE_CONTENT",
                        "messageId": self.message,
                        "delta": event.delta,
                    }
                )
        elif isinstance(event, ReasoningDelta):
            if self.reasoning is None:
                out += self._close_text()
                self.reasoning = f"think-{uuid.uuid4().hex}"
                out.append({"type": "REASONING_START", "messageId": self.reasoning})
                out.append(
                    {
                        "type": "REASONING_MESSAGE_START",
                        "messageId": self.reasoning,
                        "role": "reasoning",
                    }
                )
            out.append(
                {
                    "type": "REASONING_MESSAGE_CONTENT",
                    "messageId": self.reasoning,
                    "delta": event.delta or " ",
                }
            )
        elif isinstance(event, ToolCallArgs):
            if event.id not in self.streamed:
                out += self._close_text()
                self.streamed.add(event.id)
                out.append(
                    {"type": "TOOL_CALL_START", "toolCallId": event.id, "toolCallName": event.name}
                )
            out.append({"type": "TOOL_CALL_ARGS", "toolCallId": event.id, "delta": event.delta})
        elif isinstance(event, ToolCallStarted):
            out += self._close_text()
            if event.id not in self.streamed:  # else they went out as the provider sent them
                out.append(
                    {"type": "TOOL_CALL_START", "toolCallId": event.id, "toolCallName": event.name}
                )
                out.append(
                    {"type": "TOOL_CALL_ARGS", "toolCallId": event.id, "delta": event.arguments}
                )
            out.append({"type": "TOOL_CALL_END", "toolCallId": event.id})
        elif isinstance(event, ToolCallFinished):
            out += self._close_text()
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": f"result-{uuid.uuid4().hex}",
                    "toolCallId": event.id,
                    "content": event.output,
                    "role": "tool",
                }
            )
        elif isinstance(event, TurnStarted):
            name = f"{event.agent} turn {event.turn}"
            self.steps.append(name)
            out.append({"type": "STEP_STARTED", "stepName": name})
        elif isinstance(event, TurnFinished):
            out += self._close_text()
            name = f"{event.agent} turn {event.turn}"
            if name in self.steps:  # a response resumed mid-turn never started it
                self.steps.remove(name)
                out.append({"type": "STEP_FINISHED", "stepName": name})
        elif isinstance(event, AgentSpawned):
            out.append(
                self._tree(
                    event.agent,
                    {
                        "parent": event.parent,
                        "name": event.name,
                        "state": "idle",
                        "budget": dict(event.budget),
                        "tokens": 0,
                        "turns": 0,
                    },
                    add=True,
                )
            )
        elif isinstance(event, AgentStateChanged):
            out.append(self._tree(event.agent, {"state": event.state}))
        elif isinstance(event, AgentFinished):
            out.append(
                self._tree(
                    event.agent,
                    {"state": event.status, "tokens": event.tokens, "turns": event.turns},
                )
            )
        elif isinstance(event, ApprovalRequested):
            out += self._close_all()
            # Its answer's slot exists before the client can be told of it.
            self.run.answers.setdefault(event.request.id, (trio.Event(), []))
            out.append(self._interrupt([(event.agent, event.request)]))
            self.interrupted = True
        elif (
            isinstance(event, RunFinished)
            and event.agent == "root"
            and event.status == "pending"
            and event.result is not None
            and event.result.suspended
        ):  # durable: the run halted, its pending state is in the store
            out += self._close_all()
            self.thread.agents["root"]["state"] = "suspended"
            out.append(self._tree("root", {"state": "suspended"}))
            out.append(self._interrupt([(_asker(s), s.request) for s in event.result.suspended]))
            self.finished = True
        elif isinstance(event, Usage) and event.agent == "root":
            out.append(self._tree("root", {"tokens": int(event.usage.get("total_tokens", 0))}))
        elif isinstance(event, ApprovalAnswered):
            pass  # the answer came in this response's request
        elif isinstance(event, RunFinished) and event.agent == "root":
            out += self._close_all()
            self.thread.agents["root"]["state"] = event.status
            out.append(self._tree("root", {"state": event.status}))
            out.append(
                {
                    "type": "RUN_FINISHED",
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                    "result": {"status": event.status, "text": event.text},
                }
            )
            self.finished = True
        elif isinstance(event, RunFailed) and event.agent == "root":
            out += self._close_all()
            out.append({"type": "RUN_ERROR", "message": event.message})
            self.finished = True
        return out
