"""An inner MCP server's elicitation and sampling, relayed through ``serve`` to a
2026-07-28 client as ``InputRequiredResult`` rounds (the call parked between them),
against real SDK parts: the SDK's client on the modern revision, SDK inner servers."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import mcp_types as types
import trio
import trio.testing
from helpers import TaskCensus
from mcp import Client
from mcp.server.mcpserver import Context
from mcp_helpers import http_app
from pydantic import BaseModel
from sampling_server import build as build_sampling
from test_mcp_sampling import SAMPLING_SERVER, Sampled

from toolnexus_trio import (
    Answer,
    Request,
    SamplingLimits,
    ToolkitOptions,
    open_toolkit,
)
from toolnexus_trio.mcp import MCPServeConfig


class Name(BaseModel):
    """The inner server's elicitation form."""

    name: str


def _ev(**extra: Any) -> ToolkitOptions:
    return ToolkitOptions(mcp={"ev": SAMPLING_SERVER}, builtins=False, **extra)


def _text(result: Any) -> str:
    return result.content[0].text  # type: ignore[no-any-return]


def _result(result: Any) -> Any:
    return json.loads(_text(result))["result"]


def _modern(client: Client) -> None:
    assert client.protocol_version == "2026-07-28"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (types.ElicitResult(action="accept", content={"name": "Ada"}), "accept:Ada"),
        (types.ElicitResult(action="decline"), "decline"),
        (types.ElicitResult(action="cancel"), "cancel"),
    ],
)
async def test_a_form_elicitation_is_an_input_round(reply: Any, expected: str) -> None:
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
        Client(served.url, mode="auto", elicitation_callback=elicit) as client,
    ):
        _modern(client)
        result = await client.call_tool("ev_ask", {"question": "Your name?"})
    assert _result(result) == expected
    assert local == []  # the outer client answered, not the serving toolkit
    assert asked[0].message == "Your name?"
    assert asked[0].requested_schema["properties"]["name"]["type"] == "string"


async def test_the_round_is_an_input_required_result_with_our_state() -> None:
    # Driven by hand: the first round hands out the question; the retry with the answer
    # (and our request_state) goes on; a replay of that state is refused.
    async def never(ctx: Any, params: Any) -> Any:
        raise AssertionError("driven by hand")

    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="auto", elicitation_callback=never) as client,
    ):
        _modern(client)
        args = {"question": "Name?"}
        first = await client.session.call_tool("ev_ask", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        [(key, question)] = (first.input_requests or {}).items()
        assert isinstance(question, types.ElicitRequest)
        assert question.params.message == "Name?"
        with pytest.raises(Exception, match="request_state"):
            await client.session.call_tool(
                "ev_ask",
                {"question": "Other?"},
                request_state=first.request_state,
                allow_input_required=True,
            )
        answer = types.ElicitResult(action="accept", content={"name": "Bo"})
        done = await client.session.call_tool(
            "ev_ask",
            args,
            input_responses={key: answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult)
        assert _result(done) == "accept:Bo"
        with pytest.raises(Exception, match="request_state"):
            await client.session.call_tool(
                "ev_ask",
                args,
                input_responses={key: answer},
                request_state=first.request_state,
                allow_input_required=True,
            )


async def test_url_mode_is_an_input_round() -> None:
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> Any:
        asked.append(params)
        await trio.lowlevel.checkpoint()
        return types.ElicitResult(action="accept")

    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="auto", elicitation_callback=elicit) as client,
    ):
        _modern(client)
        result = await client.call_tool("ev_login", {})
    assert _result(result) == "accept"
    params = asked[0]
    # 2026-07-28 has no elicitationId (the inner server's "el-1" stays on its hop).
    assert (params.mode, params.url, params.message) == (
        "url",
        "https://auth.example/login",
        "Log in to continue",
    )


async def test_sampling_is_answered_by_the_outer_client() -> None:
    inner_sampler = Sampled()
    seen: list[types.CreateMessageRequestParams] = []

    async def outer(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        seen.append(params)
        await trio.lowlevel.checkpoint()
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="from the modern client"),
            model="outer-model",
        )

    options = _ev(sample=inner_sampler, sampling_limits=SamplingLimits(max_tokens=64))
    async with (
        open_toolkit(options) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="auto", sampling_callback=outer) as client,
    ):
        _modern(client)
        result = await client.call_tool("ev_summarize", {"text": "relay me"})
    assert _text(result) == "from the modern client [outer-model]"
    assert inner_sampler.asked == []  # the outer client answered
    params = seen[0]
    assert params.max_tokens == 64  # capped by the serving toolkit first
    assert params.system_prompt == "Answer in one line."
    assert params.messages[0].content.text == "relay me"  # type: ignore[union-attr]


async def test_a_client_without_the_capability_gets_the_fallback() -> None:
    sampler = Sampled()

    async def wait_for(request: Request) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(request.id, True, {"name": "local"})

    async with (
        open_toolkit(_ev(sample=sampler, wait_for=wait_for)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="auto") as client,
    ):
        _modern(client)
        asked = await client.call_tool("ev_ask", {"question": "Your name?"})
        summary = await client.call_tool("ev_summarize", {"text": "mine"})
    assert _result(asked) == "accept:local"
    assert _text(summary) == "MINE [fake-small]"

    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="auto") as client,
    ):
        refused = await client.call_tool("ev_summarize", {"text": "nobody"})
    assert _text(refused) == (
        "refused: sampling refused: neither the calling client nor the toolkit samples"
    )


def _hanging_server(events: dict[str, trio.Event], cancelled: list[str]) -> Any:
    """The sampling server plus a tool that elicits, then hangs until cancelled."""
    server = build_sampling("hang")

    @server.tool(structured_output=False)
    async def ask_then_hang(tag: str, ctx: Context) -> str:
        """Elicit; once answered, hang (a cancel is recorded under *tag*)."""
        await ctx.elicit("Go on?", schema=Name)
        try:
            events["hanging"].set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(tag)
            events["cancelled"].set()
            raise
        return "never"

    @server.tool(structured_output=False)
    async def sample_then_record(tag: str, ctx: Context) -> str:
        """Sample; a cancel while waiting for the answer is recorded under *tag*."""
        session = ctx.request_context.session
        try:
            events["sampling"].set()
            await session.send_request(
                types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(
                        messages=[
                            types.SamplingMessage(
                                role="user", content=types.TextContent(type="text", text=tag)
                            )
                        ],
                        max_tokens=5,
                    )
                ),
                types.CreateMessageResult,
            )
        except anyio.get_cancelled_exc_class():
            cancelled.append(tag)
            events["cancelled"].set()
            raise
        return "answered"

    return server


def _ours(census: TaskCensus) -> list[str]:
    return [t.name for t in census.new_tasks() if "toolnexus_trio" in t.name]


async def test_cancelling_the_outer_call_cancels_the_inner_call() -> None:
    events = {k: trio.Event() for k in ("hanging", "cancelled", "sampling")}
    cancelled: list[str] = []

    async def elicit(ctx: Any, params: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return types.ElicitResult(action="accept", content={"name": "x"})

    async with http_app(_hanging_server(events, cancelled).streamable_http_app()) as base:
        options = ToolkitOptions(mcp={"in": {"url": f"{base}/mcp"}}, relay_to_client=True)
        async with (
            open_toolkit(options) as toolkit,
            toolkit.serve() as served,
            Client(served.url, mode="auto", elicitation_callback=elicit) as client,
        ):
            _modern(client)
            with TaskCensus() as census:
                async with trio.open_nursery() as nursery:
                    scope = trio.CancelScope()

                    async def call() -> None:
                        with scope:
                            await client.call_tool("in_ask_then_hang", {"tag": "t1"})

                    nursery.start_soon(call)
                    # Answered in a first round; the retry's round is open while it hangs.
                    await events["hanging"].wait()
                    scope.cancel()
                await events["cancelled"].wait()
                # One more round trip, then nothing of ours is left running.
                await client.list_tools()
                await trio.testing.wait_all_tasks_blocked()
                assert _ours(census) == []
    assert cancelled == ["t1"]


async def test_an_abandoned_round_cancels_the_inner_call() -> None:
    # The client takes the question and never comes back: after answer_seconds the
    # parked call is cancelled, and the inner server sees the cancel.
    events = {k: trio.Event() for k in ("hanging", "cancelled", "sampling")}
    cancelled: list[str] = []

    async with http_app(_hanging_server(events, cancelled).streamable_http_app()) as base:
        options = ToolkitOptions(mcp={"in": {"url": f"{base}/mcp"}}, relay_to_client=True)
        config = MCPServeConfig(answer_seconds=0.5)
        async with (
            open_toolkit(options) as toolkit,
            toolkit.serve(mcp=config) as served,
            Client(served.url, mode="auto", sampling_callback=_never_sample) as client,
        ):
            _modern(client)
            with TaskCensus() as census:
                first = await client.session.call_tool(
                    "in_sample_then_record", {"tag": "gone"}, allow_input_required=True
                )
                assert isinstance(first, types.InputRequiredResult)
                [question] = (first.input_requests or {}).values()
                assert isinstance(question, types.CreateMessageRequest)
                await events["cancelled"].wait()
                await client.list_tools()
                await trio.testing.wait_all_tasks_blocked()
                assert _ours(census) == []
                # Its state is spent: a late retry is refused.
                with pytest.raises(Exception, match="request_state"):
                    await client.session.call_tool(
                        "in_sample_then_record",
                        {"tag": "gone"},
                        request_state=first.request_state,
                        allow_input_required=True,
                    )
    assert cancelled == ["gone"]


async def _never_sample(ctx: Any, params: Any) -> Any:
    raise AssertionError("driven by hand")


async def test_the_parked_calls_are_capped() -> None:
    async def never(ctx: Any, params: Any) -> Any:
        raise AssertionError("driven by hand")

    config = MCPServeConfig(max_parked=1)
    async with (
        open_toolkit(_ev(relay_to_client=True)) as toolkit,
        toolkit.serve(mcp=config) as served,
        Client(served.url, mode="auto", elicitation_callback=never) as client,
    ):
        _modern(client)
        args = {"question": "One?"}
        first = await client.session.call_tool("ev_ask", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        second = await client.session.call_tool(
            "ev_ask", {"question": "Two?"}, allow_input_required=True
        )
        assert isinstance(second, types.CallToolResult) and second.is_error
        assert _text(second) == "Too many calls in flight (at most 1 at once)"
        [key] = first.input_requests or {}
        done = await client.session.call_tool(
            "ev_ask",
            args,
            input_responses={key: types.ElicitResult(action="decline")},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult) and _result(done) == "decline"
        # The place is free again.
        third = await client.session.call_tool(
            "ev_ask", {"question": "Three?"}, allow_input_required=True
        )
        assert isinstance(third, types.InputRequiredResult)
