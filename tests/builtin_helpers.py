"""Helpers of the builtin tests: a loopback web server with fixed routes, process checks."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import h11
import trio


async def _serve_one(stream: trio.SocketStream, routes: Mapping[str, Mapping[str, Any]]) -> None:
    conn = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    async with stream:
        while request is None:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.ConnectionClosed):
                return
        route = routes.get(request.target.decode())
        if route is None:
            route = {"status": 404, "type": "text/plain", "body": b"no such route"}
        if "arrived" in route:
            route["arrived"].set()  # a test's signal that the request reached the server
        await trio.sleep(route.get("delay", 0))
        headers = [("connection", "close")]
        if not route.get("chunked"):
            headers.append(("content-length", str(len(route["body"]))))
        if "type" in route:
            headers.append(("content-type", route["type"]))
        if "location" in route:
            headers.append(("location", route["location"]))
        head = conn.send(h11.Response(status_code=route["status"], headers=headers))
        body = conn.send(h11.Data(data=route["body"])) if route["body"] else b""
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(head + body + conn.send(h11.EndOfMessage()))


@asynccontextmanager
async def open_route_server(
    routes: Mapping[str, Mapping[str, Any]],
) -> AsyncIterator[str]:
    """Serve GET *routes* on loopback (one connection per request); yield the base URL.

    A route is ``{status, type?, location?, body, delay?, chunked?, arrived?}`` (``delay``
    in seconds; ``chunked`` sends no Content-Length; ``arrived``, a ``trio.Event``, is set
    when a request for the route is read).
    """
    async with trio.open_nursery() as nursery:
        handler = functools.partial(_serve_one, routes=routes)
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


def live_group_members(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group *pgid*, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found
