"""WebSocket transport on Trio, driving the ``websockets`` Sans-I/O protocol objects.

Why not trio-websocket: it pays a reader task, a channel hop and a lock per message,
which measured 3-4x slower than feeding a Sans-I/O protocol straight from a
:class:`trio.SocketStream` (see ``notes/websocket-transport.md``). Here:

* the task calling :meth:`WebSocket.receive_batch` does one ``receive_some(65536)``
  and returns every complete message in that chunk;
* everything to send (frames, pongs, close frames) goes to one queue, and a single
  writer task joins what has accumulated into one ``send_all``;
* on the server side, the common frames (a final text or binary frame each way) are
  parsed and written here, and the protocol object handles every other frame and the
  connection's state, so it still enforces RFC 6455 (see :meth:`WebSocket._receive`).

Backpressure: :meth:`WebSocket.send` and :meth:`WebSocket.wait_writable` wait while
more than :data:`SEND_HIGH_WATER` bytes are queued, and read loops wait on
``wait_writable`` before reading more. Replies to control frames (a pong per ping,
the close frame) are queued output like any other, and :meth:`WebSocket.receive_batch`
itself reads no further while the queue is over the mark, whatever frames are
arriving: a peer that pings and never reads is read no faster than it reads. A
watchdog beside the writer closes the connection with :data:`STALL_CLOSE_CODE` when
one write has not finished within :data:`SEND_STALL_TIMEOUT`: the peer has stopped
reading.

The writer is the only code that calls ``send_all`` while it runs. Before it starts
(the opening handshake) and after it has exited (the final close frame), the code
that owns the connection writes directly, which cannot interleave with it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import NoReturn, final

import trio
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidURI
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import Side, State
from websockets.server import ServerProtocol
from websockets.typing import Origin, Subprotocol
from websockets.uri import parse_uri

from .._groups import collapse_groups

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - the C extension is in every wheel
    from websockets.utils import apply_mask

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SEND_HIGH_WATER",
    "SEND_STALL_TIMEOUT",
    "STALL_CLOSE_CODE",
    "SUBPROTOCOL",
    "WebSocket",
    "WebSocketClosed",
    "connect_websocket",
    "serve_websocket",
]

SUBPROTOCOL = "tesseron-gateway"
"""The subprotocol the Tesseron gateway offers and a host must select."""

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest incoming message accepted; a larger one closes the connection with 1009."""

RECEIVE_CHUNK = 65536
"""Bytes asked of the stream per read; a whole pipelined burst is usually one chunk."""

SEND_HIGH_WATER = 1024 * 1024
"""Queued outgoing bytes above which :meth:`WebSocket.send` and ``wait_writable`` wait.

A producer that waits adds at most one frame past it, and the writer holds at most
one such batch in ``send_all``: when everything sent waits for room first, outgoing
bytes stay below ``2 * (SEND_HIGH_WATER + the largest frame)`` (a read loop's
immediate answers to the one batch it read add a little). No read starts while the
queue is over the mark, so the pongs (and close frame) owed for what arrives add at
most the replies to one :data:`RECEIVE_CHUNK` read: no more than the read itself on
a server, three times it on a client (a 2-byte ping owes a 6-byte masked pong).
"""

FEED_SLICE = 4096
"""Most bytes given to the protocol object at once (see :meth:`WebSocket._feed`)."""

WRITE_CHUNK = 65536
"""Most bytes joined into one ``send_all`` (a single larger frame is written whole)."""

SEND_STALL_TIMEOUT = 30.0
"""Seconds one ``send_all`` may stay unfinished before the peer counts as not reading.

On loopback a reading peer takes a batch in milliseconds.
"""

STALL_CLOSE_CODE = 1008
"""Close code for a peer that stopped reading: 1008 (policy violation), since the
fault is the peer's; 1013 (try again later) would blame our own load."""

HANDSHAKE_TIMEOUT = 10.0
"""Seconds allowed for the HTTP upgrade, either side."""

CLOSE_TIMEOUT = 2.0
"""Seconds :meth:`WebSocket.aclose` spends flushing and waiting for the peer's close."""

ABNORMAL_CLOSURE = 1006

_log = logging.getLogger("toolnexus_trio.tesseron.ws")
# The protocol objects log every open/close at INFO; keep them under our namespace.
_proto_log = logging.getLogger("toolnexus_trio.tesseron.ws.protocol")


_TEXT_HEADERS = tuple(bytes((0x81, n)) for n in range(126))
"""The header of an unmasked final text frame of 0..125 bytes."""
_pack_header_16 = struct.Struct("!BBH").pack
_pack_header_64 = struct.Struct("!BBQ").pack


def _text_header(size: int) -> bytes:
    """The header of an unmasked final text frame of *size* bytes (RFC 6455 5.2)."""
    if size < 126:
        return _TEXT_HEADERS[size]
    if size < 65536:
        return _pack_header_16(0x81, 126, size)
    return _pack_header_64(0x81, 127, size)


class WebSocketClosed(ConnectionError):
    """The connection is closed (by either side, or the stream broke).

    A :class:`ConnectionError`, so callers of the public API catch it as one.

    ``code`` is the close code received from the peer, else the one we sent, else
    1006 when the stream ended without a close frame; ``None`` only when no
    WebSocket connection was ever established (a refused handshake).
    """

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"WebSocket closed (code={code}, reason={reason!r})")
        self.code = code
        self.reason = reason


@final
class WebSocket:
    """One open WebSocket connection, server or client side.

    Created by :func:`serve_websocket` and :func:`connect_websocket`; not constructed
    directly. One task reads (:meth:`receive_batch`); any task may send.
    """

    def __init__(
        self,
        stream: trio.SocketStream,
        protocol: ServerProtocol | ClientProtocol,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._stream = stream
        self._proto = protocol
        self.subprotocol: str | None = protocol.subprotocol
        """The negotiated subprotocol."""
        self.origin: str | None = protocol.origin if isinstance(protocol, ServerProtocol) else None
        """The upgrade request's ``Origin`` header (server side), else ``None``."""
        # A server's text frames are a header plus the payload (no mask, no extension
        # is ever negotiated here), so send_nowait writes them itself: the protocol's
        # send_text builds a Frame and serializes it, 0.75 us against 0.1 us. With
        # debug logging on, the protocol object still sends (and logs) every frame.
        self._raw_frames = (
            protocol.side is Side.SERVER and not protocol.extensions and not protocol.debug
        )
        # Receiving, likewise: a server parses the common frame (final, masked, text
        # or binary, within the size limit, no fragmented message pending) itself,
        # 0.6 us against the protocol's 2.2-2.6 us, and hands it every other frame
        # whole (see _receive). The protocol must then never have seen a partial
        # frame: _server_handshake gives it the upgrade request and nothing after.
        self._rx_fast = self._raw_frames
        self._rx_held = b""  # the start of a frame header that has not fully arrived
        self._rx_owed = 0  # bytes of a frame the protocol has begun and not yet got
        self._max_size = max_message_bytes  # the limit the protocol object was given
        # Outgoing bytes not yet handed to send_all.
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._eof_pending = False
        self._eof_sent = False
        # Messages parsed but not yet returned by receive_batch.
        self._ready: list[str] = []
        self._fragments: list[bytes] = []
        self._fragment_opcode: Opcode | None = None
        self._lost_reason: str | None = None  # set when the stream broke
        self._reading = False
        self._aclose_started = False
        self._stopping = False  # tells the writer to exit once drained
        self._writer_running = False
        self._write_failed = False
        self._sending_bytes = 0  # handed to send_all, not yet written
        self._send_started: float | None = None  # when the current send_all began
        self._sends = 0  # send_all calls begun; tells the watchdog one write from the next
        self.stall_timeout = SEND_STALL_TIMEOUT
        """Seconds one write may take before the connection is closed (see
        :data:`SEND_STALL_TIMEOUT`)."""
        self._watch_lot = trio.lowlevel.ParkingLot()  # the watchdog waits for a write
        self._writer_lot = trio.lowlevel.ParkingLot()  # writer waits for work
        self._drain_lot = trio.lowlevel.ParkingLot()  # aclose waits for the writer
        self._space_lot = trio.lowlevel.ParkingLot()  # send() waits below high water
        self._read_lot = trio.lowlevel.ParkingLot()  # aclose waits for the reader

    # -- state -----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether a close frame was sent or received, or the stream broke."""
        return (
            self._proto.state is not State.OPEN
            or self._lost_reason is not None
            or self._aclose_started
            or self._write_failed
        )

    @property
    def writable(self) -> bool:
        """Whether at most :data:`SEND_HIGH_WATER` bytes are queued (``send`` would not wait)."""
        return self._out_bytes <= SEND_HIGH_WATER

    @property
    def queued_bytes(self) -> int:
        """Outgoing bytes not yet written: the queue plus the write in progress."""
        return self._out_bytes + self._sending_bytes

    def _closed_error(self) -> WebSocketClosed:
        proto = self._proto
        if proto.close_rcvd is not None:
            return WebSocketClosed(proto.close_rcvd.code, proto.close_rcvd.reason)
        if proto.close_sent is not None:
            return WebSocketClosed(proto.close_sent.code, proto.close_sent.reason)
        if self._lost_reason is not None:
            return WebSocketClosed(ABNORMAL_CLOSURE, self._lost_reason)
        if proto.parser_exc is not None:
            return WebSocketClosed(ABNORMAL_CLOSURE, str(proto.parser_exc))
        return WebSocketClosed(ABNORMAL_CLOSURE, "connection closed")

    def _peer_done(self) -> bool:
        # The peer answered our close (or closed first), or the stream is gone.
        return (
            self._proto.close_rcvd is not None
            or self._proto.state is State.CLOSED
            or self._lost_reason is not None
        )

    # -- outgoing --------------------------------------------------------------

    def _pull_output(self) -> None:
        """Move what the protocol wants sent into the writer's queue."""
        chunks = self._proto.data_to_send()
        if not chunks:
            return
        if len(chunks) == 1:
            data = chunks[0]
        else:
            # One entry however many frames: a read of 2-byte pings makes thousands of
            # pongs, and a bytes object each would cost ~8x their size in the queue.
            data = b"".join(chunks)
            if b"" in chunks:  # websockets.protocol.SEND_EOF, only ever the last chunk
                self._eof_pending = True
        if data:
            self._out.append(data)
            self._out_bytes += len(data)
        elif len(chunks) == 1:  # SEND_EOF alone: half-close after what precedes it
            self._eof_pending = True
        if self._writer_lot:
            self._writer_lot.unpark_all()

    def send_nowait(self, text: str | bytes) -> None:
        """Queue one text frame for the writer task; never blocks.

        *text* is a ``str``, or its UTF-8 encoding as ``bytes``. Used by read loops
        that must not await. Raises :class:`WebSocketClosed` after close.
        """
        if self.closed:
            raise self._closed_error()
        if type(text) is str:
            try:
                data = text.encode()
            except UnicodeEncodeError:
                # A lone surrogate (JSON allows "\ud800") can only sit inside a JSON
                # string of ours; backslashreplace writes it back as that same escape.
                data = text.encode("utf-8", "backslashreplace")
        else:
            data = text  # type: ignore[assignment]
        if self._raw_frames:
            header = _text_header(len(data))
            self._out.append(header)
            self._out.append(data)
            self._out_bytes += len(header) + len(data)
            if self._writer_lot:
                self._writer_lot.unpark_all()
        else:
            self._proto.send_text(data)
            self._pull_output()

    async def wait_writable(self) -> None:
        """Wait while more than 1 MiB is queued (at once when closed); a checkpoint.

        Read loops call it before reading more, and producers that build a frame
        only once there is room call it first.
        """
        if self._out_bytes > SEND_HIGH_WATER and not self.closed:
            while self._out_bytes > SEND_HIGH_WATER and not self.closed:
                await self._space_lot.park()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()

    async def send(self, text: str) -> None:
        """Queue one text frame, waiting while more than 1 MiB is queued.

        The wait is the backpressure for handler-originated traffic such as progress
        storms. Below the mark this is a cancellation point but not a schedule
        point, so a burst of sends batches into few writes. Raises
        :class:`WebSocketClosed` after close.
        """
        # wait_writable() inlined: this is the per-frame path of progress storms.
        if self._out_bytes > SEND_HIGH_WATER and not self.closed:
            while self._out_bytes > SEND_HIGH_WATER and not self.closed:
                await self._space_lot.park()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        self.send_nowait(text)

    async def _run_writer(self) -> None:
        """Send queued bytes until told to stop, with the stall watchdog beside it."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_writes)
            await self._write_loop()
            nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        """The writer: the only caller of ``send_all`` while it runs."""
        self._writer_running = True
        in_send = False
        try:
            while True:
                if self._out:
                    data = self._take_write()
                    if self._space_lot:
                        self._space_lot.unpark_all()
                    self._sending_bytes = len(data)
                    self._send_started = trio.current_time()
                    self._sends += 1
                    if self._watch_lot:
                        self._watch_lot.unpark_all()
                    in_send = True
                    await self._stream.send_all(data)
                    in_send = False
                    self._send_started = None
                    self._sending_bytes = 0
                    self._drain_lot.unpark_all()
                elif self._eof_pending and not self._eof_sent:
                    self._eof_sent = True
                    await self._stream.send_eof()
                    self._drain_lot.unpark_all()
                elif self._stopping or self._eof_sent:
                    return
                else:
                    await self._writer_lot.park()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._write_failed = True
            if self._lost_reason is None:
                self._lost_reason = f"send failed: {exc!r}"
        finally:
            # A send_all interrupted half-way leaves a partial frame on the wire.
            if in_send:
                self._write_failed = True
            self._send_started = None
            self._sending_bytes = 0
            self._writer_running = False
            self._drain_lot.unpark_all()
            self._space_lot.unpark_all()

    def _take_write(self) -> bytes:
        """The next write: everything queued, or its first :data:`WRITE_CHUNK` bytes.

        Joining a whole backlog at once would hold a second copy of up to
        :data:`SEND_HIGH_WATER` bytes while it is written (10,000 answers released
        together: 1 MiB more peak memory, 100 bytes per invocation).
        """
        out = self._out
        if self._out_bytes <= WRITE_CHUNK:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._out_bytes = 0
            return data
        size = count = 0
        for piece in out:
            if count and size + len(piece) > WRITE_CHUNK:
                break
            size += len(piece)
            count += 1
        data = b"".join(out[:count])
        del out[:count]
        self._out_bytes -= size
        return data

    async def _watch_writes(self) -> None:
        """Close the connection when one write stays unfinished for ``stall_timeout``.

        The write cannot be interrupted (half a frame would be on the wire), and
        everything queued behind it, and every producer waiting for room, would wait
        for as long as the peer does not read.
        """
        while True:
            started = self._send_started
            if started is None:
                await self._watch_lot.park()  # woken when the next write begins
                continue
            sends = self._sends
            await trio.sleep_until(started + self.stall_timeout)
            if self._sends == sends and self._send_started is not None:
                await self._stall()
                return

    async def _stall(self) -> None:
        """The peer stopped reading: close with :data:`STALL_CLOSE_CODE`."""
        if self._aclose_started or self.closed:
            return
        reason = f"peer stopped reading (no write finished in {self.stall_timeout:g} s)"
        _log.warning("closing the WebSocket: %s", reason)
        # Recorded as our close, so every waiter and the reader report 1008; the frame
        # itself is never written (it would wait behind bytes the peer does not take).
        self._proto.send_close(STALL_CLOSE_CODE, reason)
        self._pull_output()
        self._space_lot.unpark_all()
        # Closing the stream ends the stuck write and wakes the reader.
        await self._stream.aclose()

    async def _flush_direct(self) -> None:
        """Write the queue from the calling task; only when no writer is running."""
        if self._write_failed or self._writer_running:
            return
        try:
            if self._out:
                data = b"".join(self._out)
                self._out.clear()
                self._out_bytes = 0
                await self._stream.send_all(data)
            if self._eof_pending and not self._eof_sent:
                self._eof_sent = True
                await self._stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._write_failed = True

    # -- incoming --------------------------------------------------------------

    def _handle_events(self, events: Sequence[object]) -> None:
        for event in events:
            if not isinstance(event, Frame):
                continue
            opcode = event.opcode
            if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
                if event.fin:
                    self._deliver(opcode, event.data)
                else:
                    self._fragment_opcode = opcode
                    self._fragments = [bytes(event.data)]
            elif opcode is Opcode.CONT:
                self._fragments.append(bytes(event.data))
                if event.fin and self._fragment_opcode is not None:
                    self._deliver(self._fragment_opcode, b"".join(self._fragments))
                    self._fragments = []
                    self._fragment_opcode = None
            # PING is answered by the protocol itself (the pong is in data_to_send);
            # PONG and CLOSE need nothing here: close state is read off the protocol.

    def _deliver(self, opcode: Opcode, data: bytes | bytearray | memoryview) -> None:
        if opcode is Opcode.TEXT:
            try:
                self._ready.append(str(data, "utf-8"))
            except UnicodeDecodeError:
                # RFC 6455 8.1: invalid UTF-8 in a text message fails the connection.
                if self._proto.state is State.OPEN:
                    self._proto.fail(1007, "invalid UTF-8 in text frame")
                    self._pull_output()
        else:
            # The binding coerces binary frames to text for relay compatibility.
            self._ready.append(str(data, "utf-8", errors="replace"))

    def _feed(self, data: bytes) -> None:
        """Give *data* to the protocol object and take what it made of it.

        In slices of :data:`FEED_SLICE` bytes: the protocol makes a ``Frame`` (and, for
        a ping, a pong) per frame, and a whole read of the smallest frames would be
        ~30,000 objects alive at once.
        """
        proto = self._proto
        if len(data) <= FEED_SLICE:
            proto.receive_data(data)
            self._pull_output()
            self._handle_events(proto.events_received())
            return
        view = memoryview(data)
        for start in range(0, len(data), FEED_SLICE):
            proto.receive_data(bytes(view[start : start + FEED_SLICE]))
            self._pull_output()
            self._handle_events(proto.events_received())

    def _receive(self, data: bytes) -> None:
        """Handle received bytes: common data frames here, anything else by the protocol.

        The protocol object keeps every rule of RFC 6455 (control frames, fragments,
        close, masking, reserved bits, sizes) because it gets every frame that is not
        a final, masked text or binary frame within the size limit arriving while no
        fragmented message is pending, and always from its first byte: its parser is
        then at a frame boundary whenever this code takes over again. A frame that
        is not complete yet goes to the protocol too (the rest follows as
        ``_rx_owed``), so no data is ever buffered here except a partial header.
        """
        if not self._rx_fast:
            self._feed(data)
            return
        if self._rx_held:
            data = self._rx_held + data
            self._rx_held = b""
        proto = self._proto
        pos, end = 0, len(data)
        while pos < end:
            owed = self._rx_owed
            if owed:  # the protocol is inside a frame: it gets the rest of that frame
                take = min(owed, end - pos)
                self._rx_owed = owed - take
                self._feed(data[pos : pos + take])
                pos += take
                continue
            if proto.state is not State.OPEN:
                # Closing or failed: from now on the protocol takes (or drops) it all.
                self._rx_fast = False
                self._feed(data[pos:])
                return
            if end - pos < 2:
                self._rx_held = data[pos:]
                return
            b0 = data[pos]
            b1 = data[pos + 1]
            size = b1 & 0x7F
            start = pos + 2
            if size == 126:
                start += 2
                if end < start:
                    self._rx_held = data[pos:]
                    return
                size = (data[pos + 2] << 8) | data[pos + 3]
            elif size == 127:
                start += 8
                if end < start:
                    self._rx_held = data[pos:]
                    return
                size = int.from_bytes(data[pos + 2 : start], "big")
            masked = b1 & 0x80
            if masked:
                start += 4
                if end < start:
                    self._rx_held = data[pos:]
                    return
            stop = start + size
            if (
                stop <= end
                and (b0 == 0x81 or b0 == 0x82)  # FIN, no reserved bits, text or binary
                and masked
                and size <= self._max_size
                and self._fragment_opcode is None
            ):
                payload = apply_mask(data[start:stop], data[start - 4 : start])
                pos = stop
                self._deliver(Opcode.TEXT if b0 == 0x81 else Opcode.BINARY, payload)
            else:
                # The whole frame is the protocol's: what has arrived now, the rest later.
                take = min(stop, end)
                self._rx_owed = stop - take
                self._feed(data[pos:take])
                pos = take

    async def _read_chunk(self) -> bool:
        """Read and process one chunk; return False once the stream has ended."""
        self._reading = True
        try:
            data = await self._stream.receive_some(RECEIVE_CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if self._lost_reason is None:
                self._lost_reason = f"connection lost: {exc!r}"
            return False
        finally:
            self._reading = False
            self._read_lot.unpark_all()
        if data:
            self._receive(data)
        else:
            if self._rx_held:  # a header cut short by the end of the stream
                self._proto.receive_data(self._rx_held)
                self._rx_held = b""
            self._proto.receive_eof()
            self._pull_output()
            self._handle_events(self._proto.events_received())
        if self._read_lot:
            self._read_lot.unpark_all()
        return bool(data)

    async def receive_batch(self) -> list[str]:
        """Every complete message available now (at least one), in arrival order.

        Text frames as ``str``; binary frames decoded as UTF-8 (``errors='replace'``).
        Before each read it waits while more than :data:`SEND_HIGH_WATER` bytes are
        queued (the replies to control frames count). Raises :class:`WebSocketClosed`
        when the peer closed or the stream broke. Only one task may call it.
        """
        while not self._ready:
            if self._proto.state is not State.OPEN or self._lost_reason is not None:
                raise self._closed_error()
            if self._aclose_started:
                raise self._closed_error()
            if self._out_bytes > SEND_HIGH_WATER:
                # Control frames make output too (a pong per ping, a close frame), and
                # none of them is a message that would hand control back to the read
                # loop's own wait_writable: so wait for room here before every read, or
                # a peer that pings and never reads grows the queue without bound.
                if self._write_failed:
                    raise self._closed_error()  # nothing will ever drain the queue
                await self._space_lot.park()
                continue
            await self._read_chunk()
        batch = self._ready
        self._ready = []
        return batch

    # -- closing ---------------------------------------------------------------

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection; idempotent.

        Sends a close frame (unless one was already exchanged) and waits a bounded,
        shielded time for it to go out and for the peer's answer, then closes the
        stream.
        """
        if self._aclose_started:
            return
        self._aclose_started = True
        self._space_lot.unpark_all()
        try:
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                if (
                    self._proto.state is State.OPEN
                    and self._lost_reason is None
                    and not self._write_failed
                ):
                    self._proto.send_close(code, reason)
                    self._pull_output()
                await self._drain()
                if not self._write_failed:
                    await self._await_peer_close()
        finally:
            self._stopping = True
            self._writer_lot.unpark_all()
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await self._stream.aclose()

    async def _drain(self) -> None:
        while self._writer_running and (self._out or (self._eof_pending and not self._eof_sent)):
            await self._drain_lot.park()
        if not self._writer_running:
            await self._flush_direct()

    async def _await_peer_close(self) -> None:
        while not self._peer_done():
            if self._out_bytes > SEND_HIGH_WATER and self._writer_running:
                # As in receive_batch: a peer pinging through our close reads no more
                # than the writer can take (the caller's deadline bounds the wait).
                await self._space_lot.park()
            elif self._reading:
                # The receive_batch task will see the close; let it tell us.
                await self._read_lot.park()
            elif not await self._read_chunk():
                break
            else:
                # Whatever the peer still sent before its close is dropped.
                self._ready.clear()
            if not self._writer_running:
                await self._flush_direct()


# -- server --------------------------------------------------------------------


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


# -- client --------------------------------------------------------------------


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

    For tests, the conformance runner and a future gateway. Raises
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
