"""Control-frame floods against both ends of the WebSocket layer, over real loopback sockets.

A hostile peer sends pings and never reads. Every ping owes a pong, and a pong is output
like any other: once the writer is over its high-water mark, our side must stop reading,
whatever kind of frame is arriving, so the peer's own sends end up blocked in the kernel
and our memory stays flat. The peer here is a plain non-blocking socket with small kernel
buffers, writing hand-made frames. "Stopped reading" is observed as our reader parked,
waiting for the writer's room rather than for bytes, while the flood is still far from
sent (whether the kernel lets the peer's send go on for a moment depends on TCP's own
timers, so it is not what the tests look at); "bounded" as the bytes our side has
queued (checked after every burst the peer sends) and the ``tracemalloc`` peak.
"""

from __future__ import annotations

import errno
import functools
import json
import socket
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import pytest
import trio
import trio.lowlevel
import trio.testing
from gateway_helpers import serving, welcome
from gateway_rig import hello_params
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from toolnexus_trio.tesseron import Gateway, TesseronApp, _ws
from toolnexus_trio.tesseron._ws import (
    RECEIVE_CHUNK,
    SEND_HIGH_WATER,
    SEND_STALL_TIMEOUT,
    STALL_CLOSE_CODE,
    SUBPROTOCOL,
    WRITE_CHUNK,
    WebSocket,
    WebSocketClosed,
)
from toolnexus_trio.tesseron._ws_server import serve_websocket

GUARD = 60  # a hang guard only: no assertion here depends on how long anything takes

QUEUE_BOUND = SEND_HIGH_WATER + 3 * RECEIVE_CHUNK + WRITE_CHUNK
"""What our side may have queued: the high-water mark (the last time the reader looked),
the replies to the one read it then made (a pong is at most three times its ping: a
2-byte unmasked ping owes a 6-byte masked pong), and the write in progress."""

SLACK = 2 * 1024 * 1024
"""Everything else alive meanwhile: one read's frames being parsed, trio, the peer."""

PEER_BUFFER = 4096
"""The hostile peer's SO_RCVBUF and SO_SNDBUF: small, so the kernel holds little."""

PINGS_PER_BURST = 500

FLOOD_BYTES = 64 * 1024 * 1024
"""More than the kernel buffers of both ends and the bound together, many times over:
a side that keeps reading takes it all, and its queue grows far past the bound."""


def pings(*, mask: bool, payload: int = 125) -> bytes:
    """One burst of ping frames (a client's are masked, a server's are not)."""
    return b"".join(
        Frame(Opcode.PING, bytes([i % 256]) * payload).serialize(mask=mask)
        for i in range(PINGS_PER_BURST)
    )


class RawSocket:
    """A plain non-blocking socket: the hostile peer, which writes bytes and reads none."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.accepted = 0  # bytes of flood the kernel took from us
        self.done = False  # the whole flood was taken
        self.reset = False  # our side closed the connection during the flood

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            view = view[sent:]
        await trio.lowlevel.checkpoint()

    async def receive_some(self) -> bytes:
        while True:
            try:
                return self.sock.recv(65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    async def flood(self, burst: bytes, queued: Callable[[], int]) -> None:
        """Send *burst* over and over, up to :data:`FLOOD_BYTES`; ``queued()`` (what our
        side holds to write) must stay within :data:`QUEUE_BOUND` after every burst."""
        while self.accepted < FLOOD_BYTES:
            try:
                await self.send_all(burst)
            except (BrokenPipeError, ConnectionResetError):
                self.reset = True
                return
            self.accepted += len(burst)
            assert queued() <= QUEUE_BOUND, (queued(), self.accepted)
        self.done = True

    def close(self) -> None:
        self.sock.close()


async def reader_stops(ws: WebSocket, peer: RawSocket, burst: bytes) -> None:
    """Flood *ws* from *peer* until its reader waits for room instead of reading.

    The reader is parked on the writer's room (not in ``receive_some``) while the flood
    is still being sent; every step of the way the queue is within the bound.
    """
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.flood, burst, lambda: ws.queued_bytes)
        while ws._reading or not ws._space_lot.statistics().tasks_waiting:
            assert not peer.done, "the whole flood was read"
            assert not peer.reset, "the connection was closed"
            assert ws.queued_bytes <= QUEUE_BOUND
            await trio.testing.wait_all_tasks_blocked()
        assert not peer.done
        assert ws.queued_bytes <= QUEUE_BOUND
        nursery.cancel_scope.cancel()


def small_buffers(sock: socket.socket) -> None:
    # Set before connect/listen, so the window the peer advertises is small from the start.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PEER_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PEER_BUFFER)


@contextmanager
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def peak() -> int:
    return tracemalloc.get_traced_memory()[1]


# -- the host's side: a hostile gateway ---------------------------------------------


class HostileClient:
    """A hand-made WebSocket client on a raw socket (frames parsed by ``websockets``)."""

    def __init__(self, raw: RawSocket, proto: ClientProtocol) -> None:
        self.raw = raw
        self.proto = proto
        self.texts: list[str] = []

    async def flush(self) -> None:
        data = b"".join(self.proto.data_to_send())
        if data:
            await self.raw.send_all(data)

    async def recv_text(self) -> str:
        while not self.texts:
            data = await self.raw.receive_some()
            assert data, "the server closed the connection"
            self.proto.receive_data(data)
            for event in self.proto.events_received():
                if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                    self.texts.append(event.data.decode())
        return self.texts.pop(0)

    def send_text(self, text: str) -> bytes:
        """The bytes of one masked text frame (the caller writes them)."""
        self.proto.send_text(text.encode())
        return b"".join(self.proto.data_to_send())


@asynccontextmanager
async def hostile_client(port: int) -> AsyncIterator[HostileClient]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    small_buffers(sock)
    raw = RawSocket(sock)
    try:
        err = sock.connect_ex(("127.0.0.1", port))
        assert err in (0, errno.EINPROGRESS), err  # a non-blocking connect
        await trio.lowlevel.wait_writable(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        proto = ClientProtocol(
            parse_uri(f"ws://127.0.0.1:{port}/"), subprotocols=[Subprotocol(SUBPROTOCOL)]
        )
        proto.send_request(proto.connect())
        client = HostileClient(raw, proto)
        await client.flush()
        while proto.handshake_exc is None and proto.state is State.CONNECTING:
            data = await raw.receive_some()
            assert data, "the server closed during the handshake"
            proto.receive_data(data)
        assert proto.handshake_exc is None
        for event in proto.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                client.texts.append(event.data.decode())
        yield client
    finally:
        raw.close()


@asynccontextmanager
async def hostile_gateway(port: int) -> AsyncIterator[HostileClient]:
    """Connect, read the host's hello and answer it; from then on the peer reads nothing."""
    async with hostile_client(port) as client:
        hello = json.loads(await client.recv_text())
        assert hello["method"] == "tesseron/hello"
        answer = {"jsonrpc": "2.0", "id": hello["id"], "result": welcome()}
        await client.raw.send_all(client.send_text(json.dumps(answer)))
        yield client


def fragment_start() -> bytes:
    """The first frame of a text message that never ends: pings then arrive inside it."""
    return Frame(Opcode.TEXT, b'{"jsonrpc":', fin=False).serialize(mask=True)


@pytest.mark.parametrize(
    "prefix",
    [pytest.param(b"", id="pings"), pytest.param(fragment_start(), id="inside-a-fragment")],
)
async def test_a_ping_flood_stops_the_host_reading(prefix: bytes) -> None:
    app = TesseronApp("t", "T")
    burst = pings(mask=True)
    with trio.fail_after(GUARD), traced():
        async with serving(app) as host, hostile_gateway(host.port) as peer:
            while host._active is None or host.welcome is None:
                await trio.testing.wait_all_tasks_blocked()
            ws = host._active._ws
            tracemalloc.reset_peak()
            await peer.raw.send_all(prefix)
            await reader_stops(ws, peer.raw, burst)
            assert peak() <= QUEUE_BOUND + SLACK
            # Stopped, not failed: the stall watchdog decides when the peer is gone.
            assert host.connected


async def test_unsolicited_pongs_queue_nothing_and_reading_goes_on() -> None:
    app = TesseronApp("t", "T")
    app.resource("r", lambda: "value")
    pongs = b"".join(
        Frame(Opcode.PONG, b"q" * 125).serialize(mask=True) for _ in range(PINGS_PER_BURST)
    )
    with trio.fail_after(GUARD), traced():
        async with serving(app) as host, hostile_gateway(host.port) as peer:
            while host._active is None or host.welcome is None:
                await trio.testing.wait_all_tasks_blocked()
            ws = host._active._ws
            tracemalloc.reset_peak()
            for _ in range(100):  # 6.5 MB of pongs
                await peer.raw.send_all(pongs)
                assert ws.queued_bytes == 0
            read: dict[str, Any] = {"jsonrpc": "2.0", "id": "r1", "method": "resources/read"}
            read["params"] = {"name": "r"}
            await peer.raw.send_all(peer.send_text(json.dumps(read)))
            answer = json.loads(await peer.recv_text())
            assert answer["id"] == "r1" and answer["result"] == {"value": "value"}
            assert peak() <= QUEUE_BOUND + SLACK


# -- the WebSocket server itself: fragments, close --------------------------------


@asynccontextmanager
async def ws_server(
    handler: Callable[[WebSocket], Any],
) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            functools.partial(serve_websocket, handler, host="127.0.0.1", port=0)
        )
        yield cast(int, port)
        nursery.cancel_scope.cancel()


async def test_a_fragmented_ping_fails_the_connection_with_1002() -> None:
    closed: list[WebSocketClosed] = []
    done = trio.Event()

    async def handler(ws: WebSocket) -> None:
        try:
            await ws.receive_batch()
        except WebSocketClosed as exc:
            closed.append(exc)
            done.set()
            raise

    with trio.fail_after(GUARD):
        async with ws_server(handler) as port, hostile_client(port) as peer:
            # FIN clear on a ping (RFC 6455 5.5: control frames are never fragmented),
            # masked with a zero key; websockets refuses to build this frame itself.
            await peer.raw.send_all(bytes([0x09, 0x81, 0, 0, 0, 0]) + b"p")
            await done.wait()
    assert closed[0].code == 1002


async def test_pings_sent_through_the_close_handshake_are_read_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our close is sent and the peer, instead of answering it, pings and stops reading:
    waiting for its close frame reads no more than the writer can take."""
    monkeypatch.setattr(_ws, "CLOSE_TIMEOUT", GUARD)  # the wait must end by itself
    sockets: list[WebSocket] = []
    leave = trio.Event()

    async def handler(ws: WebSocket) -> None:
        sockets.append(ws)
        await leave.wait()  # returning closes with 1000 and waits for the peer's close

    burst = pings(mask=True)
    with trio.fail_after(GUARD):
        async with ws_server(handler) as port, hostile_client(port) as peer:
            while not sockets:
                await trio.testing.wait_all_tasks_blocked()
            (ws,) = sockets
            leave.set()
            while peer.proto.close_rcvd is None:
                data = await peer.raw.receive_some()
                assert data
                peer.proto.receive_data(data)
            assert peer.proto.close_rcvd == Close(1000, "")
            await reader_stops(ws, peer.raw, burst)


# -- the gateway's side: a hostile host ---------------------------------------------


class HostileServer:
    """A hand-made WebSocket server on raw sockets: accepts one gateway, says hello."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.port: int = listener.getsockname()[1]
        self.peer: RawSocket | None = None
        self.ready = trio.Event()  # the upgrade answered (and the hello sent, if asked)

    async def serve(self, *, hello: bool) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.listener)
        raw = self.peer = RawSocket(sock)
        proto = ServerProtocol(subprotocols=[Subprotocol(SUBPROTOCOL)])
        request: Request | None = None
        while request is None:
            data = await raw.receive_some()
            assert data, "the gateway closed during the handshake"
            proto.receive_data(data)
            for event in proto.events_received():
                if isinstance(event, Request):
                    request = event
        proto.send_response(proto.accept(request))
        if hello:
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": "h1", "method": "tesseron/hello"}
            message["params"] = hello_params()
            proto.send_text(json.dumps(message).encode())
        await raw.send_all(b"".join(proto.data_to_send()))
        self.ready.set()


@asynccontextmanager
async def hostile_server(*, hello: bool = True) -> AsyncIterator[HostileServer]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    small_buffers(listener)  # accepted sockets inherit them
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    server = HostileServer(listener)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(server.serve, hello=hello))
            yield server
            nursery.cancel_scope.cancel()
    finally:
        if server.peer is not None:
            server.peer.close()
        listener.close()


def gateway_ws(gw: Gateway) -> WebSocket:
    (conn,) = gw._conns
    return conn.ws


@pytest.mark.parametrize("payload", [125, 0])
async def test_a_host_flooding_pings_stops_the_gateway_reading(payload: int) -> None:
    burst = pings(mask=False, payload=payload)
    with trio.fail_after(GUARD), traced():
        async with hostile_server() as server, Gateway() as gw:
            session = await gw.connect(f"ws://127.0.0.1:{server.port}/")
            assert session.connected
            ws = gateway_ws(gw)
            assert server.peer is not None
            tracemalloc.reset_peak()
            await reader_stops(ws, server.peer, burst)
            assert peak() <= QUEUE_BOUND + SLACK
            assert session.connected


async def test_a_host_flooding_pings_before_its_hello_stops_the_gateway_reading() -> None:
    burst = pings(mask=False)
    with trio.fail_after(GUARD), traced():
        async with (
            hostile_server(hello=False) as server,
            Gateway() as gw,
            trio.open_nursery() as nursery,
        ):
            # connect() waits for a hello that never comes: the flood is its handshake.
            nursery.start_soon(gw.connect, f"ws://127.0.0.1:{server.port}/")
            await server.ready.wait()
            while not gw._conns:
                await trio.testing.wait_all_tasks_blocked()
            ws = gateway_ws(gw)
            assert server.peer is not None
            tracemalloc.reset_peak()
            await reader_stops(ws, server.peer, burst)
            assert peak() <= QUEUE_BOUND + SLACK
            nursery.cancel_scope.cancel()


async def test_a_host_flooding_pings_is_dropped_as_not_reading(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The stall watchdog ends it: the gateway's pongs wait, unsent, for 30 s."""
    burst = pings(mask=False)
    with trio.fail_after(SEND_STALL_TIMEOUT + GUARD):
        async with hostile_server() as server, Gateway() as gw:
            session = await gw.connect(f"ws://127.0.0.1:{server.port}/")
            ws = gateway_ws(gw)
            assert server.peer is not None
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.peer.flood, burst, lambda: ws.queued_bytes)
                version = gw.version
                while session.connected:
                    version = await gw.wait_changed(version)
                nursery.cancel_scope.cancel()
            assert trio.current_time() - started >= SEND_STALL_TIMEOUT
            assert ws._proto.close_sent is not None
            assert ws._proto.close_sent.code == STALL_CLOSE_CODE
            assert ws.queued_bytes <= QUEUE_BOUND
