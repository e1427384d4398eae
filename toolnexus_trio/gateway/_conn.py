"""The gateway's side of one host connection: pending requests, invocation queues, parsing.

Pure bookkeeping, no task of its own: the connection's reader task (in
:mod:`._gateway`) routes responses here with ``send_nowait`` and appends host
notifications and requests to per-invocation queues. Nothing here awaits user code.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import Any, Final

import trio

from .._runctx import RunServices
from ..tesseron._errors import invalid_params, transport_closed
from ..tesseron._wire import (
    ActionManifest,
    AppInfo,
    Capabilities,
    ResourceManifest,
    Response,
    app_id_problem,
    notification_frame,
    request_frame,
)
from ..tesseron._ws import WebSocket, WebSocketClosed

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")


MAX_QUEUED_NOTIFICATIONS: Final = 1024
"""Progress/log notifications held per invocation before newer ones are dropped.

The queue is drained by the invoking task's helper, which waits on the stream
consumer; a host flooding progress faster than the consumer reads loses the excess
(with a warning) instead of growing memory without bound. Requests are never dropped
(but see :data:`MAX_REQUESTS_PER_INVOCATION`).
"""

MAX_REQUESTS_PER_INVOCATION: Final = 8
"""Sampling/elicitation requests one invocation may have in flight; each may cost a model
call or a human's attention, so a host asking for more gets an error for the excess."""


class _Inv:
    """One in-flight ``actions/invoke``: what the reader routes to the invoking task."""

    __slots__ = (
        "call_id",
        "depth",
        "done",
        "dropped",
        "id",
        "lot",
        "percent",
        "queue",
        "requests_in_flight",
        "scopes",
        "services",
        "tool",
    )

    def __init__(
        self, id: str, tool: str, call_id: str | None, services: RunServices | None, depth: int
    ) -> None:
        self.id = id
        self.tool = tool
        self.call_id = call_id
        self.services = services
        self.depth = depth
        self.queue: deque[tuple[str, Any]] = deque()
        self.lot = trio.lowlevel.ParkingLot()
        self.done = False
        self.dropped = 0
        self.percent = 0  # the monotonic progress cursor
        self.scopes: set[trio.CancelScope] = set()  # sampling/elicitation handler tasks
        self.requests_in_flight = 0

    def push(self, kind: str, item: Any) -> None:
        """Queue *item* for the invoking task (never blocks; see MAX_QUEUED_NOTIFICATIONS)."""
        if kind != "request" and len(self.queue) >= MAX_QUEUED_NOTIFICATIONS:
            self.dropped += 1
            if self.dropped == 1:
                _log.warning("invocation %s: notification queue full; dropping", self.id)
            return
        self.queue.append((kind, item))
        self.lot.unpark_all()

    def finish(self) -> None:
        """The response arrived (or the call ended): stop servicing requests."""
        self.done = True
        for scope in self.scopes:
            scope.cancel()
        self.lot.unpark_all()


class _Conn:
    """One gateway-to-host connection (see the module docs)."""

    def __init__(self, ws: WebSocket, url: str, scope: trio.CancelScope) -> None:
        self.ws = ws
        self.url = url
        self.scope = scope
        self.finished = trio.Event()
        self.closed = False
        self.session: Any = None  # GatewaySession once the handshake completed
        self.backlog: list[str] = []  # frames read with the handshake, not yet handled
        self._next_id = 1
        self.pending: dict[int, trio.MemorySendChannel[Response]] = {}
        self.invocations: dict[str, _Inv] = {}
        # request id of an actions/invoke -> its invocation, finished when the answer is read
        self.answers: dict[int, _Inv] = {}

    def send(self, frame: str) -> bool:
        """Queue *frame* for the writer; ``False`` (and the connection closed) on failure."""
        if self.closed:
            return False
        try:
            self.ws.send_nowait(frame)
        except WebSocketClosed:
            self.close()
            return False
        return True

    def notify(self, method: str, params: Any) -> bool:
        """Send a notification (best effort)."""
        return self.send(notification_frame(method, params))

    def request(
        self, method: str, params: Any, inv: _Inv | None = None
    ) -> tuple[int, trio.MemoryReceiveChannel[Response]]:
        """Send a request; return its id and the one-shot channel its response arrives on.

        The caller must :meth:`forget` the id and close the channel when done. A closed
        connection delivers ``TRANSPORT_CLOSED`` at once. With *inv* (an
        ``actions/invoke``), reading the response finishes the invocation right there,
        so nothing the host sends after its result reaches events or metrics, even
        when it arrives in the same read.
        """
        # Size 1: the reader's send_nowait of the one reply never blocks.
        send, recv = trio.open_memory_channel[Response](1)
        id = self._next_id
        self._next_id += 1
        self.pending[id] = send
        if inv is not None:
            self.answers[id] = inv
        if not self.send(request_frame(id, method, params)):
            _deliver(self.pending.pop(id, send), Response(id, error=transport_closed()))
        return id, recv

    def forget(self, id: int) -> None:
        """Drop a pending request (its late response is ignored)."""
        self.pending.pop(id, None)
        self.answers.pop(id, None)

    def deliver(self, msg: Response) -> None:
        """Route a response to the request that is waiting for it."""
        id = msg.id
        if not isinstance(id, int) or isinstance(id, bool):
            return
        reply = self.pending.pop(id, None)
        if reply is None:
            _log.debug("dropping a response to unknown request id %r", id)
            return
        inv = self.answers.pop(id, None)
        if inv is not None:
            inv.finish()
        _deliver(reply, msg)

    def close(self) -> None:
        """Mark closed and fail every pending request with ``TRANSPORT_CLOSED``; idempotent."""
        if self.closed:
            return
        self.closed = True
        pending, self.pending = self.pending, {}
        self.answers.clear()
        for id, reply in pending.items():
            _deliver(reply, Response(id, error=transport_closed()))
        for inv in list(self.invocations.values()):
            inv.lot.unpark_all()


def _deliver(reply: trio.MemorySendChannel[Response], msg: Response) -> None:
    # A requester that gave up closed its end; a late reply is dropped.
    with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        reply.send_nowait(msg)


# ---------------------------------------------------------------------------
# Lenient parsing of what hosts publish
# ---------------------------------------------------------------------------


def parse_app(raw: Any) -> AppInfo:
    """``app`` of hello/resume; :class:`ActionError` -32602 when malformed."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise invalid_params("app must be an object with a string id")
    name = raw.get("name")
    origin = raw.get("origin")
    description = raw.get("description")
    version = raw.get("version")
    return AppInfo(
        id=raw["id"],
        name=name if isinstance(name, str) else raw["id"],
        origin=origin if isinstance(origin, str) else "unknown",
        description=description if isinstance(description, str) else None,
        version=version if isinstance(version, str) else None,
    )


def check_app_id(app_id: str) -> None:
    """Refuse a malformed or reserved app id (-32602)."""
    problem = app_id_problem(app_id)
    if problem is not None:
        raise invalid_params(problem)


def parse_actions(raw: Any) -> list[ActionManifest]:
    """An action manifest list; entries without a string name are skipped."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_params("actions must be a list")
    out: list[ActionManifest] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            _log.warning("ignoring a malformed action entry: %r", item)
            continue
        description = item.get("description")
        schema = item.get("inputSchema")
        output = item.get("outputSchema")
        annotations = item.get("annotations")
        timeout = item.get("timeoutMs")
        out.append(
            ActionManifest(
                name=item["name"],
                description=description if isinstance(description, str) else "",
                input_schema=schema if isinstance(schema, dict) else {},
                timeout_ms=timeout
                if isinstance(timeout, int) and not isinstance(timeout, bool)
                else 60000,
                output_schema=output if isinstance(output, dict) else None,
                annotations=annotations if isinstance(annotations, dict) else None,
            )
        )
    return out


def parse_resources(raw: Any) -> list[ResourceManifest]:
    """A resource manifest list (see :func:`parse_actions`)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_params("resources must be a list")
    out: list[ResourceManifest] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            _log.warning("ignoring a malformed resource entry: %r", item)
            continue
        description = item.get("description")
        out.append(
            ResourceManifest(
                name=item["name"],
                description=description if isinstance(description, str) else "",
                subscribable=item.get("subscribable") is True,
            )
        )
    return out


def parse_capabilities(raw: Any) -> Capabilities:
    """The host's declared capabilities (missing flags are false)."""
    caps = raw if isinstance(raw, dict) else {}
    return Capabilities(
        streaming=caps.get("streaming") is True,
        subscriptions=caps.get("subscriptions") is True,
        sampling=caps.get("sampling") is True,
        elicitation=caps.get("elicitation") is True,
    )
