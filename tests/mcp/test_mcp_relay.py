"""A relay tool served over MCP (SPEC §10 relay addendum through §7C ``serve``).

What the MCP client sees: the relay tool in ``tools/list`` like any tool; calling it
asks the client to run the call itself, by elicitation (a handshake-era connection) or
``InputRequiredResult`` (2026-07-28), with a form of ``output`` and ``isError``; the
call's result is what the client sent. A client with neither is told what was asked.
Driven by the SDK's own client over streamable HTTP on loopback.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client

from toolnexus_trio import (
    Answer,
    Request,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    create_toolkit,
    define_tool,
    open_toolkit,
    pending,
    relay_tool,
)
from toolnexus_trio.mcp._elicit import RELAY_FORM

ERAS = ["legacy", "auto"]  # the initialize handshake (2025-11-25) and 2026-07-28
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def served_toolkit() -> Any:
    weather = relay_tool("get_weather", "The weather in a city.", CITY)
    return await create_toolkit(ToolkitOptions(extra_tools=[weather], builtins=False))


def text(result: Any) -> str:
    return result.content[0].text  # type: ignore[no-any-return]


@pytest.mark.parametrize("era", ERAS)
async def test_the_mcp_client_runs_the_relayed_call(era: str) -> None:
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        if "Oslo" in params.message:
            return types.ElicitResult(action="decline")
        if "Nowhere" in params.message:
            return types.ElicitResult(
                action="accept", content={"output": "no such city", "isError": True}
            )
        return types.ElicitResult(action="accept", content={"output": "sunny"})

    toolkit = await served_toolkit()
    async with (
        toolkit.serve() as served,
        Client(served.url, mode=era, elicitation_callback=elicit) as client,
    ):
        listed = await client.list_tools()
        assert [(t.name, t.input_schema) for t in listed.tools] == [("get_weather", CITY)]
        result = await client.call_tool("get_weather", {"city": "Paris"})
        assert (text(result), result.is_error) == ("sunny", False)
        failed = await client.call_tool("get_weather", {"city": "Nowhere"})
        assert (text(failed), failed.is_error) == ("no such city", True)
        declined = await client.call_tool("get_weather", {"city": "Oslo"})
        assert declined.is_error
        assert text(declined) == "relay declined (declined): the caller did not run get_weather"
    assert asked[0].mode == "form"
    assert asked[0].requested_schema == RELAY_FORM
    assert asked[0].message == (
        'Run the tool get_weather with the arguments {"city":"Paris"} on your side and '
        "give its output (and whether it failed)."
    )


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_is_told_what_to_run(era: str) -> None:
    toolkit = await served_toolkit()
    async with toolkit.serve() as served, Client(served.url, mode=era) as plain:
        refused = await plain.call_tool("get_weather", {"city": "Paris"})
    assert refused.is_error
    assert "waiting for tool_call: Relayed to the caller: get_weather(" in text(refused)
    assert "cannot be answered here" in text(refused)


async def test_a_served_relay_reaches_the_outer_toolkits_wait_for() -> None:
    # Toolkit B uses A's relay tool over MCP: A's request arrives at B's wait_for as an
    # input form (MCP carries no relay kind), and B's answer is the call's result.
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        return Answer(request.id, True, {"output": "warm"})

    inner = await served_toolkit()
    async with inner.serve() as served:
        options = ToolkitOptions(mcp={"a": {"url": served.url}}, wait_for=wait_for, builtins=False)
        async with open_toolkit(options) as outer:
            result = await outer.execute("a_get_weather", {"city": "Rome"})
    assert (result.output, result.is_error) == ("warm", False)
    assert asked[0].kind == "input" and asked[0].data == {"schema": RELAY_FORM}
    assert "get_weather" in asked[0].prompt and '{"city":"Rome"}' in asked[0].prompt


async def test_only_a_relay_tool_gets_the_relay_form() -> None:
    # A tool of another source that happens to suspend with kind "tool_call" is served
    # exactly as before relay tools existed: its prompt, a confirm form.
    async def own(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            return pending(Request(kind="tool_call", prompt="Mine?", data={"calls": []}))
        return ToolResult.ok("fine")

    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={})

    tk = await create_toolkit(
        ToolkitOptions(extra_tools=[define_tool("own", "", None, own)], builtins=False)
    )
    async with (
        tk.serve() as served,
        Client(served.url, mode="legacy", elicitation_callback=elicit) as client,
    ):
        assert text(await client.call_tool("own", {})) == "fine"
    assert (asked[0].message, asked[0].requested_schema) == (
        "Mine?",
        {"type": "object", "properties": {}},
    )
