"""Issue 38: the Responses and Gemini styles through the one loop, against a real
loopback FakeProvider (whose wire the vendors' SDKs check in test_wire_sdks.py)."""

from __future__ import annotations

from typing import Any

import pytest
from http_helpers import KEY, adder, assert_balanced, calls_step, served

from toolnexus_trio import TranslatedToolCall

ALL_STYLES = ["openai", "anthropic", "responses", "gemini"]


async def _run(client: Any, toolkit: Any, stream: bool) -> Any:
    if stream:
        async with client.stream("sum", toolkit) as events:
            seen = [e async for e in events]
        assert "".join(e["delta"] for e in seen if e["type"] == "text") == "adding3 and 7"
        return seen[-1]["result"]
    return await client.run("sum", toolkit)


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_wire(stream: bool) -> None:
    first_step = calls_step((1, 2), (3, 4), text="adding") | {"reasoning": "plan: add"}
    script = [first_step, {"text": "3 and 7"}]
    async with served("responses", script, system_prompt="Be brief.") as (provider, client):
        toolkit = await adder()
        result = await _run(client, toolkit, stream)
    assert result.status == "done" and result.text == "3 and 7"
    first, second = provider.requests
    assert first.path == "/v1/responses"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.json["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "sum"},
    ]
    assert first.json["tools"] == [
        {"type": "function", "name": "add", "description": "Add two integers.",
         "parameters": toolkit.to_openai()[0]["function"]["parameters"], "strict": False}
    ]  # fmt: skip
    assert first.json.get("stream") is (True if stream else None)
    # The reasoning item goes back verbatim, before the calls it led to; then the outputs.
    sent = second.json["input"][2:]
    assert [i.get("type") for i in sent] == [
        "reasoning", "message", "function_call", "function_call", "function_call_output",
        "function_call_output",
    ]  # fmt: skip
    assert sent[0]["id"] == "rs_fake_1" and sent[0]["encrypted_content"] == "enc-1"
    ids = [c["id"] for c in result.messages[2]["tool_calls"]]
    assert [i["call_id"] for i in sent[2:4]] == ids == [i["call_id"] for i in sent[4:]]
    assert [i["output"] for i in sent[4:]] == ["3", "7"]
    assert result.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert_balanced(result.messages)


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_wire(stream: bool) -> None:
    first_step = calls_step((1, 2), (3, 4), text="adding") | {"reasoning": "sig"}
    script = [first_step, {"text": "3 and 7"}]
    async with served("gemini", script, system_prompt="Be brief.") as (provider, client):
        toolkit = await adder()
        result = await _run(client, toolkit, stream)
    assert result.status == "done" and result.text == "3 and 7"
    first, second = provider.requests
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    assert first.path == f"/v1/models/m:{method}"
    assert first.headers["x-goog-api-key"] == KEY and "authorization" not in first.headers
    assert "model" not in first.json and "stream" not in first.json
    assert first.json["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert first.json["contents"] == [{"role": "user", "parts": [{"text": "sum"}]}]
    declared = first.json["tools"][0]["functionDeclarations"]
    assert declared[0]["name"] == "add"
    assert declared[0]["parametersJsonSchema"] == toolkit.to_openai()[0]["function"]["parameters"]
    model_turn, results = second.json["contents"][1:]
    # The model's own parts go back as they came: the thought signature included.
    assert model_turn["role"] == "model"
    assert model_turn["parts"][1] == {
        "functionCall": {"name": "add", "args": {"a": 1, "b": 2}},
        "thoughtSignature": "c2lnbmF0dXJl",
    }
    assert results == {"role": "user", "parts": [
        {"functionResponse": {"name": "add", "response": {"result": "3"}}},
        {"functionResponse": {"name": "add", "response": {"result": "7"}}},
    ]}  # fmt: skip
    assert result.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert_balanced(result.messages)


HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "add both"},
    {"role": "assistant", "content": "sure", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
    ]},
    {"role": "tool", "tool_call_id": "t1", "content": "3"},
]  # fmt: skip


@pytest.mark.parametrize("style", ALL_STYLES)
async def test_translate_round_trips_every_style(style: str) -> None:
    """Text, a tool call and its result go out in the style's shapes; the answer's text
    and tool call come back OpenAI-shaped."""
    script = [{"text": "calling", "tool_calls": [{"name": "add", "arguments": {"a": 5, "b": 6},
                                                  "id": "x1"}]}]  # fmt: skip
    async with served(style, script) as (provider, client):
        result = await client.translate(HISTORY, toolkit=await adder(), system="sys")
    assert result.text == "calling" and result.finish_reason == "tool_calls"
    assert result.tool_calls == (TranslatedToolCall("x1", "add", '{"a":5,"b":6}'),)
    assert result.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    body = provider.requests[0].json
    if style == "openai":
        assert body["messages"][1:] == HISTORY
    elif style == "anthropic":
        assert body["messages"][1]["content"] == [
            {"type": "text", "text": "sure"},
            {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
        ]
        assert body["messages"][2]["content"][0]["tool_use_id"] == "t1"
    elif style == "responses":
        assert body["instructions"] == "sys"
        assert body["input"] == [
            {"role": "user", "content": "add both"},
            {"role": "assistant", "content": "sure"},
            {"type": "function_call", "call_id": "t1", "name": "add",
             "arguments": '{"a":1,"b":2}'},
            {"type": "function_call_output", "call_id": "t1", "output": "3"},
        ]  # fmt: skip
    else:
        assert body["systemInstruction"] == {"parts": [{"text": "sys"}]}
        assert body["contents"] == [
            {"role": "user", "parts": [{"text": "add both"}]},
            {"role": "model", "parts": [{"text": "sure"},
                                        {"functionCall": {"name": "add", "args": {"a": 1, "b": 2}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "add",
                                                             "response": {"result": "3"}}}]},
        ]  # fmt: skip


@pytest.mark.parametrize(
    ("style", "reason", "expected"),
    [
        ("responses", "max_output_tokens", "length"),
        ("gemini", "MAX_TOKENS", "length"),
        ("gemini", "SAFETY", "content_filter"),
        ("gemini", "STOP", "stop"),
    ],
)
async def test_finish_reasons(style: str, reason: str, expected: str) -> None:
    async with served(style, [{"text": "x", "finish_reason": reason}]) as (_, client):
        result = await client.translate([{"role": "user", "content": "hi"}])
    assert result.finish_reason == expected


@pytest.mark.parametrize("style", ["responses", "gemini"])
async def test_bad_answers_are_clear_errors(style: str) -> None:
    from toolnexus_trio import GenerateError

    async with served(style, [{"body": '{"output": 3, "candidates": 3}'}], retries=0) as (
        _,
        client,
    ):
        with pytest.raises(GenerateError, match="not a"):
            await client.run("hi")


async def test_provider_state_stays_with_its_wire() -> None:
    """A transcript whose assistant turn kept Responses reasoning items goes to the chat
    completions wire without them (a fallback of another style, a later client)."""
    step = calls_step((1, 2)) | {"reasoning": "plan"}
    async with served("responses", [step, {"text": "3"}]) as (_, client):
        first = await client.run("sum", await adder())
    assert "responses_output" in first.messages[1]
    async with served("openai", [{"text": "ok"}]) as (provider, client):
        await client.run("again", history=first.messages)
    sent = provider.requests[0].json["messages"]
    assert all("responses_output" not in m for m in sent)
    assert sent[1]["tool_calls"] == first.messages[1]["tool_calls"]


@pytest.mark.parametrize("style", ["responses", "gemini"])
async def test_same_surface_retries_hooks_metrics_conversations(style: str) -> None:
    """Retries, hooks, metrics and conversations work for the new styles as for the others;
    a model changed by before_llm reaches Gemini's URL."""
    metrics: list[dict[str, Any]] = []
    hooks = {"before_llm": lambda e: {"model": "other"} if e["turn"] == 0 else None}
    script = [{"status": 503}, {"text": "one"}, {"text": "two"}]
    async with served(style, script, retries=1, retry_base_ms=0, hooks=hooks,
                      on_metric=metrics.append) as (provider, client):  # fmt: skip
        first = await client.ask("hi", id="c1")
        second = await client.ask("again", id="c1")
        text = client.metrics()
    assert (first.text, second.text) == ("one", "two")
    assert len(provider.requests) == 3  # the 503 was retried
    if style == "gemini":
        assert provider.requests[0].path == "/v1/models/other:generateContent"
    else:
        assert provider.requests[0].json["model"] == "other"
    # The second ask carries the first exchange.
    key = "input" if style == "responses" else "contents"
    assert len(provider.requests[2].json[key]) == 3
    assert [m["status"] for m in metrics if m["event"] == "llm"] == ["ok", "ok"]
    assert 'toolnexus_llm_requests_total{model="other",status="ok"} 2' in text


@pytest.mark.parametrize("style", ["responses", "gemini"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_run_timeout_aborts_the_request(style: str, stream: bool) -> None:
    from toolnexus_trio import RunTimeout

    async with served(style, [{"stall": True}], run_timeout_ms=200) as (provider, client):

        async def consume() -> None:
            if stream:
                async with client.stream("hi") as events:
                    async for _ in events:
                        pass
            else:
                await client.run("hi")

        with pytest.raises(RunTimeout):
            await consume()
        await provider.requests[0].closed.wait()


async def test_gemini_call_ids_the_model_gave_are_answered_by_id() -> None:
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "g1"}]},
              {"text": "3"}]  # fmt: skip
    async with served("gemini", script) as (provider, client):
        result = await client.run("sum", await adder())
    assert result.messages[1]["tool_calls"][0]["id"] == "g1"
    answer = provider.requests[1].json["contents"][-1]["parts"][0]["functionResponse"]
    assert answer == {"name": "add", "response": {"result": "3"}, "id": "g1"}


@pytest.mark.parametrize("style", ["responses", "gemini"])
@pytest.mark.parametrize("fault", [{"drop_after": 2}, {"body": "data: {}\n\n"}])
async def test_a_cut_stream_is_a_clear_error(style: str, fault: dict[str, Any]) -> None:
    from toolnexus_trio import GenerateError

    async with served(style, [{"text": "one two three"} | fault], retries=0) as (_, client):

        async def consume() -> None:
            async with client.stream("hi") as events:
                async for _ in events:
                    pass

        with pytest.raises(GenerateError, match=r"broke|truncated"):
            await consume()


async def test_gemini_stream_joins_text_parts() -> None:
    step = {"text": "a b c d", "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}
    toolkit = await adder()
    async with (
        served("gemini", [step, {"text": "3"}]) as (provider, client),
        client.stream("sum", toolkit) as events,
    ):
        [e async for e in events]
    parts = provider.requests[1].json["contents"][1]["parts"]
    assert parts == [
        {"text": "a b c d"},
        {"functionCall": {"name": "add", "args": {"a": 1, "b": 2}}},
    ]
