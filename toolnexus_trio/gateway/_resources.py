"""The resources part of :class:`~toolnexus_trio.gateway.Gateway`: read, subscribe, resubscribe.

:class:`Resources` is a mixin of :class:`~toolnexus_trio.gateway.Gateway` holding
``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe`` on a claimed
session, and re-making a resumed session's subscriptions on its new connection. The
subscriptions live in the gateway's ``_subscriptions``; the ``resources/updated``
notifications that serve them are routed by :mod:`._frames`.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from ._conn import _Conn
from ._session import GatewaySession

__all__ = ["Resources"]


class Resources:
    """Resource reads and subscriptions of :class:`~toolnexus_trio.gateway.Gateway` (a mixin)."""

    _subscriptions: dict[str, tuple[GatewaySession, str]]

    if TYPE_CHECKING:

        def _session_for(self, app_id: str) -> GatewaySession: ...

    async def read_resource(self, app_id: str, name: str) -> Any:
        """``resources/read`` on app *app_id*; :class:`LookupError` when no session has it."""
        session = self._session_for(app_id)
        conn = session._conn
        assert conn is not None
        rid, recv = conn.request("resources/read", {"name": name})
        try:
            with recv:
                reply = await recv.receive()
        finally:
            conn.forget(rid)
        if reply.error is not None:
            raise reply.error
        result = reply.result
        return result.get("value") if isinstance(result, dict) else result

    async def subscribe_resource(self, app_id: str, name: str) -> str:
        """``resources/subscribe`` to *name* of app *app_id*; returns the subscription id.

        Updates reach :attr:`on_resource_updated`. The subscription lives as long as
        the session: a host that resumes it is subscribed again on its new connection
        (with the same id), and it ends when the session is forgotten. Raises :class:`ActionError`
        with the host's error and :class:`LookupError` when no session serves *app_id*.
        """
        session = self._session_for(app_id)
        conn = session._conn
        assert conn is not None
        sub_id = f"sub_{secrets.token_urlsafe(9)}"
        self._subscriptions[sub_id] = (session, name)
        rid, recv = conn.request("resources/subscribe", {"name": name, "subscriptionId": sub_id})
        try:
            with recv:
                reply = await recv.receive()
        except BaseException:
            self._subscriptions.pop(sub_id, None)
            raise
        finally:
            conn.forget(rid)
        if reply.error is not None:
            self._subscriptions.pop(sub_id, None)
            raise reply.error
        return sub_id

    def unsubscribe_resource(self, sub_id: str) -> None:
        """Stop a subscription of :meth:`subscribe_resource` (best effort; idempotent)."""
        target = self._subscriptions.pop(sub_id, None)
        if target is not None and target[0]._conn is not None:
            conn = target[0]._conn
            rid, recv = conn.request("resources/unsubscribe", {"subscriptionId": sub_id})
            conn.forget(rid)  # the ack is not awaited
            recv.close()

    def _resubscribe(self, conn: _Conn, session: GatewaySession) -> None:
        """Re-make a resumed session's resource subscriptions on its new connection."""
        names = {r.name for r in session.resources}
        for sub_id, (owner, name) in list(self._subscriptions.items()):
            if owner is not session:
                continue
            if name not in names:  # the resumed host no longer has it
                del self._subscriptions[sub_id]
                continue
            rid, recv = conn.request(
                "resources/subscribe", {"name": name, "subscriptionId": sub_id}
            )
            conn.forget(rid)  # the ack is not awaited: the updates tell
            recv.close()
