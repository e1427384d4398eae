"""MCP sampling (a server asks our model) and relayed elicitation, against real SDK
servers: one hop (our source) and two (our source, ``serve``, then an SDK client or
another toolkit's source)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from helpers import TaskCensus
from mcp import Client, StdioServerParameters
from mcp_helpers import SERVERS, collecting_run, http_app
from sampling_server import build as build_sampling

from toolnexus_trio import (
    Answer,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    SamplingLimits,
    SamplingRequest,
    SamplingResult,
    ToolkitOptions,
    create_in_process_client,
    open_toolkit,
    sampler_from_client,
    sampler_from_generate,
)


class Sampled:
    """A sampler that records what it was asked and answers in upper case."""

    def __init__(self) -> None:
        self.asked: list[SamplingRequest] = []

    async def __call__(self, request: SamplingRequest) -> SamplingResult:
        self.asked.append(request)
        await trio.lowlevel.checkpoint()
        text = " ".join(m.text for m in request.messages).upper()
        return SamplingResult(text, model="fake-small", tokens=len(text))


ROOT = Path(__file__).resolve().parents[2]


def _result(text: str) -> Any:
    """The value of a structured tool result (``{"result": ...}``)."""
    return json.loads(text)["result"]


SAMPLING_SERVER = {"command": [sys.executable, str(SERVERS / "sampling_server.py")]}
"""The everything server's tools plus tools that sample, over stdio."""


def _ev(**extra: Any) -> ToolkitOptions:
    return ToolkitOptions(mcp={"ev": SAMPLING_SERVER}, builtins=False, **extra)


# ---------------------------------------------------------------------- one hop


async def test_a_server_samples_through_the_toolkit_sampler() -> None:
    sampler = Sampled()
    async with open_toolkit(_ev(sample=sampler)) as toolkit:
        with collecting_run() as (events, metrics):
            result = await toolkit.execute("ev_summarize", {"text": "hello there"})
    assert (result.output, result.is_error) == ("HELLO THERE [fake-small]", False)
    asked = sampler.asked[0]
    assert [(m.role, m.text) for m in asked.messages] == [("user", "hello there")]
    assert (asked.system_prompt, asked.max_tokens, asked.model_hints) == (
        "Answer in one line.",
        100,
        ("small",),
    )
    assert (asked.server, asked.depth) == ("ev", 1)
    assert {"type": "sample", "server": "ev", "status": "ok", "tokens": 11} in events
    sample_metrics = [m for m in metrics if m["event"] == "sample"]
    assert sample_metrics == [
        {
            "event": "sample",
            "server": "ev",
            "status": "ok",
            "depth": 1,
            "max_tokens": 100,
            "tokens": 11,
        }
    ]


async def test_without_a_sampler_sampling_is_not_advertised() -> None:
    async with open_toolkit(_ev()) as toolkit:
        result = await toolkit.execute("ev_summarize", {"text": "x"})
    # The SDK's own answer for a client that did not declare sampling.
    assert result.output.startswith("refused:"), result.output


async def test_max_tokens_is_capped_by_the_toolkit_limit() -> None:
    sampler = Sampled()
    options = _ev(sample=sampler, sampling_limits=SamplingLimits(max_tokens=20))
    async with open_toolkit(options) as toolkit:
        await toolkit.execute("ev_summarize", {"text": "a", "max_tokens": 500})
        await toolkit.execute("ev_summarize", {"text": "b", "max_tokens": 5})
    assert [a.max_tokens for a in sampler.asked] == [20, 5]
    assert sampler.asked[0].params["maxTokens"] == 20


async def test_a_server_is_rate_limited() -> None:
    sampler = Sampled()
    options = _ev(sample=sampler, sampling_limits=SamplingLimits(per_minute=2))
    async with open_toolkit(options) as toolkit:
        outputs = [
            (await toolkit.execute("ev_summarize", {"text": str(i)})).output for i in range(3)
        ]
    assert outputs[:2] == ["0 [fake-small]", "1 [fake-small]"]
    assert outputs[2] == "refused: sampling refused: more than 2 requests a minute from 'ev'"
    assert len(sampler.asked) == 2


async def test_nested_sampling_stops_at_the_depth_limit() -> None:
    # The sampler calls the sampling tool again: each level is one deeper.
    depths: list[int] = []
    box: dict[str, Any] = {}

    async def nesting(request: SamplingRequest) -> str:
        depths.append(request.depth)
        if request.depth >= 5:  # a floor of our own, so a broken limit ends too
            return "bottom"
        inner = await box["toolkit"].execute("ev_summarize", {"text": f"d{request.depth}"})
        return f"{request.depth}<{inner.output}>"

    options = _ev(sample=nesting, sampling_limits=SamplingLimits(max_depth=3))
    async with open_toolkit(options) as toolkit:
        box["toolkit"] = toolkit
        result = await toolkit.execute("ev_summarize", {"text": "top"})
    assert depths == [1, 2, 3]
    assert "refused: sampling refused: depth 4 exceeds the limit of 3" in result.output
    assert result.output.startswith("1<2<3<refused")


async def test_a_request_after_its_call_ended_is_refused() -> None:
    # Two connections to one server: `arm` remembers connection a; `fire`, a call on b,
    # makes a's server sample when no call of a is in flight.
    sampler = Sampled()
    server = build_sampling("late")
    async with http_app(server.streamable_http_app()) as base:
        url = f"{base}/mcp"
        options = ToolkitOptions(
            mcp={"a": {"url": url}, "b": {"url": url}}, sample=sampler, builtins=False
        )
        async with open_toolkit(options) as toolkit:
            assert (await toolkit.execute("a_arm", {})).output == "armed"
            result = await toolkit.execute("b_fire", {})
    assert result.output.startswith("refused: sampling refused: no tool call of this server")
    assert sampler.asked == []


async def test_cancelling_the_call_cancels_the_model_request() -> None:
    started = trio.Event()
    cancelled: list[str] = []

    async def hanging(request: SamplingRequest) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(request.messages[0].text)
            raise
        return "never"

    async with open_toolkit(_ev(sample=hanging)) as toolkit:
        with TaskCensus() as census:
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call() -> None:
                    with scope:
                        await toolkit.execute("ev_summarize_slow", {"tag": "t1"})

                nursery.start_soon(call)
                await started.wait()
                scope.cancel()
            # The call's request runner and its jobs went with it (the SDK's own task
            # that sends our error answer lives in the connection, and may still be there).
            ours = [t.name for t in census.new_tasks() if t.name.startswith("toolnexus_trio")]
            assert ours == []
        assert cancelled == ["t1"]
        # The server's handler was cancelled too (notifications/cancelled).
        seen = await toolkit.execute("ev_sample_cancels", {})
    assert seen.output == "t1"


async def test_sampler_from_client_is_one_model_call_counted_in_metrics() -> None:
    asked: list[Any] = []

    async def generate(request: Any) -> InProcessResponse:
        await trio.lowlevel.checkpoint()
        if request.tools is None:  # the sampling call: no tools
            asked.append(request)
            return InProcessResponse(content="tiny", usage={"completion_tokens": 3})
        if request.turn == 0:
            call = InProcessToolCall("c1", "ev_summarize", {"text": "long text"})
            return InProcessResponse(tool_calls=[call])
        return InProcessResponse(content="done")

    client = create_in_process_client(InProcessOptions("fake", generate))
    async with (
        open_toolkit(_ev(sample=sampler_from_client(client))) as toolkit,
        client.stream("go", toolkit) as stream,
    ):
        events = [event async for event in stream]
    results = [e for e in events if e["type"] == "tool_result"]
    assert results[0]["output"] == "tiny [fake]"
    assert {"type": "sample", "server": "ev", "status": "ok", "tokens": 3} in events
    request = asked[0]
    assert request.messages == [
        {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": "long text"},
    ]
    assert request.max_tokens == 100
    text = client.metrics()
    assert 'toolnexus_mcp_sampling_requests_total{server="ev",status="ok"} 1' in text
    assert 'toolnexus_mcp_sampling_tokens_total{server="ev"} 3' in text


async def test_sampler_from_generate() -> None:
    def generate(request: Any) -> dict[str, Any]:
        return {"content": f"{len(request.messages)} messages, cap {request.max_tokens}"}

    sampler = sampler_from_generate(generate, model="local")
    async with open_toolkit(_ev(sample=sampler)) as toolkit:
        result = await toolkit.execute("ev_summarize", {"text": "x", "max_tokens": 7})
    assert result.output == "2 messages, cap 7 [local]"


# ---------------------------------------------------------------------- two hops


async def test_serve_forwards_sampling_to_a_client_that_samples() -> None:
    inner_sampler = Sampled()
    seen: list[types.CreateMessageRequestParams] = []

    async def outer(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        seen.append(params)
        await trio.lowlevel.checkpoint()
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="from the outer client"),
            model="outer-model",
        )

    options = _ev(sample=inner_sampler, sampling_limits=SamplingLimits(max_tokens=64))
    async with (
        open_toolkit(options) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy", sampling_callback=outer) as client,
    ):
        result = await client.call_tool("ev_summarize", {"text": "relay me"})
    assert result.content[0].text == "from the outer client [outer-model]"  # type: ignore[union-attr]
    assert inner_sampler.asked == []  # the outer client answered
    params = seen[0]
    assert params.max_tokens == 64  # capped by the serving toolkit first
    assert params.system_prompt == "Answer in one line."
    assert params.messages[0].content.text == "relay me"  # type: ignore[union-attr]


async def test_serve_falls_back_to_its_sampler_then_refuses() -> None:
    sampler = Sampled()
    async with (
        open_toolkit(_ev(sample=sampler)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy") as client,
    ):
        result = await client.call_tool("ev_summarize", {"text": "mine"})
    assert result.content[0].text == "MINE [fake-small]"  # type: ignore[union-attr]

    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy") as client,
    ):
        result = await client.call_tool("ev_summarize", {"text": "nobody"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert text == "refused: sampling refused: neither the calling client nor the toolkit samples"


async def test_two_toolkits_sample_across_serve_with_the_depth() -> None:
    # source -> serve -> source: the outer toolkit's sampler answers, at depth 1.
    outer_sampler = Sampled()
    async with open_toolkit(_ev(sample=Sampled())) as inner, inner.serve() as served:
        options = ToolkitOptions(
            mcp={"in": {"url": served.url}}, sample=outer_sampler, builtins=False
        )
        async with open_toolkit(options) as outer:
            result = await outer.execute("in_ev_summarize", {"text": "two hops"})
    assert result.output == "TWO HOPS [fake-small]"
    assert [(a.server, a.depth) for a in outer_sampler.asked] == [("in", 1)]


async def test_cancel_mid_sampling_through_serve() -> None:
    started = trio.Event()

    async def outer(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        started.set()
        await trio.sleep_forever()

    async with (
        open_toolkit(_ev(sample=Sampled())) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy", sampling_callback=outer) as client,
    ):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.call_tool("ev_summarize_slow", {"tag": "far"})

            nursery.start_soon(call)
            await started.wait()
            scope.cancel()
        seen = await client.call_tool("ev_sample_cancels", {})
    assert seen.content[0].text == "far"  # type: ignore[union-attr]


# ---------------------------------------------------------------------- relayed elicitation


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (types.ElicitResult(action="accept", content={"name": "Ada"}), "accept:Ada"),
        (types.ElicitResult(action="decline"), "decline"),
        (types.ElicitResult(action="cancel"), "cancel"),
    ],
)
async def test_serve_relays_an_inner_elicitation(reply: Any, expected: str) -> None:
    asked: list[Any] = []
    local: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        local.append(request)
        return Answer(request.id, True, {"name": "local"})

    async def elicit(ctx: Any, params: Any) -> Any:
        asked.append(params)
        await trio.lowlevel.checkpoint()
        return reply

    async with (
        open_toolkit(_ev(wait_for=wait_for)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy", elicitation_callback=elicit) as client,
    ):
        result = await client.call_tool("ev_ask", {"question": "Your name?"})
    assert _result(result.content[0].text) == expected  # type: ignore[union-attr]
    assert local == []  # the outer client answered, not the serving toolkit
    assert asked[0].message == "Your name?"
    assert asked[0].requested_schema["properties"]["name"]["type"] == "string"


async def test_serve_relays_url_mode_with_the_inner_id() -> None:
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> Any:
        asked.append(params)
        await trio.lowlevel.checkpoint()
        return types.ElicitResult(action="accept")

    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy", elicitation_callback=elicit) as client,
    ):
        result = await client.call_tool("ev_login", {})
    assert _result(result.content[0].text) == "accept"  # type: ignore[union-attr]
    params = asked[0]
    assert (params.mode, params.url, params.elicitation_id) == (
        "url",
        "https://auth.example/login",
        "el-1",
    )


async def test_without_the_capability_the_toolkit_wait_for_answers() -> None:
    async def wait_for(request: Request) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(request.id, True, {"name": "local"})

    async with (
        open_toolkit(_ev(wait_for=wait_for)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy") as client,
    ):
        result = await client.call_tool("ev_ask", {"question": "Your name?"})
    assert _result(result.content[0].text) == "accept:local"  # type: ignore[union-attr]


async def test_cli_serve_relays_sampling_and_elicitation(tmp_path: Path) -> None:
    # `serve --stdio`: the toolkit exists to be served, so the inner server's sampling
    # and elicitation go to the client (the command has no model of its own).
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ev": SAMPLING_SERVER}, "builtins": False}))

    async def sample(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        await trio.lowlevel.checkpoint()
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="cli"), model="c"
        )

    async def elicit(ctx: Any, params: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return types.ElicitResult(action="accept", content={"name": "Cli"})

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolnexus_trio", "serve", "--stdio", "--mcp-config", str(config)],
        env={"PYTHONPATH": str(ROOT)},
    )
    async with Client(
        params, mode="legacy", sampling_callback=sample, elicitation_callback=elicit
    ) as client:
        summary = await client.call_tool("ev_summarize", {"text": "x"})
        asked = await client.call_tool("ev_ask", {"question": "Name?"})
    assert summary.content[0].text == "cli [c]"  # type: ignore[union-attr]
    assert _result(asked.content[0].text) == "accept:Cli"  # type: ignore[union-attr]
