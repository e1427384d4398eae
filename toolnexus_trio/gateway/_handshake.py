"""The host handshake of :class:`~toolnexus_trio.gateway.Gateway`: hello, resume, welcome.

:class:`Handshake` is a mixin of :class:`~toolnexus_trio.gateway.Gateway`. A freshly
dialled connection reads frames here until the host's ``tesseron/hello`` (a new
session, with a claim code) or ``tesseron/resume`` (a dropped, claimed session back,
its resume token checked and rotated) is answered with a welcome; any other request
before that is refused. The frames after the handshake are :mod:`._frames`' part.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

import trio

from ..tesseron._errors import ActionError, TesseronErrorCode, invalid_params
from ..tesseron._wire import (
    PROTOCOL_VERSION,
    Agent,
    Invalid,
    Request,
    error_frame,
    major_version,
    parse_frame,
    result_frame,
    unstructure,
)
from ._conn import (
    _Conn,
    check_app_id,
    parse_actions,
    parse_app,
    parse_capabilities,
    parse_resources,
)
from ._session import GatewayOptions, GatewaySession, _mint_claim_code

__all__ = ["Handshake"]

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")

_PENDING_AGENT: Final = {"id": "pending", "name": "Awaiting agent"}
_OUR_MAJOR: Final = major_version(PROTOCOL_VERSION)


class Handshake:
    """The hello/resume handshake of :class:`~toolnexus_trio.gateway.Gateway` (a mixin)."""

    options: GatewayOptions
    _sessions: dict[str, GatewaySession]
    _zombies: dict[str, float]
    _claims: dict[str, GatewaySession]

    if TYPE_CHECKING:

        def _bump(self) -> None: ...
        def _claim(self, session: GatewaySession) -> None: ...
        def _expire_zombies(self) -> None: ...
        def _agent(self) -> Agent: ...
        def _agent_caps(self) -> dict[str, bool]: ...
        def _resubscribe(self, conn: _Conn, session: GatewaySession) -> None: ...

    async def _handshake(self, conn: _Conn) -> GatewaySession:
        timeout = self.options.handshake_timeout_ms / 1000
        with trio.move_on_after(timeout):
            while True:
                batch = await conn.ws.receive_batch()
                for i, text in enumerate(batch):
                    session = self._on_handshake_frame(conn, text)
                    if session is not None:
                        conn.backlog = batch[i + 1 :]
                        return session
        raise TimeoutError(f"no tesseron/hello from {conn.url} within {timeout:g}s")

    def _on_handshake_frame(self, conn: _Conn, text: str) -> GatewaySession | None:
        msg = parse_frame(text)
        if type(msg) is Invalid:
            if msg.reply:
                conn.send(error_frame(msg.id, msg.error))
            return None
        if type(msg) is not Request:
            return None  # nothing is pending before the welcome
        if msg.method == "tesseron/hello":
            try:
                return self._on_hello(conn, msg)
            except ActionError as exc:
                conn.send(error_frame(msg.id, exc))
                raise  # fatal: the connection closes and connect() raises
        if msg.method == "tesseron/resume":
            try:
                return self._on_resume(conn, msg)
            except ActionError as exc:
                conn.send(error_frame(msg.id, exc))
                if exc.code == TesseronErrorCode.PROTOCOL_MISMATCH:
                    raise
                return None  # the host falls back to hello on this connection
        conn.send(
            error_frame(
                msg.id, ActionError(TesseronErrorCode.INVALID_REQUEST, "Handshake not complete")
            )
        )
        return None

    def _check_version(self, params: dict[str, Any]) -> None:
        version = params.get("protocolVersion")
        if not isinstance(version, str) or major_version(version) != _OUR_MAJOR:
            raise ActionError(
                TesseronErrorCode.PROTOCOL_MISMATCH,
                f"Gateway speaks protocol {PROTOCOL_VERSION}; SDK sent {version}. "
                "Major version mismatch - pin compatible package versions.",
            )
        if version.split(".")[:2] != PROTOCOL_VERSION.split(".")[:2]:
            _log.warning("host speaks protocol %s, gateway %s", version, PROTOCOL_VERSION)

    def _on_hello(self, conn: _Conn, req: Request) -> GatewaySession:
        params = req.params
        if not isinstance(params, dict):
            raise invalid_params("tesseron/hello needs params")
        self._check_version(params)
        app = parse_app(params.get("app"))
        check_app_id(app.id)
        session = GatewaySession(
            session_id=f"s_{secrets.token_urlsafe(12)}",
            app=app,
            actions=parse_actions(params.get("actions")),
            resources=parse_resources(params.get("resources")),
            capabilities=parse_capabilities(params.get("capabilities")),
            resume_token=secrets.token_urlsafe(24),
            claim_code=_mint_claim_code(),
            url=conn.url,
        )
        while session._claim_code in self._claims:  # astronomically rare
            session._claim_code = _mint_claim_code()
        welcome = self._welcome(session, include_claim=True)
        self._attach(conn, session)
        assert session._claim_code is not None
        self._claims[session._claim_code] = session
        conn.send(result_frame(req.id, welcome))
        if self.options.auto_claim:
            self._claim(session)
        return session

    def _on_resume(self, conn: _Conn, req: Request) -> GatewaySession:
        def refuse(message: str) -> ActionError:
            return ActionError(TesseronErrorCode.RESUME_FAILED, message)

        params = req.params
        shape_ok = (
            isinstance(params, dict)
            and isinstance(params.get("sessionId"), str)
            and isinstance(params.get("resumeToken"), str)
            and isinstance(params.get("app"), dict)
            and all(k in params for k in ("protocolVersion", "actions", "resources"))
        )
        if not shape_ok:
            raise refuse(
                "Invalid tesseron/resume request: expected { protocolVersion, sessionId, "
                "resumeToken, app, actions, resources, capabilities }"
            )
        assert isinstance(params, dict)
        self._check_version(params)
        sid: str = params["sessionId"]
        try:
            app = parse_app(params["app"])
            check_app_id(app.id)
            actions = parse_actions(params["actions"])
            resources = parse_resources(params["resources"])
        except ActionError as exc:
            raise refuse(exc.message) from None
        self._expire_zombies()
        session = self._sessions.get(sid)
        if session is None or sid not in self._zombies:
            raise refuse(f'No resumable session "{sid}"')
        if session.app.id != app.id:
            raise refuse(f'Session "{sid}" is owned by app "{session.app.id}"')
        if not session.claimed:
            raise refuse(f"{sid} was never claimed")
        # surrogatepass: a lone surrogate in a hostile token is refused, not a crash.
        given = params["resumeToken"].encode("utf-8", "surrogatepass")
        stored = session._resume_token.encode()
        if len(given) != len(stored) or not hmac.compare_digest(given, stored):
            raise refuse(f'Invalid resumeToken for session "{sid}"')
        del self._zombies[sid]
        session._resume_token = secrets.token_urlsafe(24)
        session._app = app
        session._actions = actions
        session._resources = resources
        session._capabilities = parse_capabilities(params.get("capabilities"))
        session._url = conn.url
        self._attach(conn, session)
        conn.send(result_frame(req.id, self._welcome(session, include_claim=False)))
        self._resubscribe(conn, session)
        return session

    def _attach(self, conn: _Conn, session: GatewaySession) -> None:
        session._conn = conn
        conn.session = session
        self._sessions[session.session_id] = session
        self._bump()

    def _welcome(self, session: GatewaySession, *, include_claim: bool) -> dict[str, Any]:
        claimed = session.claimed or (include_claim and self.options.auto_claim)
        welcome: dict[str, Any] = {
            "sessionId": session.session_id,
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": self._agent_caps(),
            "agent": unstructure(self._agent()) if claimed else dict(_PENDING_AGENT),
        }
        if include_claim and session._claim_code is not None:
            welcome["claimCode"] = session._claim_code
        welcome["resumeToken"] = session._resume_token
        return welcome
