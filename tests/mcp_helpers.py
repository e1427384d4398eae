"""Helpers for the MCP tests: real SDK servers (stdio subprocesses or streamable HTTP on
loopback, in-process), process-tree checks, and a run context that collects events."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from toolnexus_trio._runctx import RunServices, current_run

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
EVERYTHING = SERVERS / "everything.py"
sys.path.insert(0, str(SERVERS))
from everything import build as build_everything  # noqa: E402

__all__ = ["build_everything", "legacy_sse_app"]

HANG = ["sh", "-c", "sleep 300 & sleep 300"]
"""A 'server' that never answers initialize and has a child of its own."""


def stdio(*args: str, **extra: Any) -> dict[str, Any]:
    """A config entry that spawns the everything server over stdio."""
    return {"command": [sys.executable, str(EVERYTHING), *args], **extra}


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group *pgid*."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                found.append(int(entry))
    return found


def pid_alive(pid: int) -> bool:
    """Whether *pid* is a live (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2 : state.rindex(b")") + 3] != b"Z"


def children_groups() -> set[int]:
    """Process groups led by children of this process (a spawned server leads one)."""
    me = os.getpid()
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[1]) == me and fields[0] != b"Z":
                groups.add(int(fields[2]))
    return groups


@contextlib.asynccontextmanager
async def http_app(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI *app* on 127.0.0.1 (any port) with hypercorn's Trio worker; yields
    the base URL (``http://127.0.0.1:PORT``)."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1
    config.accesslog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield binds[0]
        finally:
            stop.set()


class _SseEndpoint:
    """The GET side of the legacy HTTP+SSE transport, as a plain ASGI app (Starlette
    routes an object, unlike a function, without wrapping it in a request/response)."""

    def __init__(self, server: Any, transport: Any) -> None:
        self.server, self.transport = server, transport

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with self.transport.connect_sse(scope, receive, send) as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())


def legacy_sse_app(server: Any) -> Any:
    """An SDK ``MCPServer`` speaking only the legacy HTTP+SSE transport (the SDK's
    ``SseServerTransport``): ``GET /sse`` streams, ``POST /messages/`` receives, and a
    POST to ``/sse`` (a streamable HTTP client's first try) gets 405."""
    from mcp.server.sse import SseServerTransport
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    transport = SseServerTransport("/messages/")
    lowlevel = server._lowlevel_server
    return Starlette(
        routes=[
            Route("/sse", endpoint=_SseEndpoint(lowlevel, transport), methods=["GET"]),
            Mount("/messages/", app=transport.handle_post_message),
        ]
    )


@contextlib.contextmanager
def collecting_run() -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Run the block as inside a client run: (stream events, metric events)."""
    events: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        events.append(event)
        await trio.lowlevel.checkpoint()

    token = current_run.set(RunServices(emit=emit, metric=metrics.append, sample=None))
    try:
        yield events, metrics
    finally:
        current_run.reset(token)
