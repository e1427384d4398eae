"""Conversation memory (SPEC §8): ``ask`` over a ``ConversationStore``, and ``Conversation``.

Every test drives the real loop through ``create_in_process_client`` with a scripted
``generate``; the stores are the real in-memory store or a user-written one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from helpers import TaskCensus

from toolnexus_trio import (
    BuiltinsConfig,
    Client,
    GenerateError,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
)
from toolnexus_trio.loop._conversation import _THREAD_LOCKS, Conversation, ask
from toolnexus_trio.stores import ConversationStore, InMemoryConversationStore

Message = dict[str, Any]


class Model:
    """A scripted model: answers ``re: <last user text>`` unless told otherwise.

    ``seen`` keeps a snapshot of each request's (role, content) pairs; ``gate``, when
    set, makes the next call wait for it; ``fail`` makes calls raise.
    """

    def __init__(self, *replies: InProcessResponse) -> None:
        self.replies = list(replies)
        self.seen: list[list[tuple[str, Any]]] = []
        self.gate: trio.Event | None = None
        self.entered = trio.Event()
        self.fail = False

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        self.seen.append([(m["role"], m.get("content")) for m in request.messages])
        self.entered.set()
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        if self.fail:
            raise RuntimeError("model down")
        if self.replies:
            return self.replies.pop(0)
        last_user = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        return InProcessResponse(content=f"re: {last_user}")


def client_of(model: Model, **kw: Any) -> Client:
    return create_in_process_client(InProcessOptions(model="m", generate=model, **kw))


def talk(messages: Sequence[Message]) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in messages]


async def toolkit_of(*tools: Any) -> Toolkit:
    return await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off()))


class RecordingStore:
    """A user-written store (a plain dict) that records every call."""

    def __init__(self) -> None:
        self.data: dict[str, list[Message]] = {}
        self.calls: list[tuple[str, str]] = []

    async def get(self, id: str) -> list[Message] | None:
        self.calls.append(("get", id))
        await trio.lowlevel.checkpoint()
        found = self.data.get(id)
        return None if found is None else list(found)

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        self.calls.append(("save", id))
        await trio.lowlevel.checkpoint()
        self.data[id] = list(messages)


# ask ------------------------------------------------------------------------------------


async def test_ask_with_an_id_continues_the_thread_and_ids_are_separate() -> None:
    model = Model()
    client = client_of(model, system_prompt="be brief")
    store = InMemoryConversationStore()
    first = await ask(client, store, "hi", id="a")
    second = await ask(client, store, "again", id="a")
    other = await ask(client, store, "hello", id="b")
    assert (first.text, second.text, other.text) == ("re: hi", "re: again", "re: hello")
    assert model.seen[1] == [("system", "be brief"), ("user", "hi"), ("assistant", "re: hi"), ("user", "again")]  # fmt: skip
    assert model.seen[2] == [("system", "be brief"), ("user", "hello")]
    saved = await store.get("a")
    assert saved is not None and talk(saved) == [*model.seen[1], ("assistant", "re: again")]
    assert saved == second.messages


async def test_ask_without_an_id_is_stateless_and_never_touches_the_store() -> None:
    model = Model()
    client = client_of(model)
    store = RecordingStore()
    await ask(client, store, "one")
    result = await ask(client, store, "two")
    assert model.seen[1] == [("user", "two")]
    assert talk(result.messages) == [("user", "two"), ("assistant", "re: two")]
    assert store.calls == []


async def test_a_user_written_store_is_read_then_written_once_per_ask() -> None:
    store = RecordingStore()
    assert isinstance(store, ConversationStore)
    assert isinstance(InMemoryConversationStore(), ConversationStore)
    await ask(client_of(Model()), store, "hi", id="t")
    assert store.calls == [("get", "t"), ("save", "t")]
    assert talk(store.data["t"]) == [("user", "hi"), ("assistant", "re: hi")]


async def test_a_thread_with_tool_calls_is_saved_balanced_and_the_toolkit_is_used() -> None:
    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["a"] + args["b"])

    model = Model(InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})]))  # fmt: skip
    store = InMemoryConversationStore()
    toolkit = await toolkit_of(define_tool("add", "", None, add))
    result = await ask(client_of(model), store, "sum", toolkit, id="t")
    saved = await store.get("t")
    assert saved is not None
    assert [m["role"] for m in saved] == ["user", "assistant", "tool", "assistant"]
    assert saved[2] == {"role": "tool", "tool_call_id": "c1", "content": "3"}
    assert result.tool_call_count == 1


async def test_a_suspended_run_saves_its_balanced_transcript() -> None:
    async def confirm(args: dict[str, Any], ctx: ToolContext) -> Any:
        return pending(Request(kind="confirm", prompt="sure?"))

    model = Model(InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name="confirm")]))
    store = InMemoryConversationStore()
    toolkit = await toolkit_of(define_tool("confirm", "", None, confirm))
    result = await ask(client_of(model), store, "go", toolkit, id="t")
    assert result.status == "pending"
    saved = await store.get("t")
    assert saved == result.messages
    assert talk(saved)[-1] == ("tool", "sure?")  # the placeholder answers the call


async def test_a_run_that_raises_saves_nothing_and_a_retry_starts_clean() -> None:
    model = Model()
    client = client_of(model)
    store = InMemoryConversationStore()
    await ask(client, store, "hi", id="t")
    model.fail = True
    with pytest.raises(GenerateError):
        await ask(client, store, "lost", id="t")
    saved = await store.get("t")
    assert saved is not None and talk(saved) == [("user", "hi"), ("assistant", "re: hi")]
    model.fail = False
    await ask(client, store, "retry", id="t")
    assert model.seen[-1] == [("user", "hi"), ("assistant", "re: hi"), ("user", "retry")]


async def test_a_cancelled_ask_saves_nothing_and_frees_the_thread(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = Model()
    client = client_of(model)
    store = InMemoryConversationStore()
    model.gate = trio.Event()  # never set: the model call hangs until cancelled
    with TaskCensus() as census, trio.move_on_after(5) as scope:
        await ask(client, store, "hangs", id="t")
    assert scope.cancelled_caught
    census.assert_no_new_tasks()
    assert await store.get("t") is None
    with trio.fail_after(1):  # the thread's lock was released
        await ask(client, store, "next", id="t")
    assert model.seen[-1] == [("user", "next")]


# ask with on_text ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_on_text_gets_the_deltas_and_ask_still_returns_the_result(kind: str) -> None:
    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        return "3"

    deltas: list[str] = []

    def sync_cb(delta: str) -> None:
        deltas.append(delta)

    async def async_cb(delta: str) -> None:
        await trio.lowlevel.checkpoint()
        deltas.append(delta)

    model = Model(InProcessResponse(content="thinking", tool_calls=[InProcessToolCall(name="add")]))
    store = InMemoryConversationStore()
    toolkit = await toolkit_of(define_tool("add", "", None, add))
    on_text = sync_cb if kind == "sync" else async_cb
    result = await ask(client_of(model), store, "sum", toolkit, id="t", on_text=on_text)
    assert deltas == ["thinking", "re: sum"]  # the text of each model message, in order
    assert result.text == "re: sum" and result.status == "done"
    assert await store.get("t") == result.messages
    again = await ask(client_of(model), store, "more", id="t", on_text=on_text)
    assert [m["role"] for m in again.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]  # fmt: skip


class Spy:
    """A real client that records which entry point ``ask`` used."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.used: list[str] = []

    async def run(self, prompt: str, toolkit: Toolkit | None = None, *, history: Any = None) -> Any:
        self.used.append("run")
        return await self.client.run(prompt, toolkit, history=history)

    def stream(self, prompt: str, toolkit: Toolkit | None = None, *, history: Any = None) -> Any:
        self.used.append("stream")
        return self.client.stream(prompt, toolkit, history=history)


async def test_ask_streams_only_when_given_on_text() -> None:
    spy = Spy(client_of(Model()))
    store = InMemoryConversationStore()
    await ask(spy, store, "a", id="t")
    await ask(spy, store, "b", id="t", on_text=lambda delta: None)
    await ask(spy, store, "c")
    await ask(spy, store, "d", on_text=lambda delta: None)
    assert spy.used == ["run", "stream", "run", "stream"]


async def test_a_sync_on_text_returning_an_awaitable_is_awaited() -> None:
    seen: list[str] = []

    async def record(delta: str) -> None:
        seen.append(delta)

    def on_text(delta: str) -> Awaitable[None]:
        return record(delta)

    await ask(client_of(Model()), InMemoryConversationStore(), "x", on_text=on_text)
    assert seen == ["re: x"]


async def test_an_on_text_that_raises_ends_the_run_and_saves_nothing() -> None:
    def on_text(delta: str) -> None:
        raise ValueError("terminal closed")

    store = InMemoryConversationStore()
    with TaskCensus() as census, pytest.raises(ValueError, match="terminal closed"):
        await ask(client_of(Model()), store, "x", id="t", on_text=on_text)
    census.assert_no_new_tasks()
    assert await store.get("t") is None


# Concurrent turns on one thread ---------------------------------------------------------


async def test_concurrent_asks_on_one_id_run_in_turn_and_both_are_kept() -> None:
    model = Model()
    client = client_of(model)
    store = InMemoryConversationStore()
    gate = model.gate = trio.Event()
    results: dict[str, Any] = {}

    async def one(prompt: str) -> None:
        results[prompt] = await ask(client, store, prompt, id="t")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "first")
            await model.entered.wait()  # the first turn is inside the model call
            nursery.start_soon(one, "second")
            await trio.testing.wait_all_tasks_blocked()
            assert len(model.seen) == 1  # the second turn waits for the first
            gate.set()
    assert model.seen[1] == [("user", "first"), ("assistant", "re: first"), ("user", "second")]
    saved = await store.get("t")
    assert saved is not None and talk(saved) == [*model.seen[1], ("assistant", "re: second")]
    assert _THREAD_LOCKS.get() == {}  # no lock outlives its turns


async def test_asks_on_different_ids_run_concurrently() -> None:
    arrived = {"a": trio.Event(), "b": trio.Event()}

    async def generate(request: GenerateRequest) -> InProcessResponse:
        me = request.messages[-1]["content"]
        arrived[me].set()
        await arrived["b" if me == "a" else "a"].wait()  # deadlocks unless both overlap
        return InProcessResponse(content="ok")

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    store = InMemoryConversationStore()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(ask, client, store, "a", id="a"))
            nursery.start_soon(partial(ask, client, store, "b", id="b"))


async def test_the_same_id_in_two_stores_is_two_threads() -> None:
    model = Model()
    gate = model.gate = trio.Event()
    client = client_of(model)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(ask, client, InMemoryConversationStore(), "a", id="t"))
            await model.entered.wait()
            # A different store: not serialized behind the blocked turn.
            await ask(client, InMemoryConversationStore(), "b", id="t")
            gate.set()


# InMemoryConversationStore --------------------------------------------------------------


async def test_the_in_memory_store_keeps_copies() -> None:
    store = InMemoryConversationStore()
    given = [{"role": "user", "content": "a"}]
    await store.save("t", given)
    given.append({"role": "user", "content": "b"})
    got = await store.get("t")
    assert got == [{"role": "user", "content": "a"}]
    got.clear()
    assert await store.get("t") == [{"role": "user", "content": "a"}]
    assert await store.get("missing") is None


async def test_the_in_memory_store_forgets_the_least_recently_used_thread_past_its_bound() -> None:
    store = InMemoryConversationStore(max_conversations=2)
    await store.save("a", [])
    await store.save("b", [])
    assert await store.get("a") == []  # touching "a" makes "b" the oldest
    await store.save("c", [])
    assert len(store) == 2
    assert await store.get("b") is None
    assert await store.get("a") == [] and await store.get("c") == []
    assert InMemoryConversationStore(max_conversations=None).max_conversations is None
    with pytest.raises(ValueError):
        InMemoryConversationStore(max_conversations=0)


# Conversation ---------------------------------------------------------------------------


async def test_a_conversation_keeps_history_across_sends_and_resets() -> None:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> str:
        return "echoed"

    model = Model(InProcessResponse(tool_calls=[InProcessToolCall(name="echo")]))
    convo = Conversation(client_of(model), await toolkit_of(define_tool("echo", "", None, echo)))
    first = await convo.send("one")
    assert first.tool_call_count == 1
    second = await convo.send("two")
    assert model.seen[-1][-1] == ("user", "two") and ("user", "one") in model.seen[-1]
    assert [m["role"] for m in convo.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]  # fmt: skip
    convo.messages.clear()  # a copy
    second.messages.clear()  # the result's list is not the conversation's
    assert len(convo.messages) == 6
    convo.reset()
    assert convo.messages == []
    await convo.send("three")
    assert model.seen[-1] == [("user", "three")]


async def test_a_failed_send_leaves_the_conversation_as_it_was() -> None:
    model = Model()
    convo = Conversation(client_of(model))
    await convo.send("one")
    model.fail = True
    with pytest.raises(GenerateError):
        await convo.send("lost")
    assert talk(convo.messages) == [("user", "one"), ("assistant", "re: one")]


async def test_concurrent_sends_run_in_turn() -> None:
    model = Model()
    convo = Conversation(client_of(model))
    gate = model.gate = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(convo.send, "first")
            await model.entered.wait()
            nursery.start_soon(convo.send, "second")
            await trio.testing.wait_all_tasks_blocked()
            assert len(model.seen) == 1
            gate.set()
    assert talk(convo.messages) == [("user", "first"), ("assistant", "re: first"), ("user", "second"), ("assistant", "re: second")]  # fmt: skip


async def test_a_reset_during_a_send_is_not_undone_by_it() -> None:
    model = Model()
    convo = Conversation(client_of(model))
    gate = model.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(convo.send, "first")
        await model.entered.wait()
        convo.reset()
        gate.set()
    assert convo.messages == []
