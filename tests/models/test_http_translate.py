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
    # peer (test_multimodal.py): test_tool_exchange_still_survives_translation
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


# -- input from remote callers (issue 17 item 28) ---------------------------------------

USER = {"role": "user", "content": "hi"}
CALL = {"id": "t1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
BAD_INPUT: list[tuple[Any, Any, str]] = [
    ("hello", None, r"translate: messages is a str, expected a list of messages"),
    (None, None, r"translate: messages is null, expected a list of messages"),
    ([USER, "hi"], None, r"translate: messages\[1\] is a str, expected a message object"),
    ([None], None, r"translate: messages\[0\] is null, expected a message object"),
    ([{"content": "hi"}], None, r"messages\[0\]\.role is null, expected a string"),
    ([{"role": "user", "content": ["a"]}], None,
     r"messages\[0\]\.content\[0\] is a str, expected a content part object"),
    ([{"role": "user", "content": [None]}], None,
     r"messages\[0\]\.content\[0\] is null, expected a content part object"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], None,
     r"messages\[0\]\.content\[0\]\.text is a int, expected a string"),
    ([{"role": "user", "content": {"text": "hi"}}], None,
     r"messages\[0\]\.content is a dict, expected a string, null or a list"),
    ([USER, {"role": "assistant", "tool_calls": "add"}], None,
     r"messages\[1\]\.tool_calls is a str, expected a list of tool calls"),
    ([USER, {"role": "assistant", "tool_calls": ["add"]}], None,
     r"messages\[1\]\.tool_calls\[0\] is a str, expected a tool call object"),
    ([USER, {"role": "assistant", "tool_calls": [CALL, None]}], None,
     r"messages\[1\]\.tool_calls\[1\] is null, expected a tool call object"),
    ([USER, {"role": "assistant", "tool_calls": [{"id": "t1", "function": "add"}]}], None,
     r"messages\[1\]\.tool_calls\[0\]\.function is a str, expected an object"),
    ([USER, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}], None,
     r"messages\[1\]\.tool_calls\[0\]\.function\.name is null, expected a string"),
    ([USER, {"role": "assistant",
             "tool_calls": [{"function": {"name": "add", "arguments": [1]}}]}], None,
     r"tool_calls\[0\]\.function\.arguments is a list, expected a JSON string or an object"),
    ([USER, {"role": "tool", "tool_call_id": 7, "content": "3"}], None,
     r"messages\[1\]\.tool_call_id is a int, expected a string"),
    ([USER], "weather", r"translate: tools is a str, expected a list of tools"),
    ([USER], [WEATHER, "weather"], r"translate: tools\[1\] is a str, expected a tool object"),
    ([USER], [None], r"translate: tools\[0\] is null, expected a tool object"),
    ([USER], [{"type": "function", "function": None}], r"tools\[0\]\.function is null"),
    ([USER], [{"type": "function", "function": {"name": 3}}],
     r"tools\[0\]\.function\.name is a int, expected a string"),
]  # fmt: skip


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(("messages", "tools", "message"), BAD_INPUT)
async def test_translate_refuses_input_of_the_wrong_shape_clearly(
    style: str, messages: Any, tools: Any, message: str
) -> None:
    """A string or null where a message, a content part, a tool call or a tool belongs
    raised a bare AttributeError or TypeError from inside a wire style; it is one
    ValueError naming where it is and the shape expected, and nothing is sent."""
    async with served(style, [{"text": "never"}]) as (provider, client):
        with pytest.raises(ValueError, match=message):
            await client.translate(messages, tools=tools)
    assert provider.requests == []


@pytest.mark.parametrize(("messages", "tools", "message"), BAD_INPUT[:6])
async def test_in_process_translate_refuses_the_same_input(
    messages: Any, tools: Any, message: str
) -> None:
    async def generate(request: GenerateRequest) -> dict[str, Any]:
        raise AssertionError("generate must not be called")

    client = create_in_process_client(InProcessOptions(model="local", generate=generate))
    with pytest.raises(ValueError, match=message):
        await client.translate(messages, tools=tools)


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [("system", 5, "translate: system is a int, expected a string"),
     ("max_tokens", -1, r"translate: max_tokens is -1, expected an integer >= 0"),
     ("max_tokens", "9", r"translate: max_tokens is '9'")],
)  # fmt: skip
async def test_translate_checks_system_and_max_tokens(
    keyword: str, value: Any, message: str
) -> None:
    async with served("anthropic", [{"text": "never"}]) as (provider, client):
        with pytest.raises(ValueError, match=message):
            await client.translate([USER], **{keyword: value})
    assert provider.requests == []


@pytest.mark.parametrize("style", STYLES)
async def test_what_before_llm_returns_is_checked_too(style: str) -> None:
    hooks = Hooks(before_llm=lambda e: {"messages": [USER, "injected"]})
    async with served(style, [{"text": "never"}], hooks=hooks) as (provider, client):
        with pytest.raises(ValueError, match=r"before_llm: messages\[1\] is a str"):
            await client.translate([USER])
    assert provider.requests == []


@pytest.mark.parametrize("style", STYLES)
async def test_well_formed_odd_input_still_goes_through(style: str) -> None:
    """Shapes the check lets through: object arguments, null content, image parts,
    tools that are not functions (a provider's own), a tuple of messages."""
    messages = (
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "1"},
    )  # fmt: skip
    native = {"name": "web_search", "type": "web_search_20250305"}
    async with served(style, [{"text": "ok"}]) as (provider, client):
        result = await client.translate(messages, tools=[WEATHER, native])
    assert result.text == "ok" and len(provider.requests) == 1
