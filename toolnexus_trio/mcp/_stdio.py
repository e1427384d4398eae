"""The stdio transport to a local MCP server, on Trio, with a bounded shutdown.

We spawn the server ourselves (not the SDK's ``stdio_client``) for three reasons:

- **The whole process tree dies.** The server runs in its own process group; on close
  every member of the group is signalled, even when the server itself already exited
  and left children behind (``npx`` -> ``node`` is that shape).
- **Shutdown is bounded, and short.** A server that finished its handshake gets EOF on
  stdin and :data:`EOF_GRACE` seconds to exit, then the group gets SIGTERM and
  :data:`TERM_GRACE` seconds, then SIGKILL: at most about 2.5 s, all shielded so a
  cancelled caller cannot leak a process. A server that never finished its handshake
  (a cancelled or timed-out connect) is killed at once: nothing of it is worth a grace.
  The SDK's own shielded teardown waits 2 s + 2 s + 2 s.
- **Memory stays bounded.** One line (one JSON-RPC message) may be at most
  :data:`MAX_LINE_BYTES`; a server that sends more is disconnected.

The server's stderr is ours (its logs show where ours do); its stdin and stdout are
the protocol pipes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import Final

import anyio
import attrs
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from ._config import McpServerConfig

logger = logging.getLogger("toolnexus_trio.mcp")

MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""The largest message a stdio server may send (one line of JSON)."""
EOF_GRACE: Final = 1.0
"""Seconds a connected server gets to exit after its stdin closes."""
TERM_GRACE: Final = 1.0
"""Seconds between SIGTERM and SIGKILL to the server's process group."""
_REAP_BOUND: Final = 0.5
_POLL: Final = 0.01
_CHUNK: Final = 65536


@attrs.define(eq=False)
class StdioTransport:
    """A running server process and the SDK-shaped streams that talk to it.

    Set ``graceful`` once the handshake is done: closing then gives the server its EOF
    grace instead of killing it at once. ``closed`` is set when the server's stdout
    ends (it exited or closed it).
    """

    process: trio.Process
    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    write: MemoryObjectSendStream[SessionMessage]
    closed: trio.Event = attrs.field(factory=trio.Event)
    graceful: bool = False


def _group_alive(pgid: int) -> bool:
    """Whether any member of the group is running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg also answers for unreaped zombies; look closer where /proc exists.
    proc = "/proc"
    if not os.path.isdir(proc):
        return True
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"{proc}/{entry}/stat", "rb") as f:
                stat = f.read()
            # Fields after the ")" that ends the command name: state, ppid, pgrp.
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _stop(process: trio.Process, graceful: bool) -> None:
    """Stop the server and every process of its group (run shielded by the caller)."""
    pgid = process.pid  # start_new_session: the server leads its own group
    if graceful:
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            assert process.stdin is not None
            await process.stdin.aclose()
        with trio.move_on_after(EOF_GRACE):
            await process.wait()
    if _group_alive(pgid):
        if graceful:
            _signal_group(pgid, signal.SIGTERM)
            with trio.move_on_after(TERM_GRACE):
                while _group_alive(pgid):
                    process.poll()  # reaps the leader, which otherwise keeps the group
                    await trio.sleep(_POLL)
        _signal_group(pgid, signal.SIGKILL)
    with trio.move_on_after(_REAP_BOUND):
        await process.wait()
    if process.returncode is None:
        logger.warning("MCP server process %d survived SIGKILL; abandoning it", process.pid)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                await pipe.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return exc


async def _reader(
    transport: StdioTransport, send: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    stdout = transport.process.stdout
    assert stdout is not None
    buffer = bytearray()
    try:
        async with send:
            while True:
                chunk = await stdout.receive_some(_CHUNK)
                if not chunk:
                    return
                start = len(buffer)
                buffer += chunk
                while (end := buffer.find(b"\n", start)) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    start = 0
                    if line.strip():
                        await send.send(_parse(line))
                if len(buffer) > MAX_LINE_BYTES:
                    logger.error(
                        "MCP server process %d sent a line over %d bytes; disconnecting",
                        transport.process.pid,
                        MAX_LINE_BYTES,
                    )
                    return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return  # the session is gone
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        return  # our own shutdown closed the pipe
    finally:
        transport.closed.set()


async def _writer(
    transport: StdioTransport,
    receive: MemoryObjectReceiveStream[SessionMessage],
    read_side: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    stdin = transport.process.stdin
    assert stdin is not None
    try:
        async with receive:
            async for message in receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send_all(data.encode() + b"\n")
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's view too, so no request
        # waits forever on an answer that cannot come.
        await read_side.aclose()


@contextlib.asynccontextmanager
async def open_stdio(config: McpServerConfig) -> AsyncIterator[StdioTransport]:
    """Spawn *config*'s command (environment: ours plus ``config.environment``) and
    yield the transport; leaving the block stops the whole process group (bounded)."""
    env = {**os.environ, **config.environment}
    process = await trio.lowlevel.open_process(
        list(config.command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=config.cwd,
        start_new_session=True,
    )
    # No await until the try: a cancel in between would leak the process.
    # Size 0: the session takes each message as it comes; nothing queues up here.
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    transport = StdioTransport(process, read_recv, write_send)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reader, transport, read_send)
            nursery.start_soon(_writer, transport, write_recv, read_send)
            try:
                yield transport
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process, transport.graceful)
        for stream in (read_recv, write_send):
            stream.close()
