"""The server side of the WebSocket transport: the HTTP upgrade and the accept loop.

:func:`serve_websocket` listens, runs each connection's opening handshake on a
``websockets`` :class:`~websockets.server.ServerProtocol` (subprotocol, ``Origin``,
size limit) and then hands the open :class:`~._ws.WebSocket` to a handler with the
connection's writer task alongside. The host (:mod:`._host`) serves its gateway
connection with it; the engine both sides share is :mod:`._ws`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

import trio
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Origin, Subprotocol

from ._ws import (
    HANDSHAKE_TIMEOUT,
    MAX_MESSAGE_BYTES,
    RECEIVE_CHUNK,
    SUBPROTOCOL,
    WebSocket,
    WebSocketClosed,
    _log,
    _proto_log,
)

__all__ = ["serve_websocket"]


async def _server_handshake(
    stream: trio.SocketStream,
    required_subprotocol: str,
    max_message_bytes: int,
    allowed_origins: Sequence[str] = (),
) -> WebSocket | None:
    """Run the HTTP upgrade; return the open connection, or None after refusing it."""
    proto = ServerProtocol(
        # No Origin header (a gateway process) is always fine; a browser page's
        # Origin must be allowed explicitly, or the upgrade gets HTTP 403.
        origins=[None, *(Origin(o) for o in allowed_origins)],
        subprotocols=[Subprotocol(required_subprotocol)],
        max_size=max_message_bytes,
        logger=_proto_log,
    )
    request: Request | None = None
    # The protocol object gets the upgrade request and nothing after it: frames a
    # client pipelines behind the request go to the WebSocket, whose receiving code
    # needs the protocol's parser at a frame boundary (see WebSocket._receive). A
    # request has no body and ends at its first empty line.
    after = b""
    tail = b""  # the last bytes fed, in case the empty line straddles two reads
    while request is None:
        data = await stream.receive_some(RECEIVE_CHUNK)
        if not data:
            return None
        end = (tail + data).find(b"\r\n\r\n")
        if end >= 0:
            cut = end + 4 - len(tail)
            data, after = data[:cut], data[cut:]
        tail = (tail + data)[-3:]
        proto.receive_data(data)
        for event in proto.events_received():
            if isinstance(event, Request):
                request = event
        pending = proto.data_to_send()
        if request is None and pending:
            # The protocol answered a malformed request itself (e.g. 431).
            await _send_handshake_bytes(stream, pending)
            return None
        if request is None and proto.state is not State.CONNECTING:
            return None
        if proto.close_expected():
            return None
        if request is None and end >= 0:
            return None  # pragma: no cover - a complete request is always an event
    response = proto.accept(request)
    proto.send_response(response)
    await _send_handshake_bytes(stream, proto.data_to_send())
    if response.status_code != 101:
        _log.info("refused WebSocket upgrade: %s", proto.handshake_exc)
        return None
    ws = WebSocket(stream, proto, max_message_bytes)
    if after:
        ws._receive(after)
    ws._pull_output()
    return ws


async def _send_handshake_bytes(stream: trio.SocketStream, chunks: list[bytes]) -> None:
    data = b"".join(chunks)
    if data:
        await stream.send_all(data)
    if b"" in chunks:
        await stream.send_eof()


async def _serve_connection(
    stream: trio.SocketStream,
    handler: Callable[[WebSocket], Awaitable[None]],
    required_subprotocol: str,
    max_message_bytes: int,
    allowed_origins: Sequence[str] = (),
) -> None:
    async with stream:
        try:
            ws: WebSocket | None = None
            with trio.move_on_after(HANDSHAKE_TIMEOUT):
                ws = await _server_handshake(
                    stream, required_subprotocol, max_message_bytes, allowed_origins
                )
            if ws is None:
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except Exception:
            # A broken upgrade must never take the server down.
            _log.exception("WebSocket upgrade failed")
            return
        await _run_connection(ws, handler)


async def _run_connection(ws: WebSocket, handler: Callable[[WebSocket], Awaitable[None]]) -> None:
    code, reason = 1000, ""
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws._run_writer)
            try:
                await handler(ws)
            except WebSocketClosed:
                pass  # the peer went away; nothing to report
            except Exception:
                _log.exception("WebSocket handler failed")
                code, reason = 1011, "internal error"
            except BaseException:
                code, reason = 1001, "going away"
                raise
            finally:
                # Also stops the writer, which lets the nursery exit.
                await ws.aclose(code, reason)
    except Exception:
        # Connection-level failures stay with the connection, never the server.
        _log.exception("WebSocket connection failed")


async def serve_websocket(
    handler: Callable[[WebSocket], Awaitable[None]],
    *,
    host: str,
    port: int,
    required_subprotocol: str = SUBPROTOCOL,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    allowed_origins: Sequence[str] = (),
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve WebSocket connections on ``host:port`` until cancelled.

    ``port`` 0 lets the OS pick; ``task_status.started(bound_port)`` reports it.
    For each TCP connection: complete the HTTP upgrade (bounded by a handshake
    timeout); if the client did not offer ``required_subprotocol``, answer HTTP 400
    and close; else select it and run ``handler(ws)`` with the connection's writer
    task alongside. When the handler returns or raises, the connection is closed
    (1000; 1011 on error, logged). A broken or garbage upgrade never crashes the
    server. Each connection runs in its own task in the server's nursery. An upgrade
    that carries an ``Origin`` header (a browser page) is refused with HTTP 403 unless
    the origin is in ``allowed_origins``; gateways send none.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0 and len(listeners) > 1:
        # Each address family would get a different OS-picked port; keep one.
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    bound_port: int = listeners[0].socket.getsockname()[1]

    async def on_connection(stream: trio.SocketStream) -> None:
        await _serve_connection(
            stream, handler, required_subprotocol, max_message_bytes, allowed_origins
        )

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, on_connection, listeners)
        task_status.started(bound_port)
        await trio.sleep_forever()
    raise AssertionError("unreachable: serve_websocket only ends by raising")
