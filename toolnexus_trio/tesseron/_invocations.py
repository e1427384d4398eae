"""The invocations of one gateway connection, and the session their handlers talk to.

:class:`Invocations` is the part of :class:`~._connection._Connection` (a mixin) that
runs actions: ``actions/invoke`` starts one task per invocation (the handler, in its
own cancel scope), its answer goes out once, ``actions/cancel`` and the action's
timeout interrupt it, and one **timer** serves every deadline (a FIFO queue per
timeout plus one cancel scope whose deadline is the earliest one) instead of a
watchdog task per invocation. It is also the ``_Session`` each handler's
:class:`ActionContext` gets: progress and log (:meth:`Invocations.notify_room`),
sample/elicit requests (handed to the connection's request servicer), the
capabilities and agent. The read loop, the handshake, resource reads and the drop are
the connection's (:mod:`._connection`); the methods here share its state.

This is the one exception-to-wire boundary: :class:`ActionError` keeps its code,
message and data; any other exception becomes ``-32603 "Internal error"`` and is
logged, never sent (:func:`_as_action_error`, for resource reads too).

Cancel and timeout: the ``-32001`` / ``-32002`` answer is sent *first*, then the
handler's scope is cancelled. A handler that shields itself or ignores cancellation
keeps running in this nursery after its answer went out; its result is dropped.
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any, Final

import trio

from .._groups import leaf_exceptions
from ._context import ActionContext, _Invocation, _OutboundRequest, _Reply
from ._errors import ActionError, TesseronErrorCode, invalid_params
from ._wire import Agent, Capabilities, Request, RequestId, error_frame, invoke_result_frame
from ._ws import WebSocket, WebSocketClosed

if TYPE_CHECKING:
    from ._app import TesseronApp, _Action

NOTIFY_BURST: Final = 256
"""Notifications sent between forced yields (see :meth:`Invocations.notify_room`)."""

MAX_HELD_ANSWER_BYTES: Final = 4 * 1024 * 1024
"""Bytes of invocation answers held while the writer has no room before further
admitted handlers wait to start (see ``_run_invocation``)."""


class Invocations:
    """Invocations and the handlers' session for ``_Connection`` (a mixin)."""

    # The connection's state these methods share (set in _Connection.__init__).
    _app: TesseronApp
    _ws: WebSocket
    _closed: bool
    _capabilities: Capabilities
    _agent: Agent
    _burst: int
    _req_send: trio.MemorySendChannel[_OutboundRequest]
    _pending: dict[int, trio.MemorySendChannel[_Reply]]
    _nursery: trio.Nursery | None
    _invocations: dict[str, _Invocation]
    _timeouts: dict[float, collections.deque[_Invocation]]
    _timed: int
    _timer_scope: trio.CancelScope | None
    _held_bytes: int  # answers (frames) of finished handlers waiting for writer room
    _held_lot: trio.lowlevel.ParkingLot  # handlers waiting to start while those are many

    if TYPE_CHECKING:
        # The connection's own methods these call.
        def _close(self, code: int | None = None, reason: str = "") -> None: ...
        def _send(self, frame: str) -> None: ...
        def _release(self, size: int) -> None: ...
        def _refuse(self, id: RequestId, exc: Exception, size: int) -> None: ...

    # -- what ActionContext uses (the _Session protocol) --------------------------

    @property
    def closed(self) -> bool:
        """Whether the transport dropped (or the connection is shutting down)."""
        return self._closed

    @property
    def capabilities(self) -> Capabilities:
        """Negotiated capabilities (welcome, then ``tesseron/claimed``)."""
        return self._capabilities

    @property
    def agent(self) -> Agent:
        """The agent from the welcome or ``tesseron/claimed``."""
        return self._agent

    @property
    def requests(self) -> trio.MemorySendChannel[_OutboundRequest]:
        """Where contexts send sample/elicit requests (size 0: the servicer takes each)."""
        return self._req_send

    async def notify_room(self) -> bool:
        """Wait until a notification may be queued; ``False`` once the connection dropped.

        A cancellation point that yields only while the writer is above its
        high-water mark, so a burst of notifications batches into few writes; every
        :data:`NOTIFY_BURST` notifications it yields anyway, so a progress storm
        cannot starve the read loop (and a cancel is still answered promptly). The
        caller then builds its frame and queues it with :meth:`notify_nowait`
        without awaiting in between.
        """
        self._burst += 1
        if self._burst >= NOTIFY_BURST:
            self._burst = 0
            await trio.lowlevel.checkpoint()
        ws = self._ws
        # wait_writable's own test, inlined: one coroutine less per progress update.
        if ws.writable:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await ws.wait_writable()
        return not self._closed

    def notify_nowait(self, frame: str) -> None:
        """Queue a notification; silently dropped after a drop."""
        if not self._closed:
            try:
                self._ws.send_nowait(frame)
            except WebSocketClosed as exc:
                self._close(exc.code, exc.reason)

    def abandon(self, request: _OutboundRequest) -> None:
        """Forget a request whose requester left; a late answer is then dropped."""
        if request.id is not None:
            self._pending.pop(request.id, None)

    # -- invocations --------------------------------------------------------------

    def _on_invoke(self, req: Request, size: int) -> None:
        self._start_invocation(req.id, req.params, size)

    def _invoke(self, id: RequestId, params: Any, size: int) -> None:
        """``actions/invoke`` from the read loop's hot path (errors answered as in _dispatch)."""
        try:
            self._start_invocation(id, params, size)
        except Exception as exc:
            self._refuse(id, exc, size)

    def _start_invocation(self, id: RequestId, params: Any, size: int) -> None:
        if not isinstance(params, dict):
            raise invalid_params("actions/invoke needs params {name, invocationId, input}")
        name = params.get("name")
        invocation_id = params.get("invocationId")
        if not isinstance(name, str) or not isinstance(invocation_id, str):
            raise invalid_params("actions/invoke needs string name and invocationId")
        action = self._app._actions.get(name)
        if action is None:
            raise ActionError(TesseronErrorCode.ACTION_NOT_FOUND, f"Action not found: {name}")
        if invocation_id in self._invocations:
            raise ActionError(
                TesseronErrorCode.INVALID_REQUEST, f"Invocation already running: {invocation_id}"
            )
        value = action.prepare_input(params.get("input"))
        client = params.get("client")
        route = origin = None
        if isinstance(client, dict):
            route = client.get("route")
            origin = client.get("origin")
        inv = _Invocation(
            id,
            invocation_id,
            action.name,  # the registered string, not a copy per invoke
            origin if isinstance(origin, str) else self._app.origin,
            route if isinstance(route, str) else None,
            trio.current_time() + action.timeout_s,
        )
        self._invocations[invocation_id] = inv
        # The invocation's deadline joins its timeout's queue (see _timer_loop).
        queue = self._timeouts.get(action.timeout_s)
        if queue is None:
            queue = self._timeouts[action.timeout_s] = collections.deque()
        queue.append(inv)
        self._timed += 1
        scope = self._timer_scope
        if scope is not None and inv.deadline < scope.deadline:
            scope.deadline = inv.deadline
        assert self._nursery is not None
        # A name given saves trio building one per task (0.2 us, 112 bytes).
        self._nursery.start_soon(
            self._run_invocation, action, inv, value, size, name=action.task_name
        )

    async def _run_invocation(
        self, action: _Action, inv: _Invocation, value: Any, size: int
    ) -> None:
        try:
            try:
                with inv.scope:
                    if self._held_bytes > MAX_HELD_ANSWER_BYTES:
                        await self._wait_held()
                    output = await action.handler(value, ActionContext(inv, self))
                if inv.answered:
                    return  # cancelled or timed out: the answer went out already
                if self._ws.writable:
                    # With room there is no need for wait_writable's cancellation
                    # check (0.3 us): build and send at once.
                    frame = invoke_result_frame(inv.request_id, inv.invocation_id, output)
                else:
                    # No room: hold the answer as its frame (the output is dropped, so
                    # it exists once), counted, until there is. While more than
                    # MAX_HELD_ANSWER_BYTES are held, admitted handlers wait to start:
                    # a pipelined batch of quick handlers (a thousand per 64 KiB read)
                    # each holding its answer grew a host by 100 MB (issue 30).
                    frame = invoke_result_frame(inv.request_id, inv.invocation_id, output)
                    del output
                    held = len(frame)
                    self._held_bytes += held
                    try:
                        await self._ws.wait_writable()
                    finally:
                        self._held_bytes -= held
                        if self._held_lot:
                            self._held_lot.unpark_all()
            except Exception as exc:
                error = _as_action_error(exc)
                if not inv.answered:
                    await self._ws.wait_writable()
                frame = error_frame(inv.request_id, error)
            self._finish(inv, frame)
        finally:
            self._release(size)

    async def _wait_held(self) -> None:
        """Wait while held answers are over :data:`MAX_HELD_ANSWER_BYTES` (or until the
        connection closes)."""
        while self._held_bytes > MAX_HELD_ANSWER_BYTES and not self._closed:
            await self._held_lot.park()

    def _finish(self, inv: _Invocation, frame: str) -> None:
        if inv.answered:
            return  # exactly one response per id: a late result is dropped
        inv.answered = True
        del self._invocations[inv.invocation_id]
        self._send(frame)
        # Lazy deletion keeps finishing O(1); compact when dead entries dominate.
        if self._timed > 2 * len(self._invocations) + 64:
            self._timed = 0
            for timeout, queue in self._timeouts.items():
                live = collections.deque(inv for inv in queue if not inv.answered)
                self._timeouts[timeout] = live
                self._timed += len(live)

    def _interrupt(self, inv: _Invocation, error: ActionError) -> None:
        """Answer *inv* with *error* first, then cancel its handler."""
        if inv.answered:
            return
        inv.answered = True
        del self._invocations[inv.invocation_id]
        self._send(error_frame(inv.request_id, error))
        inv.cancel()

    def _on_cancel(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        invocation_id = params.get("invocationId")
        if not isinstance(invocation_id, str):
            return  # nothing of ours has such an id; ignored like any unknown id
        inv = self._invocations.get(invocation_id)
        if inv is not None:
            self._interrupt(inv, ActionError(TesseronErrorCode.CANCELLED, "Invocation cancelled"))

    async def _timer_loop(self) -> None:
        """The one timer for every invocation deadline."""
        while True:
            earliest = min((q[0].deadline for q in self._timeouts.values() if q), default=math.inf)
            with trio.CancelScope(deadline=earliest) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            now = trio.current_time()
            # A snapshot: a timeout answer that fails may close the connection.
            for queue in list(self._timeouts.values()):
                while queue and queue[0].deadline <= now and not self._closed:
                    inv = queue.popleft()
                    self._timed -= 1
                    if not inv.answered:
                        self._interrupt(
                            inv,
                            ActionError(
                                TesseronErrorCode.TIMEOUT, f"Action {inv.action_name} timed out"
                            ),
                        )


def _as_action_error(exc: Exception) -> ActionError:
    """The one exception-to-wire mapping for handlers and resource reads.

    An :class:`ActionError` keeps its code and data, also when it is the single
    failure inside a group from the handler's own nursery; anything else is an
    internal error whose cause stays in the log.
    """
    if isinstance(exc, ActionError):
        return exc
    if isinstance(exc, ExceptionGroup):
        leaves = list(leaf_exceptions(exc))
        if len(leaves) == 1 and isinstance(leaves[0], ActionError):
            return leaves[0]
    return ActionError.internal(exc)
