"""The stdio transport to a local MCP server, on Trio, with a bounded shutdown.

We spawn the server ourselves (not the SDK's ``stdio_client``) for three reasons:

- **The whole process tree dies.** The server runs in its own process group, under a
  supervisor that keeps every process it starts within reach (see
  :mod:`toolnexus_trio._procs`); on close every process of the tree is signalled, even
  when the server itself already exited and left children behind (``npx`` -> ``node``
  is that shape), and even one that left the group (``setsid``, a daemon).
- **Shutdown is bounded, and short.** A server that finished its handshake gets EOF on
  stdin and :data:`EOF_GRACE` seconds to exit, then the tree gets SIGTERM and
  :data:`TERM_GRACE` seconds, then SIGKILL: at most about 2.5 s, all shielded so a
  cancelled caller cannot leak a process. A server that never finished its handshake
  (a cancelled or timed-out connect) is killed at once: nothing of it is worth a grace.
  The SDK's own shielded teardown waits 2 s + 2 s + 2 s.
- **Memory stays bounded.** One line (one JSON-RPC message) may be at most
  :data:`MAX_LINE_BYTES`; a server that sends more is disconnected. A server's own
  requests (sampling, elicitation, ``ping``) are owed an answer each: at most
  :data:`MAX_SERVER_REQUESTS` are owed at once (handled, or answered and the answer
  not yet written to its stdin), and at the cap we read nothing more from the server
  until one is written (see :class:`_Owed`). A server that floods requests and never
  reads its stdin is then left with its own pipe full, instead of each refusal being a
  task of ours waiting to write to a pipe nobody reads.
- **Cancel and close never wait on a stuck pipe.** An owed answer and a
  ``notifications/cancelled`` never wait for room in the write queue (the cap bounds
  the first, our own requests the second): the SDK writes both under a shield (up to
  5 s and 1 s) when a call is cancelled or the session closes, so waiting there made a
  cancel return seconds late.

The server's stderr is ours (its logs show where ours do); its stdin and stdout are
the protocol pipes.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import subprocess
from collections.abc import AsyncIterator
from typing import Final

import anyio
import attrs
import trio
from mcp.shared.message import SessionMessage
from mcp_types import (
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from .._lines import LineReader
from .._procs import ProcessTree, open_tree
from .._streak import ReadyStreak
from ._config import McpServerConfig
from ._limits import MAX_MESSAGE_BYTES, size_text

logger = logging.getLogger("toolnexus_trio.mcp")

MAX_LINE_BYTES: Final = MAX_MESSAGE_BYTES
"""The largest message a stdio server may send (one line of JSON)."""
EOF_GRACE: Final = 1.0
"""Seconds a connected server gets to exit after its stdin closes."""
TERM_GRACE: Final = 1.0
"""Seconds between SIGTERM and SIGKILL to the server's process tree."""
_REAP_BOUND: Final = 0.5


MAX_WRITE_BACKLOG: Final = 64
"""Messages queued for the server's stdin before senders wait (see :class:`_PipeWriter`)."""

MAX_SERVER_REQUESTS: Final = 256
"""Requests from the server owed an answer at once (see :class:`_Owed`): far above what
the sampling and elicitation limits let run (30 a minute, 16 at once), so only a
server that does not read its answers, or floods faster than they go out, meets it."""


def _key(id: object) -> str:
    # The SDK matches a cancel's "7" to request 7 (it coerces ids): so do we.
    return str(id)


class _Owed:
    """The server's requests we owe an answer, counted from read to written.

    ``count`` is the requests delivered to the session and not answered yet, plus the
    answers queued and not yet written to the server's stdin. The reader waits at
    :data:`MAX_SERVER_REQUESTS` before delivering another request, so the session's
    tasks for server requests, and the answers in the write queue, stay within it
    whatever the server sends. Counts are per id: a server that reuses an id gets no
    slot for free. A request the server cancels is never answered (the SDK drops it),
    so its ``notifications/cancelled`` frees the slot of one unanswered request of that
    id (an answer already queued keeps its slot until written).
    """

    def __init__(self) -> None:
        self.unanswered: dict[str, int] = {}
        self.count = 0
        self.lot = trio.lowlevel.ParkingLot()

    def request(self, id: object) -> None:
        key = _key(id)
        self.unanswered[key] = self.unanswered.get(key, 0) + 1
        self.count += 1

    def _take(self, id: object) -> bool:
        key = _key(id)
        left = self.unanswered.get(key, 0)
        if not left:
            return False
        if left == 1:
            del self.unanswered[key]
        else:
            self.unanswered[key] = left - 1
        return True

    def cancelled(self, id: object) -> None:
        if self._take(id):
            self.freed(1)

    def answered(self, id: object) -> bool:
        """An answer to *id* is being queued: whether it is one we owe (its slot stays
        taken until :meth:`freed` says it was written)."""
        return self._take(id)

    def freed(self, n: int) -> None:
        if n:
            self.count -= n
            self.lot.unpark_all()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return exc


class _PipeReader:
    """The session's read stream: the SDK's receive loop reads the server's stdout
    itself (no reader task, no queue: one task switch less per message), through the
    line-capped reader stdio JSON-RPC shares (:mod:`.._lines`)."""

    def __init__(self, transport: StdioTransport) -> None:
        self._transport = transport
        stdout = transport.process.stdout
        assert isinstance(stdout, trio.lowlevel.FdStream)  # a pipe, on POSIX
        self._reader = LineReader(stdout, MAX_LINE_BYTES)
        self.error: str | None = None
        """Why the stream ended, when we ended it (a line over the limit)."""

    @property
    def _eof(self) -> bool:
        return self._reader.eof

    def _end(self) -> None:
        self._reader.close()
        self._transport.closed.set()
        self._transport.owed.lot.unpark_all()

    async def receive(self) -> SessionMessage | Exception:
        """The next message; :class:`anyio.EndOfStream` once the server's output ended."""
        line = await self._reader.receive_line()
        if line is None:
            if self._reader.over_limit and self.error is None:
                self.error = (
                    f"the server sent a message (one line) over the "
                    f"{size_text(MAX_LINE_BYTES)} limit; disconnected"
                )
                logger.error("MCP server process %d: %s", self._transport.process.pid, self.error)
            self._end()
            raise anyio.EndOfStream
        item = _parse(line)
        if isinstance(item, SessionMessage):
            await self._account(item.message)
        return item

    async def _account(self, message: object) -> None:
        """Count a server request (waiting for a slot first), or free the slot of one
        the server cancels. Backpressure: while we wait, nothing more is read."""
        owed = self._transport.owed
        if isinstance(message, JSONRPCRequest):
            while owed.count >= MAX_SERVER_REQUESTS and not self._gone():
                await owed.lot.park()
            owed.request(message.id)
        elif (
            isinstance(message, JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
            and "requestId" in message.params
        ):
            owed.cancelled(message.params["requestId"])

    def _gone(self) -> bool:
        # Nothing can be written any more: owed answers will never be, so stop waiting.
        out = self._transport.write
        return self._eof or out.closed or out.broken

    def __aiter__(self) -> _PipeReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop reading (the transport closes the pipe itself)."""
        self._reader.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> _PipeReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _PipeWriter:
    """The session's write stream; a writer task owns every write that can block.

    A message is serialized in the sender's task. When nothing is queued and the writer
    is idle, one non-blocking ``write`` is tried right away (the way Trio's own
    ``send_all`` starts): it never waits and never leaves half a frame behind, since
    whatever the pipe does not take is handed to the writer task, ahead of anything
    sent later. A send is a cancel point; one the pipe took whole yields to the
    scheduler only every few in a row (:mod:`.._streak`). Otherwise the message
    waits for the writer, which sends everything queued in one write; up to
    :data:`MAX_WRITE_BACKLOG` messages may wait, then senders do.
    """

    def __init__(self, fd: int, owed: _Owed) -> None:
        self.fd = fd
        self.owed = owed
        self.queue: collections.deque[bytes] = collections.deque()
        self.queued_answers = 0  # owed answers in the queue (freed once written)
        self.ready = trio.Event()
        self.room = trio.lowlevel.ParkingLot()
        self.writing = False
        self.closed = False
        self.broken = False
        self.streak = ReadyStreak()

    async def send(self, item: SessionMessage) -> None:
        """Send *item* (:class:`anyio.BrokenResourceError` once the server stopped reading).

        An answer we owe the server and a ``notifications/cancelled`` never wait for
        room (see the module docs): the SDK writes them shielded on cancel and close.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        message = item.message
        answer = isinstance(message, JSONRPCResponse | JSONRPCError) and (
            message.id is not None and self.owed.answered(message.id)
        )
        urgent = answer or (
            isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled"
        )
        while (
            not urgent and len(self.queue) >= MAX_WRITE_BACKLOG and not (self.closed or self.broken)
        ):
            await self.room.park()
        if self.closed or self.broken:
            if answer:
                self.owed.freed(1)  # never to be written
            raise anyio.ClosedResourceError if self.closed else anyio.BrokenResourceError
        data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        if not self.queue and not self.writing:
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                written = 0
            except OSError:
                self.broken = True
                if answer:
                    self.owed.freed(1)
                raise anyio.BrokenResourceError from None
            data = data[written:]
            if answer and not data:
                self.owed.freed(1)  # written whole
        if data:
            self.queue.append(data)
            self.queued_answers += answer
            self.ready.set()
            self.streak.waited()
            await trio.lowlevel.cancel_shielded_checkpoint()  # the writer task's turn
        else:
            await self.streak.done()

    def close(self) -> None:
        self.closed = True
        self.ready.set()
        self.room.unpark_all()
        self.owed.lot.unpark_all()

    async def aclose(self) -> None:
        """No more messages (those queued still go out)."""
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> _PipeWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@attrs.define(eq=False)
class StdioTransport:
    """A running server process and the SDK-shaped streams that talk to it.

    Set ``graceful`` once the handshake is done: closing then gives the server its EOF
    grace instead of killing it at once. ``closed`` is set when the server's stdout
    ends (it exited or closed it).
    """

    process: trio.Process
    closed: trio.Event = attrs.field(factory=trio.Event)
    graceful: bool = False
    owed: _Owed = attrs.field(init=False, factory=_Owed)
    read: _PipeReader = attrs.field(init=False)
    write: _PipeWriter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        stdin = self.process.stdin
        assert isinstance(stdin, trio.lowlevel.FdStream)  # a pipe, on POSIX
        self.read = _PipeReader(self)
        self.write = _PipeWriter(stdin.fileno(), self.owed)


async def _stop(tree: ProcessTree, graceful: bool) -> None:
    """Stop the server and every process of its tree (run shielded by the caller)."""
    process = tree.process
    if graceful:
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            assert process.stdin is not None
            await process.stdin.aclose()
        with trio.move_on_after(EOF_GRACE):
            await process.wait()  # the supervisor ends once every process of the tree has
    await tree.stop(TERM_GRACE if graceful else None, _REAP_BOUND)
    if process.returncode is None:
        logger.warning("MCP server process %d survived SIGKILL; abandoning it", process.pid)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                await pipe.aclose()


async def _writer(transport: StdioTransport) -> None:
    stdin = transport.process.stdin
    assert stdin is not None
    out = transport.write
    try:
        while True:
            while not out.queue:
                if out.closed:
                    return
                await out.ready.wait()
                out.ready = trio.Event()
            data = b"".join(out.queue)
            out.queue.clear()
            answers, out.queued_answers = out.queued_answers, 0
            out.room.unpark_all()
            out.writing = True
            await stdin.send_all(data)
            out.writing = False
            transport.owed.freed(answers)
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's view too, so no request
        # waits forever on an answer that cannot come.
        out.broken = True
        out.room.unpark_all()
        transport.read._end()


@contextlib.asynccontextmanager
async def open_stdio(config: McpServerConfig) -> AsyncIterator[StdioTransport]:
    """Spawn *config*'s command (environment: ours plus ``config.environment``) and
    yield the transport; leaving the block stops the whole process tree (bounded)."""
    env = {**os.environ, **config.environment}
    tree = await open_tree(
        list(config.command),
        linger=True,  # the process ends with the last process of the server's tree
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=config.cwd,
    )
    # No await until the try: a cancel in between would leak the process.
    transport = StdioTransport(tree.process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, transport)
            try:
                yield transport
            finally:
                nursery.cancel_scope.cancel()
    finally:
        transport.write.close()
        with trio.CancelScope(shield=True):
            await _stop(tree, transport.graceful)
