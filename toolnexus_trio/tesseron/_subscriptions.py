"""One connection's resource subscriptions: subscribe, unsubscribe, updates, coalescing.

Owned by the connection (:class:`._connection._Connection`); runs on its read loop,
except :meth:`Subscriptions.publish` (the app's task) and the flusher task.

Updates never pile up in memory when the gateway stops reading. ``publish`` waits for
writer room before each update. A subscribe hook's ``emit`` is synchronous and cannot
wait, so while there is no room a subscription *holds* its newest value instead of
queueing a frame; a newer value replaces a held one (``resources/updated`` carries the
whole value, so the older one is no longer worth sending), and one flusher task sends
held values, in order, as room returns. Updates of one subscription never go out of
order, and an update never follows an acknowledged unsubscribe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ._errors import ActionError, TesseronErrorCode, invalid_params
from ._wire import Request, notification_frame, payloads, result_frame

if TYPE_CHECKING:
    from ._app import ResourceHandle
    from ._connection import _Connection

_log = logging.getLogger("toolnexus_trio.tesseron")

MAX_SUBSCRIPTIONS: Final = 1024
"""Live subscriptions per connection; a further ``resources/subscribe`` gets -32600."""

_NOTHING: Final[Any] = object()
"""A subscription holding no value."""


class _Subscription:
    """One ``resources/subscribe``; :meth:`stop` runs the cleanup exactly once."""

    __slots__ = ("active", "cleanup", "handle", "held", "id", "owner")

    def __init__(self, owner: Subscriptions, id: str, handle: ResourceHandle) -> None:
        self.owner = owner
        self.id = id
        self.handle = handle
        self.active = True
        self.cleanup: Callable[[], object] | None = None
        self.held: Any = _NOTHING  # the newest value waiting for writer room

    def frame(self, data: Any) -> str:
        return notification_frame("resources/updated", {"subscriptionId": self.id, "value": data})

    def emit(self, value: Any) -> None:
        """The ``emit`` given to a subscribe hook: send one update now, if still subscribed."""
        if self.active:
            self.update(payloads.unstructure(value))

    def update(self, data: Any) -> None:
        """Send *data* now, or hold it (replacing an older held value) until there is room."""
        conn = self.owner.conn
        if self.held is _NOTHING and conn._ws.writable:
            conn._send(self.frame(data))
        else:
            self.held = data
            self.owner.hold(self)

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self.held = _NOTHING
        cleanup, self.cleanup = self.cleanup, None
        if cleanup is not None:
            try:
                cleanup()
            except Exception:
                _log.exception("cleanup of subscription %r failed", self.id)


class Subscriptions:
    """The live subscriptions of one connection (see the module docs)."""

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self._subs: dict[str, _Subscription] = {}
        self._held: dict[_Subscription, None] = {}  # holding a value, oldest first
        self._flushing = False

    def subscribe(self, req: Request) -> None:
        """Handle ``resources/subscribe``: ack, then run the resource's subscribe hook."""
        params = req.params
        if not isinstance(params, dict):
            raise invalid_params("resources/subscribe needs params {name, subscriptionId}")
        name = params.get("name")
        sub_id = params.get("subscriptionId")
        if not isinstance(name, str) or not isinstance(sub_id, str):
            raise invalid_params("resources/subscribe needs string name and subscriptionId")
        handle = self.conn._app._resources.get(name)
        if handle is None or not handle.subscribable:
            raise ActionError(
                TesseronErrorCode.ACTION_NOT_FOUND, f"Resource not subscribable: {name}"
            )
        old = self._subs.pop(sub_id, None)
        if old is not None:
            old.stop()
        if len(self._subs) >= MAX_SUBSCRIPTIONS:
            raise ActionError(
                TesseronErrorCode.INVALID_REQUEST,
                f"Too many subscriptions (at most {MAX_SUBSCRIPTIONS} per connection)",
            )
        # Ack first, so no update can overtake it.
        self.conn._send(result_frame(req.id, None))
        sub = _Subscription(self, sub_id, handle)
        self._subs[sub_id] = sub
        hook = handle._subscribe
        if hook is not None:
            try:
                cleanup = hook(sub.emit)
            except Exception:
                _log.exception("subscribe hook of resource %r failed", name)
                return
            if sub.active:
                sub.cleanup = cleanup
            elif cleanup is not None:
                cleanup()  # unsubscribed from inside the hook

    def unsubscribe(self, req: Request) -> None:
        """Handle ``resources/unsubscribe``: stop it, and ack even an unknown id."""
        params = req.params
        sub_id = params.get("subscriptionId") if isinstance(params, dict) else None
        sub = self._subs.pop(sub_id, None) if isinstance(sub_id, str) else None
        if sub is not None:
            sub.stop()
        # Acknowledged even for an unknown id (the protocol says so).
        self.conn._send(result_frame(req.id, None))

    async def publish(self, handle: ResourceHandle, data: Any) -> None:
        """Send ``resources/updated`` to each live subscription of *handle*."""
        conn = self.conn
        for sub in [s for s in self._subs.values() if s.handle is handle]:
            if sub.active and not conn.closed:
                # Wait for room first, then check again and send at once: an
                # unsubscribe acknowledged meanwhile must not be followed by an update.
                await conn._ws.wait_writable()
                if sub.active and not conn.closed:
                    sub.update(data)  # behind a held value, it replaces that one

    def stop_resource(self, handle: ResourceHandle) -> None:
        """Stop every subscription of a removed resource."""
        for sub_id, sub in list(self._subs.items()):
            if sub.handle is handle:
                del self._subs[sub_id]
                sub.stop()

    def stop_all(self) -> None:
        """Stop every subscription (the connection closed)."""
        subs = list(self._subs.values())
        self._subs.clear()
        self._held.clear()
        for sub in subs:
            sub.stop()

    def hold(self, sub: _Subscription) -> None:
        """*sub* holds a value: make sure the flusher runs."""
        self._held[sub] = None
        conn = self.conn
        if not self._flushing and conn._nursery is not None and not conn.closed:
            self._flushing = True
            conn._nursery.start_soon(self._flush_held)

    async def _flush_held(self) -> None:
        conn = self.conn
        try:
            while self._held and not conn.closed:
                await conn._ws.wait_writable()
                if not self._held:
                    break
                sub = next(iter(self._held))
                del self._held[sub]
                data, sub.held = sub.held, _NOTHING
                if sub.active and data is not _NOTHING:
                    conn._send(sub.frame(data))
        finally:
            self._flushing = False
