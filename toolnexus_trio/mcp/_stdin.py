"""Our stdin as an MCP stdio transport, one line held to the message cap.

``serve --stdio`` and ``gateway --mcp`` serve MCP on this process's stdin and stdout.
The SDK's ``stdio_server`` reads stdin a whole line at a time, however long: a client
that sends 300 MB without a newline is 300 MB of our memory. :func:`capped_stdio_server`
is the SDK's transport (its stdout side: fd 1 points at stderr while serving) with
stdin read by :class:`CappedLines`: one line may be at most
:data:`~toolnexus_trio.mcp._limits.MAX_MESSAGE_BYTES`, the cap our stdio client puts on
a server's lines. A longer one ends the session: the serve returns and
:class:`LineTooLong` is raised from the ``async with``.

Like the SDK, we point fd 0 at ``/dev/null`` while serving (so a tool or a child that
reads stdin cannot steal protocol bytes) and read the wire from a private duplicate;
fd 0 is restored afterwards. A pipe or a socket is read by Trio directly (cancellable,
no thread); anything else (a terminal, a regular file) by one ``os.read`` at a time in
a worker thread.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator
from typing import Any, Final, cast

import trio
from mcp.server.stdio import stdio_server

from ._limits import MAX_MESSAGE_BYTES, size_text

_CHUNK: Final = 65536


class LineTooLong(Exception):
    """The client sent a line (one message) over :data:`MAX_MESSAGE_BYTES`."""


class CappedLines:
    """The non-blank lines of a file descriptor, each at most *limit* bytes, as an async
    iterator of ``bytes`` (what the SDK's stdin reader iterates). Past the limit the
    iteration ends (the session sees end of input) and :attr:`error` says why.

    Memory stays within one line (plus one read) whatever arrives; each byte is
    scanned for a newline once.
    """

    def __init__(self, fd: int, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self.error: LineTooLong | None = None
        self._fd = fd
        self._stream: trio.lowlevel.FdStream | None = None
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            # Trio reads it directly (it sets O_NONBLOCK, and restores it on close).
            self._stream = trio.lowlevel.FdStream(fd)
        self._buffer = bytearray()
        self._lines: collections.deque[bytes] = collections.deque()
        self._eof = False
        self._in_thread = False

    async def _read(self) -> bytes:
        if self._stream is not None:
            try:
                return await self._stream.receive_some(_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return b""
        # A terminal or a file: a blocking read, off the event loop. A cancel abandons
        # the thread (its read returns when input comes or at exit); until then the
        # descriptor stays open (see aclose).
        self._in_thread = True
        try:
            data = await trio.to_thread.run_sync(os.read, self._fd, _CHUNK, abandon_on_cancel=True)
        except OSError:
            data = b""
        self._in_thread = False
        return data

    def __aiter__(self) -> CappedLines:
        return self

    async def __anext__(self) -> bytes:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            chunk = await self._read()
            if not chunk:
                self._eof = True
                if self._buffer.strip():  # a last line without its newline
                    self._lines.append(bytes(self._buffer))
                self._buffer = bytearray()
                continue
            start = len(self._buffer)
            self._buffer += chunk
            while (end := self._buffer.find(b"\n", start)) >= 0 and end <= self.limit:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]  # bytearray drops a prefix in O(1)
                start = 0
                if line.strip():
                    self._lines.append(line)
            if len(self._buffer) > self.limit:
                # The lines before it still go in; then the input ends here.
                self.error = LineTooLong(
                    f"stdin: the client sent a message (one line) over the "
                    f"{size_text(self.limit)} limit; closing"
                )
                self._eof = True
                self._buffer = bytearray()
        return self._lines.popleft()

    async def aclose(self) -> None:
        """Close the descriptor (not while an abandoned thread may still read it)."""
        if self._stream is not None:
            await self._stream.aclose()
        elif not self._in_thread:
            os.close(self._fd)
            await trio.lowlevel.checkpoint()


@contextlib.asynccontextmanager
async def capped_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's ``stdio_server`` streams, stdin read by :class:`CappedLines`; raises
    :class:`LineTooLong` when the session ended on a line over the cap."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)  # the wire, above 0-2
    try:
        lines = CappedLines(private)
    except BaseException:
        os.close(private)
        raise
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(devnull, 0)
        finally:
            os.close(devnull)
        try:
            # The SDK iterates whatever it is given for lines, and parses bytes as well.
            async with stdio_server(stdin=cast(Any, lines)) as streams:
                yield streams
        finally:
            # fd 0 is the wire again before the duplicate closes (which puts back the
            # blocking mode Trio changed, on the file both share).
            with contextlib.suppress(OSError):
                os.dup2(private, 0)
    finally:
        with trio.CancelScope(shield=True):
            await lines.aclose()
    if lines.error is not None:
        raise lines.error
