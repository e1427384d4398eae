"""The HTTP client runs the one loop: suspension, resume, hooks, conversations, metrics."""

from __future__ import annotations

from typing import Any

import pytest
from http_helpers import STYLES, adder, assert_balanced, calls_step, served

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    Hooks,
    InMemoryConversationStore,
    Request,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_toolkit,
    empty_schema,
    pending,
)


def approval_tool() -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            return pending(Request(id="req-1", kind="approval", prompt="Deploy?"))
        return ToolResult.ok(f"deployed ({ctx.answer.data})")

    return Tool("deploy", "Deploy.", empty_schema(), ToolSource.CUSTOM, execute)


@pytest.mark.parametrize("style", STYLES)
async def test_suspension_halts_and_resume_continues(style: str) -> None:
    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[approval_tool()], builtins=BuiltinsConfig.off())
    )
    script = [{"tool_calls": [{"name": "deploy", "id": "d1"}]}, {"text": "deployed it"}]
    async with served(style, script) as (provider, client):
        halted = await client.run("ship", toolkit)
        assert halted.status == "pending" and halted.pending is not None
        assert halted.pending.prompt == "Deploy?"
        assert_balanced(halted.messages)
        done = await client.resume(halted, [Answer("req-1", True, {"by": "ann"})])
    assert done.status == "done" and done.text == "deployed it"
    assert done.tool_calls[0].output == "deployed ({'by': 'ann'})"
    # The provider saw the answered result in place of the placeholder, no new user turn.
    sent = provider.requests[1].json["messages"]
    results = (
        [m for m in sent if m["role"] == "tool"] if style == "openai" else list(sent[-1]["content"])
    )
    assert len(results) == 1 and "deployed ({'by': 'ann'})" in str(results[0])
    assert sent[-1]["role"] == ("tool" if style == "openai" else "user")


@pytest.mark.parametrize("style", STYLES)
async def test_wait_for_resolves_inline(style: str) -> None:
    async def wait_for(request: Request) -> Answer:
        return Answer(request.id, True, "ok")

    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[approval_tool()], builtins=BuiltinsConfig.off())
    )
    script = [{"tool_calls": [{"name": "deploy"}]}, {"text": "done"}]
    async with served(style, script, wait_for=wait_for) as (_, client):
        result = await client.run("ship", toolkit)
    assert result.status == "done" and result.tool_calls[0].output == "deployed (ok)"


@pytest.mark.parametrize("style", STYLES)
async def test_hooks_see_and_shape_every_turn(style: str) -> None:
    seen: list[tuple[str, Any]] = []

    def before_llm(event: dict[str, Any]) -> dict[str, Any] | None:
        seen.append(
            ("before_llm", [t.get("name") or t["function"]["name"] for t in event["tools"]])
        )
        if event["turn"] == 1:
            # Compaction: drop everything but the last message... and add a note.
            return {"messages": [{"role": "user", "content": "compacted"}, *event["messages"][-2:]]}
        return None

    async def after_llm(event: dict[str, Any]) -> None:
        seen.append(("after_llm", event["response"]["usage"]))

    def before_tool(event: dict[str, Any]) -> dict[str, Any] | None:
        if event["args"] == {"a": 6, "b": 6}:
            return {"result": ToolResult.error("denied by policy")}
        return {"args": {"a": event["args"]["a"], "b": 100}}

    def after_tool(event: dict[str, Any]) -> dict[str, Any]:
        return {"result": ToolResult.ok(event["result"].output + "!")}

    hooks = Hooks(before_llm, after_llm, before_tool, after_tool)
    script = [calls_step((1, 2), (6, 6)), {"text": "fine"}]
    async with served(style, script, hooks=hooks) as (provider, client):
        result = await client.run("go", await adder())
    assert [r.output for r in result.tool_calls] == ["101!", "denied by policy"]
    assert seen[0] == ("before_llm", ["add"])
    usage_key = "prompt_tokens" if style == "openai" else "input_tokens"
    assert seen[1][0] == "after_llm" and seen[1][1][usage_key] == 10
    # The compacted transcript is what the second request carried.
    sent = provider.requests[1].json["messages"]
    assert sent[0] == {"role": "user", "content": "compacted"}


@pytest.mark.parametrize("style", STYLES)
async def test_ask_keeps_conversations_by_id(style: str) -> None:
    store = InMemoryConversationStore()
    script = [{"text": "hello Ann"}, {"text": "you are Ann"}, {"text": "stateless"}]
    async with served(style, script, store=store) as (provider, client):
        assert client.store is store
        await client.ask("I am Ann", id="t1")
        second = await client.ask("who am I?", id="t1")
        third = await client.ask("one-shot")
    assert second.text == "you are Ann"
    sent = provider.requests[1].json["messages"]
    assert [m["content"] for m in sent] == ["I am Ann", "hello Ann", "who am I?"]
    assert provider.requests[2].json["messages"] == [{"role": "user", "content": "one-shot"}]
    saved = await store.get("t1")
    assert saved is not None and len(saved) == 4
    assert await store.get("one-shot") is None and third.text == "stateless"
    assert all("stream" not in r.json for r in provider.requests)


@pytest.mark.parametrize("style", STYLES)
async def test_ask_with_on_text_streams(style: str) -> None:
    deltas: list[str] = []

    async def on_text(delta: str) -> None:
        deltas.append(delta)

    async with served(style, [{"text": "one two three"}]) as (provider, client):
        result = await client.ask("count", on_text=on_text)
    assert deltas == ["one ", "two ", "three"] and result.text == "one two three"
    assert provider.requests[0].json["stream"] is True


async def test_default_store_and_conversation() -> None:
    script = [{"text": "a"}, {"text": "b"}, {"text": "c"}]
    async with served("anthropic", script) as (provider, client):
        assert isinstance(client.store, InMemoryConversationStore)
        convo = client.conversation()
        await convo.send("one")
        await convo.send("two")
        assert [m["content"] for m in convo.messages] == ["one", "a", "two", "b"]
        convo.reset()
        await convo.send("three")
    assert provider.requests[2].json["messages"] == [{"role": "user", "content": "three"}]


async def test_metrics_count_every_call_without_on_metric() -> None:
    script = [calls_step((1, 1)), {"text": "ok"}, {"status": 400}]
    async with served("openai", script, retries=0) as (_, client):
        await client.run("go", await adder())
        with pytest.raises(Exception, match="HTTP 400"):
            await client.run("again")
        text = client.metrics()
    assert 'toolnexus_llm_requests_total{model="m",status="ok"} 2' in text
    assert 'toolnexus_llm_requests_total{model="m",status="error"} 1' in text
    assert text.endswith("\n")


async def test_on_metric_gets_llm_tool_and_run_events() -> None:
    events: list[dict[str, Any]] = []
    async with served(
        "anthropic", [calls_step((2, 3)), {"text": "5"}], on_metric=events.append
    ) as (
        _,
        client,
    ):
        await client.run("go", await adder())
    kinds = [e["event"] for e in events]
    assert kinds == ["llm", "tool", "llm", "run"]
    assert events[0]["prompt_tokens"] == 10 and events[0]["completion_tokens"] == 5
    assert events[1]["tool"] == "add" and events[1]["is_error"] is False
    assert events[3]["total_tokens"] == 30
