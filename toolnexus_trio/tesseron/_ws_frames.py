"""The WebSocket frame fast path: the bytes of the common frames, read and written by hand.

A server's common frames are a final text or binary frame each way, and parsing and
building them with the ``websockets`` protocol object costs several times what doing
it here does. :class:`~toolnexus_trio.tesseron._ws.WebSocket` calls these helpers for
those frames only and leaves every other frame, and the connection's state, to the
protocol object, so it still enforces RFC 6455 (see ``WebSocket._receive``).

Plain functions of bytes, with no state of their own: one module-level call per frame.
"""

from __future__ import annotations

import struct

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


def _frame_header(data: bytes, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """The header of the frame that starts at ``data[pos]`` (RFC 6455 5.2).

    ``(first byte, mask bit, payload start, payload end)``: the first byte holds FIN,
    the reserved bits and the opcode; the mask bit is 0 for an unmasked frame, and a
    masked frame's key is the 4 bytes before the payload start. ``None`` while the
    header has not fully arrived in ``data[pos:end]``.
    """
    if end - pos < 2:
        return None
    b0 = data[pos]
    b1 = data[pos + 1]
    size = b1 & 0x7F
    start = pos + 2
    if size == 126:
        start += 2
        if end < start:
            return None
        size = (data[pos + 2] << 8) | data[pos + 3]
    elif size == 127:
        start += 8
        if end < start:
            return None
        size = int.from_bytes(data[pos + 2 : start], "big")
    masked = b1 & 0x80
    if masked:
        start += 4
        if end < start:
            return None
    return b0, masked, start, start + size


def _take_write(out: list[bytes], queued: int, limit: int) -> bytes:
    """The next write, taken off the queue *out* of *queued* bytes: all of it, or the
    queued frames that fit in *limit* bytes (``WRITE_CHUNK``; at least one frame).

    Joining a whole backlog at once would hold a second copy of up to
    ``SEND_HIGH_WATER`` bytes while it is written (10,000 answers released
    together: 1 MiB more peak memory, 100 bytes per invocation).
    """
    if queued <= limit:
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data
    size = count = 0
    for piece in out:
        if count and size + len(piece) > limit:
            break
        size += len(piece)
        count += 1
    data = b"".join(out[:count])
    del out[:count]
    return data
