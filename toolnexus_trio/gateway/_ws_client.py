"""The client side of the WebSocket transport: dialling a host.

:func:`connect_websocket` runs the opening handshake on a ``websockets``
:class:`~websockets.client.ClientProtocol` and yields the open
:class:`~toolnexus_trio.tesseron._ws.WebSocket` with its writer task alongside. It is
here, with the gateway, because the gateway is the side that dials: the engine both
sides share (and the server side) are the host's, in :mod:`toolnexus_trio.tesseron`,
which the gateway imports and which never imports the gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidURI
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from .._groups import collapse_groups
from ..tesseron._ws import (
    CLOSE_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    MAX_MESSAGE_BYTES,
    RECEIVE_CHUNK,
    SUBPROTOCOL,
    WebSocket,
    WebSocketClosed,
    _proto_log,
)

__all__ = ["connect_websocket"]


async def _client_handshake(
    url: str, subprotocols: Sequence[str], max_message_bytes: int
) -> WebSocket:
    try:
        uri = parse_uri(url)
    except InvalidURI as exc:
        raise ValueError(f"not a WebSocket URL: {url!r}") from exc
    if uri.secure:
        raise ValueError("wss:// is not supported")
    proto = ClientProtocol(
        uri,
        subprotocols=[Subprotocol(s) for s in subprotocols] or None,
        max_size=max_message_bytes,
        logger=_proto_log,
    )
    stream = await trio.open_tcp_stream(uri.host, uri.port)
    try:
        proto.send_request(proto.connect())
        await stream.send_all(b"".join(proto.data_to_send()))
        opened = False
        leftover: list[object] = []
        while not opened:
            data = await stream.receive_some(RECEIVE_CHUNK)
            if data:
                proto.receive_data(data)
            else:
                proto.receive_eof()
            leftover.extend(proto.events_received())
            if proto.handshake_exc is not None:
                raise WebSocketClosed(None, f"handshake refused: {proto.handshake_exc}")
            if proto.state is not State.CONNECTING:
                # Frames behind the 101 may already have moved us on to CLOSING.
                opened = True
            elif not data:
                raise WebSocketClosed(None, "connection closed during handshake")
        ws = WebSocket(stream, proto, max_message_bytes)
        ws._handle_events(leftover)
        ws._pull_output()
        return ws
    except BaseException:
        with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await stream.aclose()
        raise


@asynccontextmanager
async def connect_websocket(
    url: str,
    *,
    subprotocols: Sequence[str] = (SUBPROTOCOL,),
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> AsyncIterator[WebSocket]:
    """Dial ``ws://host:port/path`` and yield the open connection.

    For the gateway, tests and the conformance runner. Raises
    :class:`WebSocketClosed` (refused handshake) or :class:`OSError` (refused
    connection). The connection is closed (1000) when the block exits.
    """
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            ws = await _client_handshake(url, subprotocols, max_message_bytes)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise WebSocketClosed(None, f"connection lost during handshake: {exc!r}") from exc
    except trio.TooSlowError as exc:
        raise WebSocketClosed(None, "handshake timed out") from exc
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws._run_writer)
            try:
                yield ws
            finally:
                await ws.aclose()
