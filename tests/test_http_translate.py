"""SPEC §11 translate: OpenAI shapes in, one provider call, OpenAI shapes out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from http_helpers import STYLES, adder, served

from toolnexus_trio import (
    CancelToken,
    GenerateError,
    GenerateRequest,
    Hooks,
    InProcessOptions,
    TranslatedToolCall,
    create_in_process_client,
)

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "old system"},
    {"role": "developer", "content": "be terse"},
    {"role": "user", "content": [{"type": "text", "text": "add "}, {"type": "text", "text": "both"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
        {"id": "t2", "type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}},
    ]},
    {"role": "tool", "tool_call_id": "t1", "content": "3"},
    {"role": "tool", "tool_call_id": "t2", "content": "7"},
]  # fmt: skip
WEATHER = {"type": "function", "function": {"name": "weather", "description": "W.",
                                             "parameters": {"type": "object"}}}  # fmt: skip


@pytest.mark.parametrize("style", STYLES)
async def test_translate_calls_once_and_executes_nothing(style: str) -> None:
    ran: list[str] = []
    hooks = Hooks(
        before_llm=lambda e: ran.append("before_llm"),
        after_llm=lambda e: ran.append("after_llm"),
        before_tool=lambda e: ran.append("before_tool"),
        after_tool=lambda e: ran.append("after_tool"),
    )
    script = [{"text": "calling", "finish_reason": "stop" if style == "openai" else "end_turn",
               "tool_calls": [{"name": "add", "arguments": {"a": 5, "b": 6}, "id": "x1"},
                              {"name": "weather", "arguments": {}, "id": "x2"}]}]  # fmt: skip
    async with served(style, script, hooks=hooks) as (provider, client):
        result = await client.translate(
            HISTORY, tools=[WEATHER], toolkit=await adder(), system="new system",
            tool_choice="required", max_tokens=99,
        )  # fmt: skip
    assert ran == ["before_llm", "after_llm"]
    assert len(provider.requests) == 1
    # Any tool call makes finish_reason "tool_calls", whatever the provider said.
    assert result.finish_reason == "tool_calls" and result.text == "calling"
    assert result.tool_calls == (
        TranslatedToolCall("x1", "add", '{"a":5,"b":6}'),
        TranslatedToolCall("x2", "weather", "{}"),
    )
    assert result.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert result.model == "m" and isinstance(result.raw, dict)
    body = provider.requests[0].json
    if style == "openai":
        assert [t["function"]["name"] for t in body["tools"]] == ["add", "weather"]
        assert body["tool_choice"] == "required" and body["max_tokens"] == 99
        assert body["messages"][0] == {"role": "system", "content": "new system"}
        assert all(m["role"] != "developer" for m in body["messages"])
        # Object arguments were re-encoded as the JSON string the wire wants.
        calls = body["messages"][2]["tool_calls"]
        assert [c["function"]["arguments"] for c in calls] == ['{"a":1,"b":2}', '{"a":3,"b":4}']
    else:
        assert [t["name"] for t in body["tools"]] == ["add", "weather"]
        assert body["tools"][1] == {"name": "weather", "description": "W.",
                                    "input_schema": {"type": "object"}}  # fmt: skip
        assert body["tool_choice"] == {"type": "any"} and body["max_tokens"] == 99
        assert body["system"] == "new system"
        user, assistant, results = body["messages"]
        assert user == {"role": "user", "content": "add both"}
        assert [b["input"] for b in assistant["content"]] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
        # Consecutive tool results merge into one user turn keyed by tool_use_id.
        assert results == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "3"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "7"}]}  # fmt: skip


async def test_anthropic_hoists_system_messages_without_an_override() -> None:
    async with served("anthropic", [{"text": "ok"}]) as (provider, client):
        await client.translate(HISTORY[:3])
    body = provider.requests[0].json
    assert body["system"] == "old system\n\nbe terse" and "tools" not in body


@pytest.mark.parametrize(
    ("style", "reason", "expected"),
    [("openai", "length", "length"), ("openai", "content_filter", "content_filter"),
     ("openai", "stop", "stop"), ("openai", "whatever", "stop"),
     ("anthropic", "max_tokens", "length"), ("anthropic", "refusal", "content_filter"),
     ("anthropic", "end_turn", "stop"), ("anthropic", "stop_sequence", "stop")],
)  # fmt: skip
async def test_finish_reason_mapping(style: str, reason: str, expected: str) -> None:
    async with served(style, [{"text": "t", "finish_reason": reason}]) as (_, client):
        result = await client.translate([{"role": "user", "content": "hi"}])
    assert result.finish_reason == expected and result.tool_calls == ()


@pytest.mark.parametrize(
    ("choice", "sent"),
    [("auto", {"type": "auto"}), ("none", {"type": "none"}),
     ({"type": "function", "function": {"name": "add"}}, {"type": "tool", "name": "add"})],
)  # fmt: skip
async def test_anthropic_tool_choice(choice: Any, sent: Any) -> None:
    async with served("anthropic", [{"text": "t"}]) as (provider, client):
        await client.translate([{"role": "user", "content": "hi"}], toolkit=await adder(),
                               tool_choice=choice)  # fmt: skip
    assert provider.requests[0].json["tool_choice"] == sent


async def test_translate_errors_and_cancel() -> None:
    async with served("openai", [{"status": 400}], retries=0) as (_, client):
        with pytest.raises(GenerateError, match="HTTP 400"):
            await client.translate([{"role": "user", "content": "hi"}])
        token = CancelToken()
        token.cancel()
        with pytest.raises(GenerateError, match="cancelled"):
            await client.translate([{"role": "user", "content": "hi"}], cancel=token)


async def test_in_process_translate_calls_generate_once() -> None:
    seen: list[GenerateRequest] = []

    async def generate(request: GenerateRequest) -> dict[str, Any]:
        seen.append(request)
        return {"content": "", "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}

    client = create_in_process_client(InProcessOptions(model="local", generate=generate))
    result = await client.translate(HISTORY[:3], toolkit=await adder(), system="sys", max_tokens=5)
    assert len(seen) == 1 and seen[0].max_tokens == 5
    assert seen[0].messages[0] == {"role": "system", "content": "sys"}
    assert [m["role"] for m in seen[0].messages] == ["system", "user"]
    assert seen[0].tools is not None and seen[0].tools[0]["function"]["name"] == "add"
    assert result.finish_reason == "tool_calls"
    assert result.tool_calls == (TranslatedToolCall("call_0", "add", '{"a":1,"b":1}'),)
    assert json.loads(result.tool_calls[0].arguments) == {"a": 1, "b": 1}
