"""The stdio pipes to an MCP server, on a real process (``cat``, which echoes what the
writer sends back to the reader): every send and receive is a cancel point, a send the
pipe takes whole does not also take a scheduler pass, except every few in a row, and a
pipe closed under the reader is the end of the stream.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import trio
import trio.testing
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from toolnexus_trio._streak import FAIR_EVERY
from toolnexus_trio.mcp._stdio import StdioTransport

pytestmark = pytest.mark.skipif(shutil.which("cat") is None, reason="needs cat")


def message(n: int) -> SessionMessage:
    line = json.dumps({"jsonrpc": "2.0", "method": "notifications/ping", "params": {"n": n}})
    return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))


@asynccontextmanager
async def echo() -> AsyncIterator[StdioTransport]:
    process = await trio.lowlevel.open_process(
        ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        yield StdioTransport(process)
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    await pipe.aclose()


async def test_what_is_sent_comes_back_in_order() -> None:
    async with echo() as pipes:
        for n in range(3):
            await pipes.write.send(message(n))
        for n in range(3):
            got = await pipes.read.receive()
            assert isinstance(got, SessionMessage)
            assert got.message.model_dump(exclude_unset=True)["params"] == {"n": n}


async def test_send_and_receive_are_cancel_points_even_when_ready() -> None:
    async with echo() as pipes:
        await pipes.write.send(message(1))
        stdout = pipes.process.stdout
        assert stdout is not None
        await trio.lowlevel.wait_readable(stdout.fileno())  # cat echoed: bytes are ready
        with trio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(trio.Cancelled):
                await pipes.write.send(message(2))
            with pytest.raises(trio.Cancelled):
                await pipes.read.receive()
        got = await pipes.read.receive()  # nothing lost, nothing extra sent
        assert isinstance(got, SessionMessage)
        assert got.message.model_dump(exclude_unset=True)["params"] == {"n": 1}


async def test_sends_the_pipe_takes_at_once_skip_the_scheduler_but_stay_fair() -> None:
    async with echo() as pipes:
        ran = 0

        async def other() -> None:
            nonlocal ran
            while True:
                ran += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.lowlevel.checkpoint()  # other runs once, then waits for its turn
            before = ran
            for n in range(FAIR_EVERY - 1):
                await pipes.write.send(message(n))
            assert ran == before  # no scheduler pass: the pipe took each at once
            for n in range(4 * FAIR_EVERY):
                await pipes.write.send(message(n))  # small: the pipe takes each whole
            assert not pipes.write.queue
            assert ran - before >= 3
            nursery.cancel_scope.cancel()


async def test_a_pipe_closed_under_the_reader_ends_the_stream() -> None:
    async with echo() as pipes:
        stdout = pipes.process.stdout
        assert stdout is not None

        async def close_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()  # the reader waits on the pipe
            await stdout.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_soon)
            with pytest.raises(anyio.EndOfStream):
                await pipes.read.receive()  # waiting when the pipe is closed
        with pytest.raises(anyio.EndOfStream):
            await pipes.read.receive()
        assert pipes.closed.is_set()
