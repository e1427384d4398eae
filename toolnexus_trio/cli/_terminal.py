"""Lines typed on the terminal (file descriptor 0), read so that Ctrl-C always ends cleanly.

Every command that asks the user something (``demo --ask``, ``ask``'s ``question``
builtin and its confirmations) reads its answers here, never through ``sys.stdin``.

Why not ``sys.stdin.readline`` (or ``input``) in a worker thread: Ctrl-C cancels the
wait, but the thread stays blocked inside the buffered stdin object, holding its
lock, and interpreter shutdown then aborts the process ("Fatal Python error:
_enter_buffered_busy: could not acquire lock for <stdin>", exit status -6).

So the wait for input is :func:`trio.lowlevel.wait_readable` on fd 0: a checkpoint like
any other, with no thread at all, which a cancel simply ends. Only once fd 0 is
readable does a thread do the raw ``os.read``, which then returns at once; its bytes
are kept even if the waiter was cancelled meanwhile, so no typed line is lost. The fd's
flags are never changed (making it non-blocking would also change stdout and stderr
when they share the terminal's open file). A regular file or ``/dev/null`` cannot be
polled; their reads never block, so they go straight to the thread.

An instance belongs to one ``trio.run``.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    import outcome

MAX_LINE_BYTES: Final = 64 * 1024
"""A longer line is cut here and the rest of it dropped: memory stays bounded."""

_CHUNK: Final = 65_536


def is_terminal(fd: int = 0) -> bool:
    """Whether *fd* is a terminal (``False`` for a pipe, a file, or a closed fd)."""
    try:
        return os.isatty(fd)
    except OSError:
        return False


class TerminalLines:
    """Lines from file descriptor *fd* (default 0, the process's stdin).

    :meth:`readline` returns one line without its line ending (bytes that are not UTF-8
    are replaced, a line over :data:`MAX_LINE_BYTES` is cut), or ``None`` at end of
    input: stdin closed, ``/dev/null``, a hung-up terminal, or no stdin at all. Callers
    take turns (a lock), so two questions never read each other's answers.
    """

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._pollable = True
        self._dropping = False  # inside a line over the cap: drop up to its newline
        self._in_flight: trio.Event | None = None  # set when the thread's read is in
        self._lock = trio.Lock()

    async def readline(self) -> str | None:
        """The next line, or ``None`` at end of input. Cancellable at any point."""
        async with self._lock:
            while True:
                line = self._take_line()
                if line is not None:
                    return line
                if self._eof:
                    if not self._buffer:
                        return None
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    return _decode(rest)
                await self._fill()

    def _take_line(self) -> str | None:
        newline = self._buffer.find(b"\n")
        if newline < 0 or newline > MAX_LINE_BYTES:
            if len(self._buffer) < MAX_LINE_BYTES:
                return None
            line = bytes(self._buffer[:MAX_LINE_BYTES])
            del self._buffer[:MAX_LINE_BYTES]
            self._drop_rest_of_line()
            return _decode(line)
        line = bytes(self._buffer[:newline])
        del self._buffer[: newline + 1]
        return _decode(line)

    def _drop_rest_of_line(self) -> None:
        newline = self._buffer.find(b"\n")
        if newline < 0:
            self._buffer.clear()
            self._dropping = True
        else:
            del self._buffer[: newline + 1]

    async def _fill(self) -> None:
        if self._in_flight is None:
            if self._pollable:
                try:
                    await trio.lowlevel.wait_readable(self._fd)
                except OSError:  # EPERM: a regular file or /dev/null; EBADF: no stdin
                    self._pollable = False
            self._in_flight = self._start_read()
        await self._in_flight.wait()

    def _start_read(self) -> trio.Event:
        arrived = trio.Event()
        token = trio.lowlevel.current_trio_token()
        fd = self._fd

        def read() -> bytes:
            return os.read(fd, _CHUNK)

        def land(result: outcome.Outcome[bytes]) -> None:
            self._in_flight = None
            try:
                data = result.unwrap()
            except Exception:  # EIO (the terminal hung up), EBADF (no stdin): the end
                data = b""
            self._feed(data)
            arrived.set()

        def deliver(result: outcome.Outcome[bytes]) -> None:
            # From the thread: hand the bytes to the run (gone already after Ctrl-C).
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(land, result)

        trio.lowlevel.start_thread_soon(read, deliver, name="toolnexus terminal read")
        return arrived

    def _feed(self, data: bytes) -> None:
        if not data:
            self._eof = True
            return
        if self._dropping:
            newline = data.find(b"\n")
            if newline < 0:
                return
            data = data[newline + 1 :]
            self._dropping = False
        self._buffer += data


def _decode(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")
