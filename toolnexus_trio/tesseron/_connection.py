"""One gateway connection: read loop, dispatcher, handshake, invocations, requests.

The invocations (start, answer, cancel, timeout, the timer) and the session their
handlers' contexts talk to are the :class:`~._invocations.Invocations` mixin, in
:mod:`._invocations`; the rest is here.

Tasks in the connection's nursery:

- the **read loop** (the task running :meth:`_Connection.run`): parses frames and
  dispatches them synchronously. It never awaits user code: handlers and resource
  reads are spawned into the nursery, and answers go out with ``send_nowait`` to the
  transport's single writer task.
- one **timer** for every invocation deadline (a FIFO queue per timeout plus one
  cancel scope whose deadline is the earliest one), instead of a watchdog task per
  invocation.
- one **request servicer**: contexts send frozen request objects over a size-0
  channel; it assigns our own outbound id, sends the frame and records the one-shot
  reply channel; the read loop routes the response back.
- one task per invocation (the handler, in its own cancel scope) and per
  ``resources/read``; subscriptions live in :mod:`._subscriptions`.

Backpressure, so that memory stays bounded whatever the gateway does:

- the read loop reads more only once the writer has room (``wait_writable``, as on
  the gateway side), and admits an invocation or resource read only while fewer than
  :data:`MAX_IN_FLIGHT` of them, holding under :data:`MAX_IN_FLIGHT_BYTES` of request
  text, are running;
- every other producer waits for room *before* it builds its frame: progress and log
  (:meth:`_Connection.notify_room`),
  sample/elicit requests (the servicer takes the next one only when there is room),
  ``publish``; updates from a subscribe hook's synchronous ``emit`` are coalesced
  instead (see :mod:`._subscriptions`);
- resource reads wait for room before they *read*, one at a time, so the bytes of
  read answers in flight are the send queue plus one value, whatever their count;
- an invocation answer that finds no room is held as its frame, counted; while more
  than ``MAX_HELD_ANSWER_BYTES`` are held, admitted handlers wait to start;
- a gateway that reads nothing for ``SEND_STALL_TIMEOUT`` while a write is pending is
  disconnected with close code 1008 by the transport's watchdog.

Answers to invocations and resource reads are the one exception-to-wire boundary,
and a cancelled or timed-out invocation is answered before its handler is cancelled:
see :mod:`._invocations`.

Drop, in order: pending sample/confirm/elicit requests fail with ``-32010``; the
connection is marked closed (progress and log become no-ops, new requests fail at
once); invocations are flagged and cancelled; subscriptions stop; the host's
connection slot is released so the next dial is accepted at once; then the nursery
is cancelled. Trio cannot interrupt a task that shields itself or never reaches a
checkpoint: such a handler keeps this connection's task (not the slot) alive until
it returns, and :meth:`TesseronApp.listen` waits for it on exit.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from .._converter import wire
from ._context import _Invocation, _OutboundRequest, _Reply
from ._errors import (
    ActionError,
    TesseronErrorCode,
    invalid_params,
    method_not_found,
    transport_closed,
)
from ._invocations import Invocations, _as_action_error
from ._subscriptions import Subscriptions
from ._wire import (
    ALL_CAPABILITIES,
    PROTOCOL_VERSION,
    Agent,
    Capabilities,
    Claimed,
    HelloParams,
    Inbound,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    ResumeParams,
    Welcome,
    classify,
    decode,
    error_frame,
    major_version,
    notification_frame,
    parse_frame,
    request_frame,
    result_frame,
    unstructure,
)
from ._ws import WebSocket, WebSocketClosed

if TYPE_CHECKING:
    from ._app import ResourceHandle
    from ._host import TesseronHost

_log = logging.getLogger("toolnexus_trio.tesseron")

MAX_BACKLOG: Final = 1024
"""Gateway messages held while the welcome is pending (a gateway sends none; a bound)."""

WELCOME_TIMEOUT: Final = 30.0
"""Seconds a dialer has to answer ``tesseron/hello``; a silent one loses the slot."""

MAX_IN_FLIGHT: Final = 16384
"""Invocations and resource reads running at once per connection; the read loop waits
for one to finish before admitting more (the benchmarks run 10,000 at once)."""

MAX_IN_FLIGHT_BYTES: Final = 64 * 1024 * 1024
"""Characters of request text those hold at most (one more request may pass it)."""

MAX_READS_IN_FLIGHT: Final = 1024
"""Resource reads admitted at once per connection (they are answered one at a time,
see ``_run_read``); beyond it the read loop waits, as for :data:`MAX_IN_FLIGHT`."""

_SPAWNING: Final = frozenset({"actions/invoke", "resources/read"})
"""Requests that start a task, and so take an in-flight slot."""

_PENDING_AGENT: Final = Agent(id="pending", name="Awaiting agent")
_OUR_MAJOR: Final = major_version(PROTOCOL_VERSION)


class _Connection(Invocations):
    """The session with one gateway over one WebSocket (see the module docs)."""

    def __init__(self, host: TesseronHost, ws: WebSocket) -> None:
        self._host = host
        self._app = host.app
        self._ws = ws
        self._closed = False
        # Mirrors _welcome_event.is_set(): a plain attribute, read for every frame.
        self._welcomed = False
        self._welcome_event = trio.Event()
        self._stop_reading: tuple[int, str] | None = None
        self._capabilities = ALL_CAPABILITIES
        self._agent = _PENDING_AGENT
        self._next_id = 1  # our own outbound ids; the gateway's ids are a separate space
        self._pending: dict[int, trio.MemorySendChannel[_Reply]] = {}
        self._handshake_id: int | None = None
        self._handshake_method = ""
        self._hello_versions = (0, 0)
        self._backlog: list[tuple[Request | Notification, int]] = []
        self._invocations: dict[str, _Invocation] = {}
        # Invocations by timeout: an action's timeout is fixed and time only moves
        # forward, so each queue is in deadline order. Cheaper than a heap of
        # (deadline, seq, inv) tuples: 0.3 us and 104 bytes less per invocation.
        self._timeouts: dict[float, collections.deque[_Invocation]] = {}
        self._timed = 0  # entries in those queues, answered ones included
        self._timer_scope: trio.CancelScope | None = None
        self._subs = Subscriptions(self)
        self._nursery: trio.Nursery | None = None
        self._burst = 0
        # Admitted invocations and reads (backlogged, running or waiting for room).
        self._load = 0
        self._load_bytes = 0
        self._slot_lot = trio.lowlevel.ParkingLot()  # the read loop waits for a slot
        self._req_send, self._req_recv = trio.open_memory_channel[_OutboundRequest](0)
        self._read_lock = trio.Lock()  # resources/read answers one at a time (_run_read)
        self._reads = 0  # reads admitted and not yet answered
        self._held_bytes = 0
        self._held_lot = trio.lowlevel.ParkingLot()
        # Each takes the request and its admitted size (0 unless in _SPAWNING).
        self._requests: dict[str, Callable[[Request, int], None]] = {
            "actions/invoke": self._on_invoke,
            "resources/read": self._on_read,
            "resources/subscribe": self._on_subscribe,
            "resources/unsubscribe": self._on_unsubscribe,
        }
        self._notifications: dict[str, Callable[[Any], None]] = {
            "actions/cancel": self._on_cancel,
            "tesseron/claimed": self._on_claimed,
        }

    def _closed_now(self) -> bool:
        # A call, not an attribute read, so mypy does not carry narrowing across awaits.
        return self._closed

    # -- lifecycle ----------------------------------------------------------------

    async def run(self) -> None:
        """Serve this connection until the transport closes (or the handshake fails)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._service_requests)
                nursery.start_soon(self._welcome_deadline)
                self._send_handshake()
                try:
                    await self._read_loop()
                finally:
                    self._close()
        finally:
            self._close()

    async def _welcome_deadline(self) -> None:
        # The host has one gateway slot: a peer that takes the hello and never answers
        # must not hold it forever.
        with trio.move_on_after(WELCOME_TIMEOUT):
            await self._welcome_event.wait()
        if not self._welcomed:
            _log.warning("no welcome within %ss; closing the connection", WELCOME_TIMEOUT)
            self._close(1008, "no welcome in time")

    async def _read_loop(self) -> None:
        ws = self._ws
        while (stop := self._stop_reading) is None:
            try:
                # A gateway that stops reading must not make our answers pile up: read
                # more only once the writer has room (this never awaits user code).
                await ws.wait_writable()
                batch = await ws.receive_batch()
            except WebSocketClosed as exc:
                self._close(exc.code, exc.reason)
                return
            for text in batch:
                try:
                    try:
                        data = decode(text)
                    except (ValueError, RecursionError):
                        data = None
                        msg: Inbound | None = parse_frame(text)  # the parse error to send
                    else:
                        # The hot path: an invoke goes straight to _invoke, without a
                        # Request object and a lookup by method (1.3 us less per invoke).
                        if (
                            type(data) is dict
                            and data.get("method") == "actions/invoke"
                            and self._welcomed
                            and data.get("jsonrpc") == "2.0"
                            and "id" in data
                            and (type(rid := data["id"]) is int or type(rid) is str or rid is None)
                        ):
                            msg = None
                        else:
                            msg = classify(data)
                    size = 0
                    if msg is None or (type(msg) is Request and msg.method in _SPAWNING):
                        if not self._has_slot():
                            await self._wait_for_slot()
                            if self._stop_reading is not None or self._closed_now():
                                break
                        size = len(text)
                        self._load += 1
                        self._load_bytes += size
                    if msg is None:
                        self._invoke(rid, data.get("params"), size)
                    else:
                        self._on_message(msg, size)
                except Exception:
                    # One bad frame must never take down the connection and its work.
                    _log.exception("dropping a frame that could not be handled")
                if self._stop_reading is not None or self._closed:
                    break
        code, reason = stop
        self._close(code, reason)
        await ws.aclose(code, reason)

    def _has_slot(self) -> bool:
        return (
            self._load < MAX_IN_FLIGHT
            and self._load_bytes < MAX_IN_FLIGHT_BYTES
            and self._reads < MAX_READS_IN_FLIGHT
        )

    async def _wait_for_slot(self) -> None:
        """Wait until an invocation or read finishes (or the connection closes)."""
        while not self._has_slot() and not self._closed:
            await self._slot_lot.park()

    def _release(self, size: int) -> None:
        """An admitted request of *size* is done (answered, refused or dropped)."""
        if size:
            self._load -= 1
            self._load_bytes -= size
            if self._slot_lot:
                self._slot_lot.unpark_all()

    def _close(self, code: int | None = None, reason: str = "") -> None:
        """Tear down synchronously, in the documented order; idempotent."""
        if self._closed:
            return
        self._closed = True
        # 1. Fail every pending host request with TRANSPORT_CLOSED.
        pending, self._pending = self._pending, {}
        for reply in pending.values():
            _deliver(reply, _Reply(error=transport_closed()))
        # Contexts blocked handing over a request get BrokenResourceError -> -32010.
        self._req_recv.close()
        # 2. (progress/log check self._closed.) 3. Flag and cancel every invocation.
        invocations = list(self._invocations.values())
        self._invocations.clear()
        self._timeouts.clear()
        self._timed = 0
        for inv in invocations:
            inv.answered = True
            inv.cancel()
        # 4. Stop subscriptions.
        self._slot_lot.unpark_all()
        self._held_lot.unpark_all()
        self._subs.stop_all()
        # 5. Free the host's slot so the next dial is accepted at once.
        self._host._connection_closed(self, code, reason)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _send(self, frame: str) -> None:
        """Queue *frame* for the writer; a failed send closes the connection."""
        if self._closed:
            return
        try:
            self._ws.send_nowait(frame)
        except WebSocketClosed as exc:
            self._close(exc.code, exc.reason)

    # -- handshake ----------------------------------------------------------------

    def _send_handshake(self) -> None:
        app = self._app
        self._hello_versions = (app.actions_version, app.resources_version)
        creds = self._host._credentials
        params: HelloParams | ResumeParams
        if creds is None:
            method = "tesseron/hello"
            params = HelloParams(
                protocol_version=PROTOCOL_VERSION,
                app=app.info,
                actions=app.action_manifest(),
                resources=app.resource_manifest(),
                capabilities=ALL_CAPABILITIES,
            )
        else:
            method = "tesseron/resume"
            params = ResumeParams(
                protocol_version=PROTOCOL_VERSION,
                app=app.info,
                actions=app.action_manifest(),
                resources=app.resource_manifest(),
                capabilities=ALL_CAPABILITIES,
                session_id=creds[0],
                resume_token=creds[1],
            )
        id = self._new_id()
        self._handshake_id = id
        self._handshake_method = method
        self._send(request_frame(id, method, unstructure(params)))

    def _new_id(self) -> int:
        id = self._next_id
        self._next_id += 1
        return id

    def _on_handshake_response(self, msg: Response) -> None:
        self._handshake_id = None
        error = msg.error
        if error is not None:
            if (
                self._handshake_method == "tesseron/resume"
                and error.code == TesseronErrorCode.RESUME_FAILED
            ):
                # The session is gone: forget it and start fresh on this connection.
                _log.info(
                    "tesseron/resume refused (%d: %s); saying hello", error.code, error.message
                )
                self._host._credentials = None
                self._send_handshake()
                return
            self._fail_handshake(error)
            return
        try:
            welcome = wire.structure(msg.result, Welcome)
        except Exception:
            self._fail_handshake(
                ActionError(TesseronErrorCode.INVALID_PARAMS, "Malformed welcome", msg.result)
            )
            return
        if major_version(welcome.protocol_version) != _OUR_MAJOR:
            self._fail_handshake(
                ActionError(
                    TesseronErrorCode.PROTOCOL_MISMATCH,
                    f"Host speaks protocol {PROTOCOL_VERSION}; "
                    f"gateway sent {welcome.protocol_version}",
                )
            )
            return
        self._welcomed = True
        self._welcome_event.set()
        self._capabilities = welcome.capabilities
        self._agent = welcome.agent
        host = self._host
        if welcome.resume_token is not None:
            host._credentials = (welcome.session_id, welcome.resume_token)
        elif self._handshake_method == "tesseron/hello":
            host._credentials = None
        host._on_welcome(welcome)
        # Registrations that changed while the handshake was in flight.
        app = self._app
        if app.actions_version != self._hello_versions[0]:
            self._send_list_changed(actions=True)
        if app.resources_version != self._hello_versions[1]:
            self._send_list_changed(resources=True)
        backlog, self._backlog = self._backlog, []
        for held, size in backlog:
            self._dispatch(held, size)

    def _fail_handshake(self, error: ActionError) -> None:
        self._host._on_handshake_failed(error)
        self._stop_reading = (1000, "handshake failed")

    def _on_claimed(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        try:
            agent = wire.structure(params["agent"], Agent) if "agent" in params else self._agent
            raw_caps = params.get("agentCapabilities")
            caps = self._capabilities
            if isinstance(raw_caps, dict):
                caps = wire.structure({**unstructure(caps), **raw_caps}, Capabilities)
            claimed_at = params.get("claimedAt")
            event = Claimed(
                agent=agent,
                claimed_at=claimed_at if type(claimed_at) is int else None,  # not a bool
                agent_capabilities=caps if isinstance(raw_caps, dict) else None,
            )
        except Exception:
            _log.warning("ignoring malformed tesseron/claimed: %r", params)
            return
        self._agent = agent
        self._capabilities = caps
        self._host._on_claimed(event, agent, caps)

    # -- inbound ------------------------------------------------------------------

    def _on_message(self, msg: Inbound, size: int) -> None:
        if type(msg) is Response:
            self._on_response(msg)
        elif type(msg) is Invalid:
            if msg.reply:
                self._send(error_frame(msg.id, msg.error))
        elif self._welcomed:
            self._dispatch(msg, size)  # type: ignore[arg-type]
        elif len(self._backlog) < MAX_BACKLOG:
            # Applied before any invoke: held messages run right after the welcome.
            self._backlog.append((msg, size))  # type: ignore[arg-type]
        elif type(msg) is Request:
            self._release(size)
            self._send(
                error_frame(
                    msg.id,
                    ActionError(TesseronErrorCode.INVALID_REQUEST, "Handshake not complete"),
                )
            )

    def _dispatch(self, msg: Request | Notification, size: int) -> None:
        if type(msg) is Request:
            handler = self._requests.get(msg.method)
            if handler is None:
                self._send(error_frame(msg.id, method_not_found(msg.method)))
                return
            try:
                handler(msg, size)
            except Exception as exc:
                self._refuse(msg.id, exc, size)
        else:
            on_notification = self._notifications.get(msg.method)
            if on_notification is not None:  # unknown notifications are ignored
                try:
                    on_notification(msg.params)
                except Exception:
                    _log.exception("handling %s failed", msg.method)

    def _refuse(self, id: RequestId, exc: Exception, size: int) -> None:
        """Answer a request whose handling raised (an ActionError keeps its code)."""
        self._release(size)
        self._send(
            error_frame(id, exc if isinstance(exc, ActionError) else ActionError.internal(exc))
        )

    def _on_response(self, msg: Response) -> None:
        id = msg.id
        if not isinstance(id, int) or isinstance(id, bool):
            return  # never one of ours
        if id == self._handshake_id:
            self._on_handshake_response(msg)
            return
        reply = self._pending.pop(id, None)
        if reply is None:
            _log.debug("dropping a response to unknown request id %r", id)
            return
        _deliver(reply, _Reply(result=msg.result, error=msg.error))

    # -- host-originated requests -------------------------------------------------

    async def _service_requests(self) -> None:
        try:
            while True:
                # Take the next request only when there is room: a handler asking
                # for samples or elicitations waits in its send to the channel.
                await self._ws.wait_writable()
                request = await self._req_recv.receive()
                if self._closed:
                    _deliver(request.reply, _Reply(error=transport_closed()))
                    continue
                id = request.id = self._new_id()
                self._pending[id] = request.reply
                self._send(request_frame(id, request.method, request.params))
        except (trio.ClosedResourceError, trio.EndOfChannel):
            return  # closed by _close(): pending requests were failed there

    # -- resources ----------------------------------------------------------------

    def _on_read(self, req: Request, size: int) -> None:
        params = req.params
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            raise invalid_params("resources/read needs params {name}")
        handle = self._app._resources.get(name)
        if handle is None:
            raise ActionError(TesseronErrorCode.ACTION_NOT_FOUND, f"Resource not readable: {name}")
        assert self._nursery is not None
        self._nursery.start_soon(self._run_read, req.id, handle, size)
        self._reads += 1

    async def _run_read(self, id: RequestId, handle: ResourceHandle, size: int) -> None:
        try:
            # One read at a time per connection, and only once there is room: a value
            # read is sent at once, so answers in flight are the send queue plus one.
            # Reading first and waiting for room after let every read of a pipelined
            # batch (a thousand per 64 KiB) hold its value while the gateway read
            # nothing: 100 MB for 100 KB resources (issue 30).
            async with self._read_lock:
                await self._ws.wait_writable()
                try:
                    frame = result_frame(id, {"value": await handle.read()})
                except Exception as exc:
                    frame = error_frame(id, _as_action_error(exc))
                self._send(frame)
        finally:
            self._reads -= 1
            self._release(size)

    def _on_subscribe(self, req: Request, size: int) -> None:
        self._subs.subscribe(req)

    def _on_unsubscribe(self, req: Request, size: int) -> None:
        self._subs.unsubscribe(req)

    async def publish(self, handle: ResourceHandle, data: Any) -> None:
        """Send ``resources/updated`` to each live subscription of *handle*."""
        await self._subs.publish(handle, data)

    def manifest_changed(
        self, *, actions: bool, resources: bool, removed: ResourceHandle | None
    ) -> None:
        """Registrations changed: stop a removed resource's subscriptions, send list_changed."""
        if removed is not None:
            self._subs.stop_resource(removed)
        if self._welcomed and not self._closed:
            self._send_list_changed(actions=actions, resources=resources)

    def _send_list_changed(self, *, actions: bool = False, resources: bool = False) -> None:
        if actions:
            self._send(
                notification_frame(
                    "actions/list_changed", {"actions": unstructure(self._app.action_manifest())}
                )
            )
        if resources:
            self._send(
                notification_frame(
                    "resources/list_changed",
                    {"resources": unstructure(self._app.resource_manifest())},
                )
            )


def _deliver(reply: trio.MemorySendChannel[_Reply], value: _Reply) -> None:
    """Fill a one-shot reply channel; a requester that left (cancelled) is fine."""
    try:
        reply.send_nowait(value)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        reply.close()
