"""Typed run events (``loop/_events.py``): their order for a turn with tool calls, a
consumer that stops reading holding the run where it is (size-0 channel), and a failing
run's ``RunFailed``."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from toolnexus_trio import (
    Answer,
    InMemoryConversationStore,
    Request,
    ToolContext,
    Toolkit,
    ToolResult,
    pending,
    tool,
)
from toolnexus_trio.loop import (
    AlreadyAnswered,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    RunEvent,
    RunFailed,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
    answer_events,
    create_in_process_client,
    stream_events,
)

ran: list[str] = []


@tool
async def note(text: str) -> str:
    """Write *text* down."""
    ran.append(text)
    return f"noted {text}"


async def _two_turns(request: GenerateRequest) -> InProcessResponse:
    if request.turn == 0:
        calls = [InProcessToolCall("c1", "note", {"text": "a"}),
                 InProcessToolCall("c2", "note", {"text": "b"})]  # fmt: skip
        return InProcessResponse(content="", tool_calls=calls)
    return InProcessResponse(content="done")


async def test_events_of_a_run_with_two_tool_calls() -> None:
    ran.clear()
    client = create_in_process_client(InProcessOptions(model="m", generate=_two_turns))
    seen: list[RunEvent] = []

    async def send(event: RunEvent) -> None:
        seen.append(event)

    result = await stream_events(client, "go", send, Toolkit([note]))
    assert result.status == "done"
    kinds = [type(e).__name__ for e in seen]
    assert kinds[:2] == ["RunStarted", "TurnStarted"]
    assert seen[0] == RunStarted("root", "go")
    starts = [e for e in seen if isinstance(e, ToolCallStarted)]
    assert [(e.id, e.name, e.arguments) for e in starts] == [
        ("c1", "note", '{"text":"a"}'),
        ("c2", "note", '{"text":"b"}'),
    ]
    finished = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert [(e.id, e.output, e.outcome) for e in finished] == [
        ("c1", "noted a", "result"),
        ("c2", "noted b", "result"),
    ]
    # Turn 0 ends before its results are told; turn 1 is the answer.
    assert seen.index(TurnFinished("root", 0)) < seen.index(finished[0])
    assert seen.index(TurnStarted("root", 1)) < seen.index(TextDelta("root", "done"))
    assert isinstance(seen[-2], Usage) and isinstance(seen[-1], RunFinished)
    assert seen[-1].status == "done" and seen[-1].text == "done"


async def test_a_consumer_that_stops_reading_holds_the_run() -> None:
    ran.clear()
    client = create_in_process_client(InProcessOptions(model="m", generate=_two_turns))
    send, receive = trio.open_memory_channel[RunEvent](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream_events, client, "go", send.send, Toolkit([note]))
        kinds = []
        while True:
            event = await receive.receive()
            kinds.append(type(event).__name__)
            if isinstance(event, ToolCallStarted):
                break
        # Not reading: the run waits at its next event; no tool has run, nothing queued.
        await trio.testing.wait_all_tasks_blocked()
        assert ran == []
        assert receive.statistics().tasks_waiting_send == 1
        async for event in receive:
            if isinstance(event, RunFinished):
                break
    assert sorted(ran) == ["a", "b"]  # concurrent calls: either order


async def test_a_failing_run_sends_run_failed() -> None:
    async def broken(request: GenerateRequest) -> Any:
        raise RuntimeError("model down")

    client = create_in_process_client(InProcessOptions(model="m", generate=broken))
    seen: list[RunEvent] = []

    async def send(event: RunEvent) -> None:
        seen.append(event)

    with pytest.raises(Exception, match="model down"):
        await stream_events(client, "go", send)
    assert seen == [RunStarted("root", "go"), RunFailed("root", seen[-1].message)]
    assert "model down" in seen[-1].message


@pytest.mark.parametrize("style", ["openai", "anthropic", "responses"])
async def test_tool_arguments_stream_as_the_provider_streams_them(style: str) -> None:
    from toolnexus_trio.loop import ToolCallArgs
    from toolnexus_trio.models import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    ran.clear()
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": "note", "arguments": {"text": "first"}, "id": "c1"},
                {"name": "note", "arguments": {"text": "second"}, "id": "c2"},
            ]
        },
        {"text": "noted both"},
    ]
    seen: list[RunEvent] = []

    async def send(event: RunEvent) -> None:
        seen.append(event)

    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            options = ClientOptions(base_url=provider.base_url, style=style, model="m")
            async with create_client(options) as client:
                result = await stream_events(client, "go", send, Toolkit([note]))
    assert result.status == "done" and sorted(ran) == ["first", "second"]
    pieces: dict[str, list[str]] = {}
    for event in seen:
        if isinstance(event, ToolCallArgs):
            assert event.name == "note"
            pieces.setdefault(event.id, []).append(event.delta)
    assert {k: len(v) > 1 for k, v in pieces.items()} == {"c1": True, "c2": True}
    started = {e.id: e for e in seen if isinstance(e, ToolCallStarted)}
    for call, parts in pieces.items():
        joined = json.loads("".join(parts))
        assert joined == json.loads(started[call].arguments)
        # Every fragment came before the call started (and so before it ran).
        last = max(i for i, e in enumerate(seen) if isinstance(e, ToolCallArgs) and e.id == call)
        assert last < seen.index(started[call])
    assert isinstance(seen[1], TurnStarted)  # the fragments open the turn


async def test_the_spec_8_stream_carries_no_argument_fragments() -> None:
    from toolnexus_trio.models import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "note", "arguments": {"text": "x"}, "id": "c1"}]},
        {"text": "ok"},
    ]
    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            options = ClientOptions(base_url=provider.base_url, style="openai", model="m")
            async with (
                create_client(options) as client,
                client.stream("go", Toolkit([note])) as events,
            ):
                kinds = [event["type"] async for event in events]
    assert "tool_args_delta" not in kinds
    assert kinds[0] == "tool_call" and kinds[-2:] == ["usage", "done"]


@pytest.mark.parametrize("style", ["anthropic", "responses"])
async def test_reasoning_streams_where_the_provider_streams_it(style: str) -> None:
    from toolnexus_trio.loop import ReasoningDelta
    from toolnexus_trio.models import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    step = {"text": "the answer", "reasoning": "think it through"}
    script: list[dict[str, Any]] = [step, step]
    seen: list[RunEvent] = []

    async def send(event: RunEvent) -> None:
        seen.append(event)

    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            options = ClientOptions(base_url=provider.base_url, style=style, model="m")
            async with create_client(options) as client:
                result = await stream_events(client, "go", send, Toolkit([note]))
                async with client.stream("go again") as events:
                    kinds = [event["type"] async for event in events]
    assert result.text == "the answer"
    thoughts = [e.delta for e in seen if isinstance(e, ReasoningDelta)]
    assert len(thoughts) == 2 and "".join(thoughts) == "think it through"
    first_text = next(i for i, e in enumerate(seen) if isinstance(e, TextDelta))
    last_thought = max(i for i, e in enumerate(seen) if isinstance(e, ReasoningDelta))
    assert isinstance(seen[1], TurnStarted) and last_thought < first_text
    assert "reasoning_delta" not in kinds  # the SPEC §8 stream is as it was


async def test_answer_events_stream_a_stored_pending_runs_continuation() -> None:
    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt=f"launch at {target}?"))
        return ToolResult.ok(f"launched {target}")

    async def model(request: GenerateRequest) -> InProcessResponse:
        if request.turn == 0:
            call = InProcessToolCall("c1", "launch", {"target": "moon"})
            return InProcessResponse(content="", tool_calls=[call])
        return InProcessResponse(content="on its way")

    store = InMemoryConversationStore()
    options = InProcessOptions(model="m", generate=model, store=store)
    toolkit = Toolkit([launch])
    client = create_in_process_client(options)
    halted = await client.ask("go", toolkit, id="t")
    assert halted.status == "pending" and halted.pending is not None
    seen: list[RunEvent] = []

    async def send(event: RunEvent) -> None:
        seen.append(event)

    answer = {halted.pending.id: Answer(halted.pending.id, True)}
    result = await answer_events(client, "t", answer, send, toolkit)
    assert result.text == "on its way"
    assert seen == [
        RunStarted("root", ""),
        ToolCallFinished("root", "c1", "launch", "launched moon", "result"),
        TurnStarted("root", 1),  # the halted run's turns go on
        TextDelta("root", "on its way"),
        TurnFinished("root", 1),
        Usage("root", dict(result.usage)),
        RunFinished("root", "done", "on its way", result),
    ]
    # Taken once: a second answer runs nothing and is told as RunFailed.
    seen.clear()
    with pytest.raises(AlreadyAnswered):
        await answer_events(client, "t", answer, send, toolkit)
    assert [type(e) for e in seen] == [RunStarted, RunFailed]
