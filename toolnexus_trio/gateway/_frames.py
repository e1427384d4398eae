"""The frames of a host after the handshake, routed by :class:`~toolnexus_trio.gateway.Gateway`.

:class:`Frames` is a mixin of :class:`~toolnexus_trio.gateway.Gateway`: each frame a
connection's reader takes is parsed and routed here, responses to one-shot channels,
the host's ``sampling/request``/``elicitation/request``, progress and logs to the
queues of their invocations (:mod:`._invoke`), ``list_changed`` to the session, and
``resources/updated`` to :attr:`~toolnexus_trio.gateway.Gateway.on_resource_updated`.
It never awaits: it runs in the reader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..tesseron._errors import ActionError, TesseronErrorCode, method_not_found
from ..tesseron._wire import (
    Invalid,
    Notification,
    Request,
    Response,
    error_frame,
    parse_frame,
)
from ._conn import _Conn, parse_actions, parse_resources
from ._session import GatewayOptions, GatewaySession

__all__ = ["Frames"]

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")

_LOG_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING}


class Frames:
    """Frame routing after the handshake for :class:`~toolnexus_trio.gateway.Gateway` (a mixin)."""

    options: GatewayOptions
    _subscriptions: dict[str, tuple[GatewaySession, str]]
    on_resource_updated: Callable[[GatewaySession, str, Any], None] | None

    if TYPE_CHECKING:

        def _bump(self) -> None: ...

    def _on_frame(self, conn: _Conn, text: str) -> None:
        msg = parse_frame(text)
        if type(msg) is Response:
            conn.deliver(msg)
        elif type(msg) is Invalid:
            if msg.reply:
                conn.send(error_frame(msg.id, msg.error))
        elif type(msg) is Request:
            self._on_request(conn, msg)
        elif type(msg) is Notification:
            self._on_notification(conn, msg)

    def _on_request(self, conn: _Conn, req: Request) -> None:
        method = req.method
        if method in ("sampling/request", "elicitation/request"):
            error: ActionError | None = None
            params = req.params if isinstance(req.params, dict) else {}
            inv_id = params.get("invocationId")
            inv = conn.invocations.get(inv_id) if isinstance(inv_id, str) else None
            if not isinstance(inv_id, str):
                error = ActionError(
                    TesseronErrorCode.INVALID_PARAMS, f"{method} needs a string invocationId"
                )
            elif method == "sampling/request" and self.options.sampler is None:
                error = ActionError(
                    TesseronErrorCode.SAMPLING_NOT_AVAILABLE, "Sampling is not available"
                )
            elif (
                method == "elicitation/request"
                and self.options.wait_for is None
                and (inv is None or inv.services is None or inv.services.elicit is None)
            ):
                error = ActionError(
                    TesseronErrorCode.ELICITATION_NOT_AVAILABLE, "Elicitation is not available"
                )
            elif inv is None or inv.done:
                error = ActionError(
                    TesseronErrorCode.ACTION_NOT_FOUND,
                    f"Unknown invocation {params.get('invocationId')!r}",
                )
            if error is not None:
                conn.send(error_frame(req.id, error))
            else:
                assert inv is not None
                inv.push("request", req)
        elif method in ("tesseron/hello", "tesseron/resume"):
            conn.send(
                error_frame(
                    req.id,
                    ActionError(TesseronErrorCode.INVALID_REQUEST, "Session already established"),
                )
            )
        else:
            conn.send(error_frame(req.id, method_not_found(method)))

    def _on_notification(self, conn: _Conn, msg: Notification) -> None:
        params = msg.params if isinstance(msg.params, dict) else {}
        method = msg.method
        session: GatewaySession | None = conn.session
        if method in ("actions/progress", "log"):
            inv_id = params.get("invocationId")
            inv = conn.invocations.get(inv_id) if isinstance(inv_id, str) else None
            if inv is not None and not inv.done:
                inv.push("progress" if method == "actions/progress" else "log", params)
            elif method == "log":
                level = _LOG_LEVELS.get(str(params.get("level")), logging.ERROR)
                app = session.app.id if session is not None else "?"
                _log.log(level, "[%s] %s", app, params.get("message"))
        elif method == "actions/list_changed" and session is not None:
            try:
                session._actions = parse_actions(params.get("actions"))
            except ActionError:
                _log.warning("ignoring malformed actions/list_changed from %s", session.app.id)
                return
            self._bump()
        elif method == "resources/list_changed" and session is not None:
            try:
                session._resources = parse_resources(params.get("resources"))
            except ActionError:
                _log.warning("ignoring malformed resources/list_changed from %s", session.app.id)
                return
            self._bump()
        elif method == "resources/updated" and session is not None:
            sub_id = params.get("subscriptionId")
            target = self._subscriptions.get(sub_id) if isinstance(sub_id, str) else None
            hook = self.on_resource_updated
            if target is not None and target[0] is session and hook is not None:
                hook(session, target[1], params.get("value"))
        # Unknown notifications are ignored.
