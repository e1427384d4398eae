"""SPEC §8 wire of create_client, both styles, against a real loopback FakeProvider."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from http_helpers import KEY, STYLES, adder, assert_balanced, calls_step, options, served

from toolnexus_trio import Client, ClientOptions, Hooks, create_client
from toolnexus_trio.testing import open_fake_provider


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_wire(stream: bool) -> None:
    script = [calls_step((1, 2), (3, 4), text="adding"), {"text": "3 and 7"}]
    async with served("openai", script, system_prompt="Be brief.") as (provider, client):
        toolkit = await adder()
        if stream:
            async with client.stream("sum", toolkit) as events:
                result = [e async for e in events][-1]["result"]
        else:
            result = await client.run("sum", toolkit)
    assert result.status == "done" and result.text == "3 and 7"
    first, second = provider.requests
    assert first.method == "POST" and first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.headers["content-type"] == "application/json"
    assert first.json["model"] == "m" and second.json["model"] == "m"
    assert first.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "sum"},
    ]
    assert first.json["tools"] == toolkit.to_openai()
    assert first.json["tool_choice"] == "auto"
    if stream:
        assert first.json["stream"] is True
        assert first.json["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in first.json and "stream_options" not in first.json
    # The tool results go back in OpenAI's shape, in call order.
    assistant, *tools = second.json["messages"][2:]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        '{"a":1,"b":2}',
        '{"a":3,"b":4}',
    ]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert tools == [
        {"role": "tool", "tool_call_id": ids[0], "content": "3"},
        {"role": "tool", "tool_call_id": ids[1], "content": "7"},
    ]
    # Usage is summed across the two turns (10 + 5 per scripted answer).
    assert result.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert result.turns == 2 and result.model == "m"
    assert_balanced(result.messages)


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_wire(stream: bool) -> None:
    script = [calls_step((1, 2), (3, 4), text="adding"), {"text": "3 and 7", "usage": {
        "prompt_tokens": 7, "completion_tokens": 2}}]  # fmt: skip
    async with served("anthropic", script, system_prompt="Be brief.") as (provider, client):
        toolkit = await adder()
        if stream:
            async with client.stream("sum", toolkit) as events:
                result = [e async for e in events][-1]["result"]
        else:
            result = await client.run("sum", toolkit)
    assert result.status == "done" and result.text == "3 and 7"
    first, second = provider.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == KEY
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in first.headers
    assert first.json["system"] == "Be brief."
    assert first.json["max_tokens"] == 4096
    assert first.json["messages"] == [{"role": "user", "content": "sum"}]
    assert first.json["tools"] == toolkit.to_anthropic()
    assert "tool_choice" not in first.json
    assert first.json.get("stream", False) is stream
    # Anthropic's shape on the wire: tool_use blocks, then ONE user turn of results.
    assistant, results = second.json["messages"][1:]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "text", "text": "adding"}
    uses = assistant["content"][1:]
    assert [(u["type"], u["name"], u["input"]) for u in uses] == [
        ("tool_use", "add", {"a": 1, "b": 2}),
        ("tool_use", "add", {"a": 3, "b": 4}),
    ]
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": uses[0]["id"], "content": "3"},
            {"type": "tool_result", "tool_use_id": uses[1]["id"], "content": "7"},
        ],
    }
    # input_tokens -> prompt, output_tokens -> completion, summed.
    assert result.usage == {"prompt_tokens": 17, "completion_tokens": 7, "total_tokens": 24}
    # The transcript stays OpenAI-shaped (documented): it round-trips as history.
    assert [m["role"] for m in result.messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant"
    ]  # fmt: skip
    assert_balanced(result.messages)


@pytest.mark.parametrize(
    ("base", "path"),
    [("", "/v1/messages"), ("/v1", "/v1/messages"), ("/v1/", "/v1/messages"),
     ("/proxy", "/proxy/v1/messages")],
)  # fmt: skip
async def test_anthropic_adds_v1_only_when_missing(base: str, path: str) -> None:
    async with open_fake_provider([{"text": "ok"}]) as provider:
        opts = attrs.evolve(options(provider, "anthropic"), base_url=provider.url + base)
        async with create_client(opts) as client:
            await client.run("hi")
    assert provider.requests[0].path == path


@pytest.mark.parametrize("style", STYLES)
async def test_no_tools_means_no_tool_keys(style: str) -> None:
    async def drop_tools(event: dict[str, Any]) -> dict[str, Any]:
        return {"tools": []}

    script = [{"text": "a"}, {"text": "b"}, {"text": "c"}]
    async with served(style, script, hooks=Hooks(before_llm=None)) as (provider, client):
        await client.run("no toolkit")
    async with served(style, script[:1], hooks=Hooks(before_llm=drop_tools)) as (p2, c2):
        await c2.run("tools removed by the hook", await adder())
    for request in (provider.requests[0], p2.requests[0]):
        assert "tools" not in request.json and "tool_choice" not in request.json


@pytest.mark.parametrize("style", STYLES)
async def test_request_params_merge_then_body_transform(
    style: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, Any]] = []

    async def transform(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(body))
        body["messages"].append({"role": "user", "content": "added by the transform"})
        return {**body, "transformed": True}

    params = {"temperature": 0.25, "max_tokens": 77, "messages": "no", "stream": True, "tools": 1}
    with caplog.at_level(logging.WARNING, logger="toolnexus_trio"):
        async with served(
            style, [{"text": "ok"}], request_params=params, body_transform=transform
        ) as (provider, client):
            result = await client.run("hi")
    body = provider.requests[0].json
    # request_params win over the client's own keys (max_tokens beats anthropic's 4096)...
    assert seen[0]["temperature"] == 0.25 and seen[0]["max_tokens"] == 77
    # ...but may not set messages/tools/stream (dropped with a warning).
    assert isinstance(seen[0]["messages"], list) and "stream" not in seen[0]
    assert sum("request_params may not set" in r.message for r in caplog.records) == 3
    # The transform saw the merged body, and what it returned is what was sent.
    assert body["transformed"] is True and body["temperature"] == 0.25
    assert body["messages"][-1]["content"] == "added by the transform"
    # Its in-place edit did not leak into the run's transcript.
    assert [m["content"] for m in result.messages] == ["hi", "ok"]


async def test_sync_body_transform_and_extra_headers() -> None:
    def transform(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "seed": 7}

    async with served(
        "openai", [{"text": "ok"}], body_transform=transform, headers={"X-Trace": "abc"}
    ) as (provider, client):
        await client.run("hi")
    assert provider.requests[0].json["seed"] == 7
    assert provider.requests[0].headers["x-trace"] == "abc"


@pytest.mark.parametrize(
    ("style", "env", "header"),
    [
        ("openai", {"OPENAI_API_KEY": "from-openai"}, ("authorization", "Bearer from-openai")),
        ("openai", {"OPENROUTER_API_KEY": "from-or"}, ("authorization", "Bearer from-or")),
        ("anthropic", {"ANTHROPIC_API_KEY": "from-anth"}, ("x-api-key", "from-anth")),
        ("openai", {}, ("authorization", None)),
        ("anthropic", {}, ("x-api-key", None)),
    ],
)
async def test_api_key_from_the_environment(
    style: str, env: dict[str, str], header: tuple[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with served(style, [{"text": "ok"}], api_key=None) as (provider, client):
        await client.run("hi")
    assert provider.requests[0].headers.get(header[0]) == header[1]


async def test_the_key_is_not_in_reprs() -> None:
    async with served("openai", []) as (_, client):
        assert KEY not in repr(client.options)


@pytest.mark.parametrize("style", STYLES)
async def test_history_round_trips_and_model_is_sent_verbatim(style: str) -> None:
    script = [calls_step((2, 2)), {"text": "four"}, {"text": "still four"}]
    async with served(style, script, model="vendor/model-x:free") as (provider, client):
        toolkit = await adder()
        first = await client.run("2+2?", toolkit)
        second = await client.run("and again?", toolkit, history=first.messages)
    assert second.text == "still four"
    assert [r.json["model"] for r in provider.requests] == ["vendor/model-x:free"] * 3
    # The third request carries the whole first exchange, in the style's wire shape.
    sent = provider.requests[2].json["messages"]
    assert sent[-1] == {"role": "user", "content": "and again?"}
    assert len(sent) == 5  # user, assistant, tool result(s), assistant, user
    assert_balanced(second.messages)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"style": "palm"}, "style"), ({"base_url": "ftp://x"}, "base_url"),
     ({"retries": -1}, "negative"), ({"max_turns": 0}, "max_turns")],
)  # fmt: skip
def test_bad_options_are_refused(change: dict[str, Any], message: str) -> None:
    opts = ClientOptions(base_url="http://127.0.0.1:1/v1", style="openai", model="m")
    with pytest.raises(ValueError, match=message):
        create_client(attrs.evolve(opts, **change))


async def test_client_made_from_http_options_needs_create_client() -> None:
    async with served("openai", []) as (_, client):
        with pytest.raises(TypeError):
            Client(client.options)
