"""Lines from a pipe, each at most a given size: the framing of JSON-RPC over stdio.

MCP stdio servers (:mod:`toolnexus_trio.mcp._stdio`) and ACP agents
(:mod:`toolnexus_trio.acp`) both send one JSON-RPC message per line on a pipe. One
reader serves both: it reads what is there (a cancel point, waiting in Trio only when
nothing is: :mod:`._streak`), splits it into lines (blank ones dropped) and holds at
most *limit* bytes of an unfinished line: a peer that sends a longer one ends the
stream, with :attr:`LineReader.over_limit` set, so memory stays bounded whatever the
peer sends.
"""

from __future__ import annotations

import collections
import os
from typing import Final

import trio

from ._streak import ReadyStreak

_CHUNK: Final = 65536


class LineReader:
    """Lines from *stream* (a pipe), each at most *limit* bytes (see the module docs)."""

    def __init__(self, stream: trio.lowlevel.FdStream, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self._buffer = bytearray()
        self._lines: collections.deque[bytes] = collections.deque()
        self._streak = ReadyStreak()
        self.eof = False
        """Set once the stream ended (its end, a close, or a line over the limit)."""
        self.over_limit = False
        """Set when the stream ended because a line was longer than *limit*."""

    def close(self) -> None:
        """Read nothing more (lines already split are still returned)."""
        self.eof = True

    async def receive_line(self) -> bytes | None:
        """The next non-blank line, without its newline; ``None`` once the stream ended."""
        while not self._lines:
            if self.eof:
                return None
            chunk = await self._read_some()
            if not chunk:
                self.eof = True
                return None
            start = len(self._buffer)
            self._buffer += chunk
            while (end := self._buffer.find(b"\n", start)) >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                start = 0
                if line.strip():
                    self._lines.append(line)
            if len(self._buffer) > self.limit:
                self.over_limit = self.eof = True
                self._lines.clear()
                self._buffer.clear()
                return None
        return self._lines.popleft()

    async def _read_some(self) -> bytes:
        """One read (``b""`` at the stream's end or once it was closed): a cancel point,
        waiting only when nothing is there (Trio's ``receive_some`` takes a scheduler
        pass before every read)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            fd = self.stream.fileno()  # -1 once the pipe was closed
            if fd < 0:
                return b""
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                self._streak.waited()
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:  # closed while we waited
                    return b""
                continue
            except OSError:
                return b""
            await self._streak.done()
            return chunk
