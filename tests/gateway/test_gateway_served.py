"""A Tesseron host's confirm/elicit/sample behind a toolkit served over MCP: relayed to
the MCP client that made the call (when it has the capability), else the gateway's own
``wait_for`` / the loop's model as without ``serve``."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from gateway_rig import Probe, probe_app, rig
from mcp import Client

from toolnexus_trio import Answer, Request


async def local_wait_for(request: Request) -> Answer:
    await trio.lowlevel.checkpoint()
    return Answer(request.id, True, {"name": "local"})


ERAS = ["legacy", "auto"]  # the initialize handshake, and 2026-07-28 (input rounds)


@pytest.mark.parametrize("era", ERAS)
async def test_confirm_and_elicit_reach_the_outer_mcp_client(era: str) -> None:
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> Any:
        asked.append(params)
        await trio.lowlevel.checkpoint()
        if params.requested_schema.get("properties"):
            return types.ElicitResult(action="accept", content={"name": "Remote"})
        return types.ElicitResult(action="decline")

    async with (
        rig(probe_app(Probe()), wait_for=local_wait_for) as r,
        r.toolkit.serve() as served,
        Client(served.url, mode=era, elicitation_callback=elicit) as client,
    ):
        renamed = await client.call_tool("shop__rename", {})
        deleted = await client.call_tool("shop__delete", {})
    assert json.loads(renamed.content[0].text) == {"value": {"name": "Remote"}}  # type: ignore[union-attr]
    assert json.loads(deleted.content[0].text) == {"confirmed": False}  # type: ignore[union-attr]
    assert [p.message for p in asked] == ["New name?", "Delete everything?"]


async def test_without_the_capability_the_gateway_wait_for_answers() -> None:
    async with (
        rig(probe_app(Probe()), wait_for=local_wait_for) as r,
        r.toolkit.serve() as served,
        Client(served.url, mode="legacy") as client,
    ):
        renamed = await client.call_tool("shop__rename", {})
    assert json.loads(renamed.content[0].text) == {"value": {"name": "local"}}  # type: ignore[union-attr]


@pytest.mark.parametrize("era", ERAS)
async def test_a_host_sampling_request_reaches_the_outer_mcp_client(era: str) -> None:
    async def sample(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        await trio.lowlevel.checkpoint()
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="four"),
            model="outer",
        )

    async with (
        rig(probe_app(Probe())) as r,
        r.toolkit.serve() as served,
        Client(served.url, mode=era, sampling_callback=sample) as client,
    ):
        result = await client.call_tool("shop__ask", {})
    assert result.content[0].text == "four"  # type: ignore[union-attr]
