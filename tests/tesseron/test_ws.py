"""Tests for the Sans-I/O WebSocket layer, over real loopback sockets.

Where a test needs frames our own client never sends (binary, fragments, pings,
an abrupt disconnect), it drives a ``websockets`` ClientProtocol by hand.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
import trio
import trio.testing
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from toolnexus_trio.gateway._ws_client import connect_websocket
from toolnexus_trio.tesseron._ws import HANDSHAKE_TIMEOUT, SUBPROTOCOL, WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

GUARD = 15  # generous deadline against hangs; never a timing assertion

Handler = Callable[[WebSocket], Awaitable[None]]


async def start_server(nursery: trio.Nursery, handler: Handler, **kwargs: Any) -> int:
    port = await nursery.start(
        functools.partial(serve_websocket, handler, host="127.0.0.1", port=0, **kwargs)
    )
    return cast(int, port)


def url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/"


async def echo(ws: WebSocket) -> None:
    while True:
        for message in await ws.receive_batch():
            ws.send_nowait(message)


class RawPeer:
    """A hand-driven client protocol over a real socket."""

    def __init__(self, stream: trio.SocketStream, proto: ClientProtocol) -> None:
        self.stream = stream
        self.proto = proto
        self.frames: list[Frame] = []

    async def flush(self) -> None:
        data = b"".join(self.proto.data_to_send())
        if data:
            await self.stream.send_all(data)

    async def next_frame(self) -> Frame:
        while not self.frames:
            data = await self.stream.receive_some(65536)
            if data:
                self.proto.receive_data(data)
            else:
                self.proto.receive_eof()
            self.frames.extend(e for e in self.proto.events_received() if isinstance(e, Frame))
            await self.flush()
            if not data and not self.frames:
                raise EOFError
        return self.frames.pop(0)


@asynccontextmanager
async def raw_peer(port: int, headers: dict[str, str] | None = None) -> AsyncIterator[RawPeer]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        proto = ClientProtocol(parse_uri(url(port)), subprotocols=[Subprotocol(SUBPROTOCOL)])
        request = proto.connect()
        for key, value in (headers or {}).items():
            request.headers[key] = value
        proto.send_request(request)
        peer = RawPeer(stream, proto)
        await peer.flush()
        while proto.state is State.CONNECTING:
            data = await stream.receive_some(65536)
            assert data, "server closed during handshake"
            proto.receive_data(data)
            assert proto.handshake_exc is None
            peer.frames.extend(e for e in proto.events_received() if isinstance(e, Frame))
        yield peer


async def test_echo_round_trip(nursery: trio.Nursery) -> None:
    with trio.fail_after(GUARD):
        port = await start_server(nursery, echo)
        async with connect_websocket(url(port)) as ws:
            assert ws.subprotocol == SUBPROTOCOL
            await ws.send('{"jsonrpc":"2.0","method":"ping"}')
            assert await ws.receive_batch() == ['{"jsonrpc":"2.0","method":"ping"}']
            ws.send_nowait("héllo ✓")
            assert await ws.receive_batch() == ["héllo ✓"]


async def test_server_frames_of_every_header_size_arrive_intact(nursery: trio.Nursery) -> None:
    """A server writes its frames' headers itself: 7-bit, 16-bit and 64-bit lengths."""
    sizes = [0, 1, 125, 126, 127, 65535, 65536, 70000]
    messages = ["é" * (size // 2) + "x" * (size % 2) for size in sizes]

    async def serve(ws: WebSocket) -> None:
        for message in messages:
            ws.send_nowait(message)
        ws.send_nowait("as bytes ✓".encode())  # already UTF-8
        await ws.receive_batch()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, serve)
        async with connect_websocket(url(port)) as ws:
            received: list[str] = []
            while len(received) < len(messages) + 1:
                received.extend(await ws.receive_batch())
    assert [len(m.encode()) for m in received[:-1]] == sizes
    assert received == [*messages, "as bytes ✓"]


async def test_binary_and_fragmented_frames_arrive_as_text(nursery: trio.Nursery) -> None:
    received: list[str] = []
    done = trio.Event()

    async def collect(ws: WebSocket) -> None:
        while len(received) < 3:
            received.extend(await ws.receive_batch())
        done.set()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, collect)
        async with raw_peer(port) as peer:
            peer.proto.send_binary('{"bin":"ü"}'.encode())
            peer.proto.send_binary(b"\xff ok")  # invalid UTF-8 is replaced, not fatal
            peer.proto.send_text(b'{"a":', fin=False)
            peer.proto.send_continuation(b'"frag"', fin=False)
            peer.proto.send_continuation(b"}", fin=True)
            await peer.flush()
            await done.wait()
    assert received == ['{"bin":"ü"}', "\ufffd ok", '{"a":"frag"}']


async def test_ping_is_answered_with_pong(nursery: trio.Nursery) -> None:
    async def idle(ws: WebSocket) -> None:
        await ws.receive_batch()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, idle)
        async with raw_peer(port) as peer:
            peer.proto.send_ping(b"are-you-there")
            await peer.flush()
            frame = await peer.next_frame()
    assert frame.opcode is Opcode.PONG
    assert frame.data == b"are-you-there"


async def test_missing_subprotocol_is_refused_with_400(nursery: trio.Nursery) -> None:
    called = False

    async def handler(ws: WebSocket) -> None:
        nonlocal called
        called = True

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler)
        with pytest.raises(WebSocketClosed) as info:
            async with connect_websocket(url(port), subprotocols=()):
                pass
        assert info.value.code is None
        assert "400" in info.value.reason
        with pytest.raises(WebSocketClosed, match="400"):
            async with connect_websocket(url(port), subprotocols=("chat",)):
                pass
        # And on the wire: a plain HTTP 400 status line.
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(
                b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            reply = b""
            while chunk := await stream.receive_some(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 ")
    assert not called


async def test_pipelined_messages_arrive_in_order_and_batched(nursery: trio.Nursery) -> None:
    batch_sizes: list[int] = []

    async def recording_echo(ws: WebSocket) -> None:
        while True:
            batch = await ws.receive_batch()
            batch_sizes.append(len(batch))
            for message in batch:
                ws.send_nowait(message)

    count = 2000
    with trio.fail_after(GUARD):
        port = await start_server(nursery, recording_echo)
        async with connect_websocket(url(port)) as ws:
            for i in range(count):
                ws.send_nowait(f'{{"id":{i}}}')
            echoed: list[str] = []
            while len(echoed) < count:
                echoed.extend(await ws.receive_batch())
    assert echoed == [f'{{"id":{i}}}' for i in range(count)]
    assert sum(batch_sizes) == count
    # Queued without awaiting, the frames leave in few writes and arrive in few reads.
    assert max(batch_sizes) > 1


async def test_oversize_message_closes_with_1009(nursery: trio.Nursery) -> None:
    server_saw: list[WebSocketClosed] = []

    async def handler(ws: WebSocket) -> None:
        try:
            await ws.receive_batch()
        except WebSocketClosed as exc:
            server_saw.append(exc)

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler, max_message_bytes=1000)
        async with connect_websocket(url(port)) as ws:
            ws.send_nowait("x" * 1001)
            with pytest.raises(WebSocketClosed) as info:
                await ws.receive_batch()
            assert ws.closed
    assert info.value.code == 1009
    assert "1001 bytes exceeds limit of 1000 bytes" in info.value.reason
    assert len(server_saw) == 1
    assert server_saw[0].code == 1009


async def test_message_at_limit_is_accepted(nursery: trio.Nursery) -> None:
    with trio.fail_after(GUARD):
        port = await start_server(nursery, echo, max_message_bytes=1000)
        async with connect_websocket(url(port)) as ws:
            ws.send_nowait("y" * 1000)
            assert await ws.receive_batch() == ["y" * 1000]


async def test_peer_vanishing_raises_websocketclosed(nursery: trio.Nursery) -> None:
    server_saw: list[WebSocketClosed] = []
    entered = trio.Event()
    done = trio.Event()

    async def handler(ws: WebSocket) -> None:
        entered.set()
        try:
            await ws.receive_batch()
        except WebSocketClosed as exc:
            server_saw.append(exc)
            with pytest.raises(WebSocketClosed):
                ws.send_nowait("too late")
        finally:
            done.set()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler)
        async with raw_peer(port):
            await entered.wait()
        # The raw peer's stream closed with no close frame.
        await done.wait()
    assert len(server_saw) == 1
    assert server_saw[0].code == 1006


async def test_server_vanishing_raises_on_client(nursery: trio.Nursery) -> None:
    async def raw_server(stream: trio.SocketStream) -> None:
        # Accept the upgrade by hand, then drop the TCP connection.
        from websockets.server import ServerProtocol

        proto = ServerProtocol(subprotocols=[Subprotocol(SUBPROTOCOL)])
        while True:
            proto.receive_data(await stream.receive_some(65536))
            events = proto.events_received()
            if events:
                break
        proto.send_response(proto.accept(events[0]))  # type: ignore[arg-type]
        await stream.send_all(b"".join(proto.data_to_send()))
        await stream.aclose()

    with trio.fail_after(GUARD):
        listeners = await nursery.start(trio.serve_tcp, raw_server, 0)
        port = listeners[0].socket.getsockname()[1]
        async with connect_websocket(url(port)) as ws:
            with pytest.raises(WebSocketClosed) as info:
                await ws.receive_batch()
            assert info.value.code == 1006
            with pytest.raises(WebSocketClosed):
                ws.send_nowait("x")


async def test_aclose_is_idempotent_and_reaches_the_peer(nursery: trio.Nursery) -> None:
    server_saw: list[WebSocketClosed] = []
    done = trio.Event()

    async def handler(ws: WebSocket) -> None:
        try:
            await ws.receive_batch()
        except WebSocketClosed as exc:
            server_saw.append(exc)
        done.set()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler)
        async with connect_websocket(url(port)) as ws:
            await ws.aclose(4000, "bye")
            assert ws.closed
            await ws.aclose(4001, "again")  # no second close frame, no error
            with pytest.raises(WebSocketClosed):
                ws.send_nowait("x")
            with pytest.raises(WebSocketClosed):
                await ws.send("x")
            with pytest.raises(WebSocketClosed):
                await ws.receive_batch()
        await done.wait()
    assert [(e.code, e.reason) for e in server_saw] == [(4000, "bye")]


async def test_server_close_reaches_client(nursery: trio.Nursery) -> None:
    async def greet_and_leave(ws: WebSocket) -> None:
        await ws.send("bye")

    with trio.fail_after(GUARD):
        port = await start_server(nursery, greet_and_leave)
        async with connect_websocket(url(port)) as ws:
            assert await ws.receive_batch() == ["bye"]
            with pytest.raises(WebSocketClosed) as info:
                await ws.receive_batch()
    assert info.value.code == 1000


async def test_handler_error_closes_with_1011(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(ws: WebSocket) -> None:
        await ws.receive_batch()
        raise RuntimeError("boom")

    with trio.fail_after(GUARD):
        port = await start_server(nursery, broken)
        async with connect_websocket(url(port)) as ws:
            ws.send_nowait("{}")
            with pytest.raises(WebSocketClosed) as info:
                await ws.receive_batch()
    assert info.value.code == 1011
    assert any("boom" in (r.exc_text or "") or r.exc_info for r in caplog.records)


async def test_server_survives_garbage_requests(nursery: trio.Nursery) -> None:
    with trio.fail_after(GUARD):
        port = await start_server(nursery, echo)
        for garbage in (b"garbage\r\n\r\n", b"\x00\x01\x02\xff" * 100, b"GET / HTTP/1.1\r\n"):
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(garbage)
                await stream.send_eof()
                while await stream.receive_some(65536):
                    pass  # whatever the server answers, it must end the connection
        async with connect_websocket(url(port)) as ws:
            ws.send_nowait("still alive")
            assert await ws.receive_batch() == ["still alive"]


async def test_origin_is_exposed(nursery: trio.Nursery) -> None:
    origins: list[str | None] = []
    got = trio.Event()

    async def handler(ws: WebSocket) -> None:
        origins.append(ws.origin)
        got.set()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler, allowed_origins=["http://127.0.0.1:5173"])
        async with raw_peer(port, {"Origin": "http://127.0.0.1:5173"}):
            await got.wait()
        async with connect_websocket(url(port)) as ws:
            assert ws.origin is None  # client side never has one
            with pytest.raises(WebSocketClosed):
                await ws.receive_batch()
    assert origins == ["http://127.0.0.1:5173", None]


async def test_browser_origins_are_refused_unless_allowed(nursery: trio.Nursery) -> None:
    ran: list[str | None] = []

    async def handler(ws: WebSocket) -> None:
        ran.append(ws.origin)

    with trio.fail_after(GUARD):
        port = await start_server(nursery, handler)
        with pytest.raises(AssertionError, match=r"server closed during handshake|403"):
            async with raw_peer(port, {"Origin": "https://evil.example"}):
                pass
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tesseron-gateway\r\n"
                b"Origin: https://evil.example\r\n\r\n"
            )
            reply = await stream.receive_some(65536)
        assert reply.startswith(b"HTTP/1.1 403")
    assert ran == []


async def test_send_applies_backpressure_when_peer_does_not_read(nursery: trio.Nursery) -> None:
    sent = 0
    stop_sending = trio.Event()
    chunk = "z" * 65536

    async def flood(ws: WebSocket) -> None:
        nonlocal sent
        while not stop_sending.is_set():
            await ws.send(chunk)
            sent += 1
        await ws.receive_batch()

    with trio.fail_after(GUARD):
        port = await start_server(nursery, flood)
        async with connect_websocket(url(port)) as ws:
            # Everyone blocks: the flood task in send(), the writer in send_all.
            await trio.testing.wait_all_tasks_blocked()
            parked_at = sent
            # Bounded by kernel buffers plus the 1 MiB high-water mark, not by memory.
            assert 0 < parked_at < 2000
            stop_sending.set()
            received = 0
            while received < parked_at:
                received += len(await ws.receive_batch())
            assert sent >= parked_at


def _count_tasks(task: trio.lowlevel.Task) -> int:
    return 1 + sum(_count_tasks(child) for n in task.child_nurseries for child in n.child_tasks)


async def test_cancelling_server_leaves_no_tasks_and_says_going_away() -> None:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    before = _count_tasks(root)
    entered = trio.Event()

    async def handler(ws: WebSocket) -> None:
        entered.set()
        await trio.sleep_forever()

    outcome: list[WebSocketClosed] = []

    async def client(port: int, server_scope: trio.CancelScope) -> None:
        async with connect_websocket(url(port)) as ws:
            await entered.wait()
            server_scope.cancel()
            try:
                await ws.receive_batch()
            except WebSocketClosed as exc:
                outcome.append(exc)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as client_nursery:
            with trio.CancelScope() as server_scope:
                async with trio.open_nursery() as server_nursery:
                    port = await start_server(server_nursery, handler)
                    client_nursery.start_soon(client, port, server_scope)
        assert _count_tasks(root) == before
    assert [e.code for e in outcome] == [1001]


async def test_connect_refused_raises_oserror() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    with trio.fail_after(GUARD), pytest.raises(OSError):
        async with connect_websocket(url(port)):
            pass


async def test_silent_connection_is_dropped_after_handshake_timeout(
    nursery: trio.Nursery, socket_autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the server's handshake deadline passes as soon as all tasks block.
    start = trio.current_time()
    with trio.fail_after(HANDSHAKE_TIMEOUT * 3):
        port = await start_server(nursery, echo)
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            assert await stream.receive_some(65536) == b""
            assert trio.current_time() - start >= HANDSHAKE_TIMEOUT
