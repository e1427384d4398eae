"""Gateway tool names: sanitized, at most 64 characters, distinct; the invoke keeps the original.

The host SDK refuses such action names at registration, so a hand-driven host on
loopback publishes them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
import trio
from gateway_helpers import FakeGateway
from gateway_rig import fake_host, hello_params, until_closed

from toolnexus_trio import ToolkitOptions, create_toolkit
from toolnexus_trio.cli._commands import run_gateway
from toolnexus_trio.tesseron import Gateway, GatewayOptions

VALID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
LONG = "x" * 80
LONG_TOO = "x" * 79 + "y"
ACTIONS = ["add item", "cart.clear", "cart clear", "cart_clear", "über", "a/b", LONG, LONG_TOO]


def h(original: str) -> str:
    return hashlib.sha256(original.encode()).hexdigest()[:8]


def _action(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"does {name}", "inputSchema": {"type": "object"}}


async def _echo_host(peer: FakeGateway, app_id: str, actions: list[str]) -> None:
    """Say hello with *actions*; answer every invoke with the action name it carried."""
    rid = peer.request(
        "tesseron/hello", hello_params(app_id, actions=[_action(a) for a in actions])
    )
    await peer.response(rid, others=[])
    try:
        while True:
            frame = await peer.recv()
            if frame.get("method") == "actions/invoke":
                params = frame["params"]
                peer.respond(frame["id"], {"invocationId": params["invocationId"], "output": params["name"]})  # fmt: skip
    finally:
        await until_closed(peer)


async def _tools_and_calls(app_id: str, actions: list[str]) -> dict[str, str]:
    """Tool name -> the action name the host received when that tool was called."""

    async def host_side(peer: FakeGateway) -> None:
        await _echo_host(peer, app_id, actions)

    out: dict[str, str] = {}
    with trio.fail_after(20):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            async with await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False)) as kit:
                for tool in kit.tools():
                    result = await kit.execute(tool.name, {})
                    assert not result.is_error, result.output
                    out[tool.name] = result.output
                # the provider adapters carry the same names
                assert [t["function"]["name"] for t in kit.to_openai()] == list(out)
    return out


async def test_action_names_become_valid_distinct_tool_names_and_invoke_the_original() -> None:
    seen = await _tools_and_calls("fake", ACTIONS)
    assert seen == {
        "fake__add_item": "add item",
        "fake__cart_clear_" + h("fake__cart.clear"): "cart.clear",
        "fake__cart_clear_" + h("fake__cart clear"): "cart clear",
        "fake__cart_clear": "cart_clear",  # already valid: kept
        "fake___ber": "über",
        "fake__a_b": "a/b",
        "fake__" + "x" * 49 + "_" + h("fake__" + LONG): LONG,
        "fake__" + "x" * 49 + "_" + h("fake__" + LONG_TOO): LONG_TOO,
    }
    assert all(VALID.fullmatch(name) for name in seen)


@pytest.mark.parametrize("app_id", ["a" * 70, "shop"], ids=["long-app-id", "short-app-id"])
async def test_a_long_app_id_still_gives_tool_names_of_at_most_64(app_id: str) -> None:
    seen = await _tools_and_calls(app_id, ["go", "go.on"])
    assert sorted(seen.values()) == ["go", "go.on"]
    assert all(VALID.fullmatch(name) for name in seen)


async def test_gateway_invoke_takes_the_original_action_name() -> None:
    async def host_side(peer: FakeGateway) -> None:
        await _echo_host(peer, "fake", ["cart.clear"])

    with trio.fail_after(20):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            assert await gw.invoke("fake", "cart.clear", {}) == "cart.clear"


async def test_the_gateway_command_lists_the_sanitized_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def host_side(peer: FakeGateway) -> None:
        await _echo_host(peer, "fake", ["cart.clear", "add"])

    with trio.fail_after(20):
        async with fake_host(host_side) as url:
            assert await run_gateway(url) == 0
    out = capsys.readouterr().out
    assert "\nfake__cart_clear (action 'cart.clear'): does cart.clear\n" in out
    assert "\nfake__add: does add\n" in out
