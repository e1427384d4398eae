"""WebSocket transport on Trio: the connection engine both sides share. A little over
600 lines, long because :class:`WebSocket` is one state machine (reader, writer queue
and stall watchdog share its counters on the hot path); the server side, the client
side and the frame bytes are already in their own modules.

:class:`WebSocket` drives a ``websockets`` Sans-I/O protocol object. The server side
is :mod:`._ws_server`; the client side is the gateway's (the host never dials), in
:mod:`toolnexus_trio.gateway._ws_client`.

Why not trio-websocket: it pays a reader task, a channel hop and a lock per message,
which measured 3-4x slower than feeding a Sans-I/O protocol straight from a
:class:`trio.SocketStream` (see ``notes/websocket-transport.md``). Here:

* the task calling :meth:`WebSocket.receive_batch` does one ``receive_some(65536)``
  and returns every complete message in that chunk;
* everything to send (frames, pongs, close frames) goes to one queue, and a single
  writer task joins what has accumulated into one ``send_all``;
* on the server side, the common frames (a final text or binary frame each way) are
  parsed and written by hand (the byte-level helpers are in :mod:`._ws_frames`), and
  the protocol object handles every other frame and the connection's state, so it
  still enforces RFC 6455 (see :meth:`WebSocket._receive`).

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
from collections.abc import Sequence
from typing import final

import trio
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import Side, State
from websockets.server import ServerProtocol

from ._ws_frames import _frame_header, _take_write, _text_header

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

    Created by :func:`~._ws_server.serve_websocket` and the gateway's
    ``connect_websocket``; not constructed directly. One task reads
    (:meth:`receive_batch`); any task may send.
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
        # frame: _ws_server's handshake gives it the upgrade request, nothing after.
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
                    data = _take_write(self._out, self._out_bytes, WRITE_CHUNK)
                    self._out_bytes -= len(data)
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
            header = _frame_header(data, pos, end)
            if header is None:
                self._rx_held = data[pos:]
                return
            b0, masked, start, stop = header
            if (
                stop <= end
                and (b0 == 0x81 or b0 == 0x82)  # FIN, no reserved bits, text or binary
                and masked
                and stop - start <= self._max_size
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
