"""Interop with the official A2A SDK (a2a-sdk 1.3, protocol 1.0), both ways:

- the SDK's client (under Trio) sends, polls and cancels tasks on our served toolkit;
- our outbound tools call an SDK server (asyncio, in a subprocess) in the 1.0 shapes,
  and a cancelled call's ``CancelTask`` reaches the SDK's running task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from a2a_helpers import served_agent

from toolnexus_trio import CancelToken, ToolContext, ToolkitOptions, create_toolkit
from toolnexus_trio.a2a import agent

pytest.importorskip("a2a")

from a2a.client import ClientConfig, create_client
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

HERE = Path(__file__).resolve().parent


def _request(text: str, message_id: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=text)]),
        configuration=SendMessageConfiguration(return_immediately=True),
    )


async def test_sdk_client_sends_polls_and_cancels_on_our_server() -> None:
    async with served_agent() as (served, model, ended, _):
        client = await create_client(served.base_url, ClientConfig(streaming=False))
        try:
            events = [ev async for ev in client.send_message(_request("hello sdk", "m1"))]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_SUBMITTED
            while True:
                got = await client.get_task(GetTaskRequest(id=task.id))
                if got.status.state not in (
                    TaskState.TASK_STATE_SUBMITTED,
                    TaskState.TASK_STATE_WORKING,
                ):
                    break
                await trio.sleep(0.01)
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
            assert [p.text for a in got.artifacts for p in a.parts] == ["echo: hello sdk"]

            events = [ev async for ev in client.send_message(_request("slow sdk", "m2"))]
            slow = events[-1].task
            await model.started.wait()
            cancelled = await client.cancel_task(CancelTaskRequest(id=slow.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        finally:
            await client.close()
    assert model.seen == ["hello sdk", "slow sdk"]  # the 1.0 text part reached the model
    assert model.cancelled == ["slow sdk"]
    assert [t.state for t in ended] == ["completed", "canceled"]


async def test_sdk_client_in_the_1_0_shapes() -> None:
    # Handed a 1.0 card for our endpoint, the SDK speaks 1.0 JSON-RPC (SendMessage with
    # A2A-Version: 1.0, ROLE_USER, parts without kind); our server answers in kind.
    async with served_agent() as (served, model, _, _):
        card = AgentCard(
            name="ours",
            description="",
            version="0.1.0",
            supported_interfaces=[
                AgentInterface(
                    url=served.base_url + "/", protocol_binding="JSONRPC", protocol_version="1.0"
                )
            ],
            capabilities=AgentCapabilities(streaming=False, push_notifications=False),
            default_input_modes=["text"],
            default_output_modes=["text"],
        )
        client = await create_client(card, ClientConfig(streaming=False))
        try:
            events = [ev async for ev in client.send_message(_request("one dot oh", "m1"))]
            task = events[-1].task
            while task.status.state in (
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
            ):
                await trio.sleep(0.01)
                task = await client.get_task(GetTaskRequest(id=task.id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert [p.text for a in task.artifacts for p in a.parts] == ["echo: one dot oh"]
            events = [ev async for ev in client.send_message(_request("slow 1.0", "m2"))]
            await model.started.wait()
            cancelled = await client.cancel_task(CancelTaskRequest(id=events[-1].task.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        finally:
            await client.close()
    assert model.seen == ["one dot oh", "slow 1.0"]
    assert model.cancelled == ["slow 1.0"]


class SdkServer:
    def __init__(self, proc: trio.Process, lines: trio.MemoryReceiveChannel[str]) -> None:
        self.proc = proc
        self.lines = lines
        self.port = 0

    async def line(self, prefix: str) -> str:
        with trio.fail_after(20):
            async for line in self.lines:
                if line.startswith(prefix):
                    return line
        raise AssertionError(f"the SDK server ended before printing {prefix!r}")


@contextlib.asynccontextmanager
async def sdk_server(tmp_path: Path) -> AsyncIterator[SdkServer]:
    """The a2a-sdk server subprocess (own process group, stdin /dev/null), killed after."""
    err = tmp_path / "sdk_server.err"
    with err.open("w") as errfile:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(HERE / "sdk_server.py")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errfile,
            start_new_session=True,
        )
    # Lines of the server's stdout; a buffer so the reader never blocks the server.
    send, receive = trio.open_memory_channel[str](100)

    async def read() -> None:
        assert proc.stdout is not None
        buffer = b""
        async with send:
            async for chunk in proc.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    await send.send(line.decode())

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            server = SdkServer(proc, receive)
            server.port = int((await server.line("PORT ")).split()[1])
            yield server
            nursery.cancel_scope.cancel()
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_our_tools_call_an_sdk_server(tmp_path: Path) -> None:
    async with sdk_server(tmp_path) as server:
        card = f"http://127.0.0.1:{server.port}/.well-known/agent-card.json"
        toolkit = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, poll_every=20)])
        )
        async with toolkit:
            assert [t.name for t in toolkit.tools()] == ["SDK_Echo_echo"]
            tool = toolkit.get("SDK_Echo_echo")
            assert tool is not None
            result = await tool.call({"task": "over 1.0"})
            assert not result.is_error, result.output
            assert result.output == "echo: over 1.0"
            meta: dict[str, Any] = result.metadata or {}
            assert meta["agent"] == "SDK Echo" and meta["state"] == "completed"

            token = CancelToken()
            results: list[Any] = []

            async def call() -> None:
                results.append(await tool.call({"task": "slow remote"}, ToolContext(cancel=token)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                assert await server.line("STARTED ") == "STARTED slow remote"
                token.cancel("stop")
            # SPEC §7A's string for a cancelled call.
            assert results[0].output == f"A2A task {results[0].metadata['taskId']} canceled"
            assert await server.line("CANCELLED ") == "CANCELLED slow remote"
