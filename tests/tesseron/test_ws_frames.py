"""The server's own frame parsing (``WebSocket._receive``) against the bytes on the wire.

A server parses common data frames itself and hands every other frame, whole, to the
``websockets`` protocol object. These tests send hand-made client frames over a real
loopback socket, cut into reads at arbitrary places (each piece is written only after
the server has read everything before it), and check what the server delivers and
how it closes.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from toolnexus_trio.tesseron._ws import SUBPROTOCOL, WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

GUARD = 15


def frame(opcode: Opcode, data: bytes, *, fin: bool = True, mask: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=mask)


def text(message: str) -> bytes:
    return frame(Opcode.TEXT, message.encode())


# Every kind of frame the fast path must take, or must leave to the protocol object.
STREAM = b"".join(
    [
        text("a"),
        text(""),
        text("x" * 125),
        text("y" * 126),
        text("é✓" * 50),
        frame(Opcode.BINARY, '{"bin":"ü"}'.encode()),
        frame(Opcode.BINARY, b"\xff ok"),
        frame(Opcode.PING, b"p1"),
        frame(Opcode.TEXT, b'{"a":', fin=False),
        frame(Opcode.PING, b"p2"),
        frame(Opcode.CONT, b'"frag', fin=False),
        frame(Opcode.CONT, b'"}'),
        text("after fragments"),
        text("z" * 70_000),  # a 64-bit length
        text("last"),
    ]
)
EXPECTED = [
    "a",
    "",
    "x" * 125,
    "y" * 126,
    "é✓" * 50,
    '{"bin":"ü"}',
    "\ufffd ok",
    '{"a":"frag"}',
    "after fragments",
    "z" * 70_000,
    "last",
]


class Server:
    """Serves one connection; keeps what it delivered and how it ended."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.closed: WebSocketClosed | None = None
        self.done = trio.Event()

    async def handler(self, ws: WebSocket) -> None:
        try:
            while True:
                self.messages.extend(await ws.receive_batch())
        except WebSocketClosed as exc:
            self.closed = exc
            self.done.set()
            raise


@asynccontextmanager
async def serving(**kwargs: Any) -> AsyncIterator[tuple[Server, int]]:
    server = Server()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            functools.partial(serve_websocket, server.handler, host="127.0.0.1", port=0, **kwargs)
        )
        yield server, cast(int, port)
        nursery.cancel_scope.cancel()


async def send_in_pieces(stream: trio.SocketStream, data: bytes, cuts: list[int]) -> None:
    """Write *data* cut at *cuts*, each piece once the server has read all before it."""
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        if start < cut <= len(data):
            try:
                await stream.send_all(data[start:cut])
            except trio.BrokenResourceError:
                return  # the server failed the connection and closed it
            await trio.testing.wait_all_tasks_blocked(cushion=0.001)
            start = cut


async def exchange(wire: bytes, cuts: list[int], **kwargs: Any) -> tuple[Server, list[Frame]]:
    """Upgrade and send *wire*, cut at *cuts* (offsets into *wire*; a negative one cuts
    the upgrade request), then a close frame; return the server and the frames it sent."""
    async with serving(**kwargs) as (server, port):
        proto = ClientProtocol(
            parse_uri(f"ws://127.0.0.1:{port}/"), subprotocols=[Subprotocol(SUBPROTOCOL)]
        )
        proto.send_request(proto.connect())
        request = b"".join(proto.data_to_send())
        data = request + wire + frame(Opcode.CLOSE, Close(1000, "").serialize())
        frames: list[Frame] = []
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await send_in_pieces(stream, data, [len(request) + cut for cut in cuts])
            while received := await stream.receive_some(1 << 20):
                proto.receive_data(received)
                frames.extend(e for e in proto.events_received() if isinstance(e, Frame))
        assert proto.handshake_exc is None
        await server.done.wait()
    return server, frames


def close_code(frames: list[Frame]) -> int:
    closes = [Close.parse(f.data).code for f in frames if f.opcode is Opcode.CLOSE]
    assert len(closes) == 1, frames
    return closes[0]


async def test_every_kind_of_frame_in_one_read() -> None:
    with trio.fail_after(GUARD):
        server, frames = await exchange(STREAM, [0])
    assert server.messages == EXPECTED
    assert [f.data for f in frames if f.opcode is Opcode.PONG] == [b"p1", b"p2"]
    assert close_code(frames) == 1000


async def test_frames_cut_at_every_byte_of_their_headers_and_starts() -> None:
    """One read per byte over the first frames: every cut inside a header, a mask, a
    payload, and across the end of the upgrade request."""
    with trio.fail_after(GUARD):
        server, frames = await exchange(STREAM, list(range(-3, 700)))
    assert server.messages == EXPECTED
    assert close_code(frames) == 1000


@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.integers(min_value=-40, max_value=len(STREAM) + 10), max_size=12))
async def test_frames_cut_anywhere_arrive_whole_and_in_order(cuts: list[int]) -> None:
    with trio.fail_after(GUARD):
        server, frames = await exchange(STREAM, cuts)
    assert server.messages == EXPECTED
    assert [f.data for f in frames if f.opcode is Opcode.PONG] == [b"p1", b"p2"]


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (frame(Opcode.TEXT, b"unmasked", mask=False), 1002),
        (bytes([0xC1]) + frame(Opcode.TEXT, b"rsv1")[1:], 1002),  # a reserved bit set
        (frame(Opcode.CONT, b"no start"), 1002),
        (frame(Opcode.TEXT, b"\xff\xfe not UTF-8"), 1007),
        (text("o" * 1001), 1009),
        (frame(Opcode.TEXT, b"x", fin=False) + text("not a continuation"), 1002),
    ],
)
@pytest.mark.parametrize("split", [False, True])
async def test_a_bad_frame_after_good_ones_fails_the_connection(
    bad: bytes, code: int, split: bool
) -> None:
    """The good frames before it are delivered; nothing after it is."""
    wire = text("one") + text("two") + bad + text("never")
    cuts = [0, len(text("one")) + 3] if split else [0]
    with trio.fail_after(GUARD):
        server, frames = await exchange(wire, cuts, max_message_bytes=1000)
    assert server.messages == ["one", "two"]
    assert close_code(frames) == code
    assert server.closed is not None
    assert server.closed.code == code


async def test_messages_after_a_close_frame_are_not_delivered() -> None:
    wire = text("one") + frame(Opcode.CLOSE, Close(1000, "bye").serialize()) + text("never")
    with trio.fail_after(GUARD):
        server, frames = await exchange(wire, [])
    assert server.messages == ["one"]
    assert close_code(frames) == 1000


async def test_a_frame_at_the_size_limit_is_taken_and_one_byte_more_is_not() -> None:
    with trio.fail_after(GUARD):
        server, _ = await exchange(text("m" * 1000), [], max_message_bytes=1000)
    assert server.messages == ["m" * 1000]
    with trio.fail_after(GUARD):
        server, frames = await exchange(text("m" * 1001), [], max_message_bytes=1000)
    assert server.messages == []
    assert close_code(frames) == 1009


def test_the_frames_use_random_masks() -> None:
    """Real masking keys, as browsers and gateways send (not the all-zero key)."""
    assert len({text("same")[2:6] for _ in range(4)}) > 1
