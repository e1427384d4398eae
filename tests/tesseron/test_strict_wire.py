"""Strict wire values over a real loopback host: ``"false"`` is not a boolean.

The host reads the gateway's welcome and ``tesseron/claimed`` with the shared strict
converter, so a string where the protocol says boolean fails the handshake with
``-32602`` (welcome) or is ignored (a notification has nobody to answer), and never
turns a capability on.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from gateway_helpers import NO_CAPS, dial, gateway, serving, welcome

from toolnexus_trio.tesseron import (
    ActionContext,
    Disconnected,
    HandshakeFailed,
    TesseronApp,
    Welcome,
)


def make_app() -> TesseronApp:
    app = TesseronApp("shop", "Acme Shop")

    @app.action("sampling_on")
    async def sampling_on(input: Any, ctx: ActionContext) -> Any:
        return ctx.agent_capabilities.sampling

    return app


@pytest.mark.parametrize(
    "change",
    [
        {"capabilities": {**NO_CAPS, "sampling": "false"}},
        {"capabilities": {**NO_CAPS, "elicitation": 1}},
        {"capabilities": {**NO_CAPS, "streaming": [0]}},
        {"sessionId": 12345},
        {"agent": {"id": 7, "name": "Claude"}},
    ],
    ids=["sampling-string", "elicitation-int", "streaming-list", "session-id-int", "agent-id-int"],
)
async def test_a_welcome_with_a_wrong_kind_fails_the_handshake_with_32602(
    change: dict[str, Any],
) -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            events = host.events()
            async with dial(host) as gw:
                hello = await gw.recv()
                gw.respond(hello["id"], {**welcome(NO_CAPS), **change})
                await gw.expect_closed()  # no session, and no retry
            ev = await events.receive()
            assert isinstance(ev, HandshakeFailed)
            assert ev.error.code == -32602
            assert ev.error.message == "Malformed welcome"
            assert isinstance(await events.receive(), Disconnected)
            assert host.welcome is None


async def test_claimed_capabilities_as_strings_never_turn_sampling_on() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            events = host.events()
            async with gateway(host, NO_CAPS) as gw:
                assert isinstance(await events.receive(), Welcome)
                gw.notify(
                    "tesseron/claimed",
                    {"agent": {"id": "a", "name": "A"}, "agentCapabilities": {"sampling": "false"}},
                )
                # Frames are handled in order: this invoke sees the claimed outcome.
                assert (await gw.call("sampling_on", {}))["result"]["output"] is False
                # A well-formed claim is still applied.
                gw.notify(
                    "tesseron/claimed",
                    {"agent": {"id": "a", "name": "A"}, "agentCapabilities": {"sampling": True}},
                )
                assert (await gw.call("sampling_on", {}))["result"]["output"] is True


@attrs.frozen
class Refund:
    approved: bool
    cents: int


async def test_action_input_structuring_is_strict_and_answers_32004() -> None:
    app = TesseronApp("shop", "Acme Shop")
    seen: list[Refund] = []

    # A permissive published schema: only the converter stands between "false" and True.
    @app.action("refund", input_schema={"type": "object"})
    async def refund(input: Refund, ctx: ActionContext) -> Any:
        seen.append(input)
        return input.approved

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            for bad in ({"approved": "false", "cents": 5}, {"approved": False, "cents": "5"}):
                error = (await gw.call("refund", bad))["error"]
                assert error["code"] == -32004, error
                # The issue names the field and the reason, not cattrs' group summary.
                message = error["data"][0]["message"]
                assert "expected" in message and "@ $." in message, message
            good = await gw.call("refund", {"approved": False, "cents": 5})
            assert good["result"]["output"] is False
    assert seen == [Refund(False, 5)]


async def test_claimed_at_true_is_not_a_timestamp() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            events = host.events()
            async with gateway(host, NO_CAPS) as gw:
                assert isinstance(await events.receive(), Welcome)
                gw.notify(
                    "tesseron/claimed", {"agent": {"id": "a", "name": "A"}, "claimedAt": True}
                )
                claimed = await events.receive()
                assert claimed.claimed_at is None
                gw.notify("tesseron/claimed", {"agent": {"id": "a", "name": "A"}, "claimedAt": 17})
                assert (await events.receive()).claimed_at == 17
