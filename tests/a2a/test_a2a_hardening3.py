"""Round-3 hardening of A2A (issue 30, items 8-10): the agent's timeout bounds every
request of a call; a ``SendMessage`` that cannot be reported never starts its task;
hostile but valid JSON gets JSON-RPC errors, never a 500 or a reply that is not JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from a2a_helpers import SKILLS, Model

from toolnexus_trio import (
    InProcessOptions,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, A2AServer, A2AServing, agent

pytest.importorskip("hypercorn")


class Hanging(A2AServer):
    """Our server, except that requests of the method ``hang`` are never answered
    (until ``release`` is set, at the end of the test)."""

    hang: str
    release: trio.Event
    hung: trio.Event

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if json.loads(body).get("method") == self.hang:
            self.hung.set()
            await self.release.wait()
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await super().__call__(scope, replay, send)


@pytest.mark.parametrize("method", ["SendMessage", "GetTask"])
async def test_the_agents_timeout_bounds_an_unanswered_request(method: str) -> None:
    # Was: the call ran on past 8 s (SendMessage fully shielded, GetTask unbounded).
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    client = create_in_process_client(InProcessOptions(model="scripted", generate=Model().generate))
    server = Hanging(toolkit, client, A2AServeConfig(name="hang"))
    server.hang, server.release, server.hung = method, trio.Event(), trio.Event()
    async with toolkit, A2AServing(server) as served:
        try:
            caller = await create_toolkit(
                ToolkitOptions(
                    builtins=False, agents=[agent(served.card_url, timeout=1000, poll_every=20)]
                )
            )
            async with caller:
                tool = caller.get("hang_echo")
                assert tool is not None
                # A generous guard: the call must end by itself, at its 1 s deadline
                # (plus at most the CancelTask grace when a task id is known).
                with trio.fail_after(8):
                    result = await tool.call({"task": "slow forever"})
        finally:
            server.release.set()
    assert server.hung.is_set()
    assert result.is_error and "timed out after 1000ms" in result.output
