"""JSON-RPC 2.0 over a pair of pipes, one message per line: ACP's framing, both ways.

The same connection serves the editor side (we run an ACP agent as a model:
:mod:`._source`) and the agent side (an editor runs ours: :mod:`._agent`). Lines are
read by the line-capped reader MCP stdio uses (:mod:`.._lines`), so one message is at
most :data:`MAX_MESSAGE_BYTES` and a longer one ends the connection. Every write goes
through one writer task fed by a size-0 channel, so a cancelled sender never leaves
half a message on the pipe. The peer's requests are each handled in a task of the
connection's nursery, at most :data:`MAX_PEER_REQUESTS` at once: at the cap nothing
more is read until one is answered (backpressure instead of a queue).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from .._lines import LineReader

logger = logging.getLogger("toolnexus_trio.acp")

MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The largest JSON-RPC message either side may send (one line)."""
END_GRACE: Final = 1.0
"""Seconds the peer's requests in flight get to be answered once its output ended."""
MAX_PEER_REQUESTS: Final = 16
"""The peer's requests handled at once; at the cap, reading waits."""

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603


class ACPError(RuntimeError):
    """An ACP protocol failure: an error answer, a broken or closed connection, a bad
    message, an agent that does not start."""


class RpcError(Exception):
    """Raised by a request handler: answered to the peer as a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


OnRequest = Callable[[str, dict[str, Any]], Awaitable[Any]]
OnNotification = Callable[[str, dict[str, Any]], None]


class _Call:
    """One request of ours waiting for its answer."""

    def __init__(self, id: int, method: str) -> None:
        self.id = id
        self.method = method
        self.done = trio.Event()
        self.result: Any = None
        self.error: ACPError | None = None


class Connection:
    """One JSON-RPC peer (see the module docs); run :meth:`serve` in a nursery."""

    def __init__(
        self,
        reader: LineReader,
        writer: trio.abc.SendStream,
        on_request: OnRequest,
        on_notification: OnNotification,
        name: str,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.on_request = on_request
        self.on_notification = on_notification
        self.name = name
        self._next_id = 0
        self._calls: dict[int, _Call] = {}
        self._send, self._outbox = trio.open_memory_channel[bytes](0)
        self._slots = trio.Semaphore(MAX_PEER_REQUESTS)
        self.closed = trio.Event()
        """Set once the peer's output ended (or broke the framing)."""
        self.why: str = ""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read, dispatch and write until the peer's output ends; then the pending
        calls fail, and the peer's requests still in flight get :data:`END_GRACE`
        seconds to be answered (a peer may close its side and still read). Cancel the
        enclosing scope to stop at once."""
        async with trio.open_nursery() as outer:
            outer.start_soon(self._write_loop)
            task_status.started()
            async with trio.open_nursery() as handlers:
                try:
                    await self._read_loop(handlers)
                finally:
                    self._end(self.why or f"{self.name} closed its output")
                handlers.cancel_scope.deadline = trio.current_time() + END_GRACE
            # Every answer is queued: let the writer drain them, briefly, then stop.
            outer.cancel_scope.deadline = trio.current_time() + END_GRACE
            await self._send.aclose()

    def _end(self, why: str) -> None:
        if self.closed.is_set():
            return
        self.why = why
        self.closed.set()
        for call in self._calls.values():
            call.error = ACPError(why)
            call.done.set()

    async def _write_loop(self) -> None:
        broken = False
        async with self._outbox:
            async for data in self._outbox:
                if broken:
                    continue  # the peer stopped reading: drop, so no sender waits forever
                try:
                    await self.writer.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    broken = True

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        while True:
            line = await self.reader.receive_line()
            if line is None:
                if self.reader.over_limit:
                    self.why = f"{self.name} sent a message over {MAX_MESSAGE_BYTES} bytes"
                    logger.error("%s; disconnected", self.why)
                return
            try:
                message = json.loads(line)
            except ValueError:
                logger.warning("%s sent a line that is not JSON; ignored", self.name)
                await self._write(
                    {"jsonrpc": "2.0", "id": None, "error": _error(-32700, "parse error")}
                )
                continue
            if not isinstance(message, dict):
                continue
            method = message.get("method")
            params = message.get("params")
            if not isinstance(params, dict):
                params = {}
            if isinstance(method, str):
                if "id" in message:
                    await self._slots.acquire()
                    nursery.start_soon(self._answer, message["id"], method, params)
                else:
                    try:
                        self.on_notification(method, params)
                    except Exception:
                        logger.exception("%s: handling %r failed", self.name, method)
                continue
            call = self._calls.get(message["id"]) if isinstance(message.get("id"), int) else None
            if call is None:
                continue  # an answer to a call we gave up on (cancelled): dropped
            error = message.get("error")
            if isinstance(error, dict):
                call.error = ACPError(f"acp error {error.get('code')}: {error.get('message')}")
            else:
                call.result = message.get("result")
            call.done.set()

    async def _answer(self, id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            try:
                result = await self.on_request(method, params)
                reply: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "result": result}
            except RpcError as exc:
                reply = {"jsonrpc": "2.0", "id": id, "error": _error(exc.code, exc.message)}
            except Exception as exc:
                logger.exception("%s: handling %r failed", self.name, method)
                reply = {"jsonrpc": "2.0", "id": id, "error": _error(INTERNAL_ERROR, str(exc))}
            await self._write(reply)
        finally:
            self._slots.release()

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        if self.closed.is_set() and "id" not in message:
            return
        with contextlib.suppress(trio.ClosedResourceError):  # the connection is over
            await self._send.send(data)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (nothing comes back)."""
        if self.closed.is_set():
            return
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def start(self, method: str, params: dict[str, Any]) -> _Call:
        """Send a request; :meth:`result` waits for its answer."""
        if self.closed.is_set():
            raise ACPError(self.why)
        self._next_id += 1
        call = _Call(self._next_id, method)
        self._calls[call.id] = call
        try:
            await self._write({"jsonrpc": "2.0", "id": call.id, "method": method, "params": params})
        except BaseException:
            del self._calls[call.id]
            raise
        return call

    async def result(self, call: _Call) -> Any:
        """The answer to *call* (its :class:`ACPError` when it failed)."""
        await call.done.wait()
        self.forget(call)
        if call.error is not None:
            raise call.error
        return call.result

    def forget(self, call: _Call) -> None:
        """Stop waiting for *call*: a late answer is dropped."""
        self._calls.pop(call.id, None)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and wait for its answer (a cancel forgets it)."""
        call = await self.start(method, params)
        try:
            return await self.result(call)
        finally:
            self.forget(call)


def _error(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}
