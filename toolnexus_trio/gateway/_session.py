"""What a gateway knows about its hosts: options, sessions, claim codes, manifests.

Pure bookkeeping with no connection of its own; :mod:`._gateway` drives it.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import trio

from .._wire import Answer
from .._wire import Request as WaitRequest
from ..tesseron._wire import ActionManifest, Agent, AppInfo, Capabilities, ResourceManifest

if TYPE_CHECKING:
    from ._conn import _Conn

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")

Sampler = Callable[[str, int | None, dict[str, Any] | None], Awaitable[str]]
"""``async (prompt, max_tokens, schema) -> text``: answers a host's ``sampling/request``."""

CLAIM_ALPHABET: Final = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
"""31 characters: upper-case alphanumerics minus the visually confusable ones."""

DEFAULT_AGENT: Final = Agent(id="toolnexus-trio", name="toolnexus-trio")


@attrs.frozen
class GatewayOptions:
    """How a :class:`Gateway` behaves.

    - ``sampler``: answers the hosts' ``sampling/request``. ``"model"`` (the default)
      uses the model of the client loop whose tool call made the invocation; a call
      made outside a loop is answered ``-32006``. ``None`` advertises
      ``sampling: false`` in the welcome.
    - ``wait_for``: the §10 ``wait_for`` that answers ``elicitation/request`` (as
      ``Request(kind="input", prompt=question, data={"schema": ...})``). ``None``
      advertises ``elicitation: false`` (requests are answered ``-32007``).
    - ``auto_claim``: claim every session right after its welcome. Only for an
      embedded, in-process agent; a published gateway leaves it off and lets the
      user type the claim code (:meth:`Gateway.claim`).
    - ``resume_ttl_ms`` / ``max_zombies``: how long, and how many, dropped claimed
      sessions stay resumable (0 disables resume).
    - ``max_sampling_depth``: nested sampling beyond this is answered ``-32008``.
    - ``handshake_timeout_ms``: how long a dialed host has to send its hello.
    """

    agent: Agent = DEFAULT_AGENT
    sampler: Sampler | Literal["model"] | None = "model"
    wait_for: Callable[[WaitRequest], Awaitable[Answer]] | None = None
    auto_claim: bool = False
    resume_ttl_ms: int = 4 * 3600 * 1000
    max_zombies: int = 100
    max_sampling_depth: int = 3
    handshake_timeout_ms: int = 10_000


class GatewaySession:
    """One host session as the gateway sees it (read-only; the gateway updates it)."""

    def __init__(
        self,
        session_id: str,
        app: AppInfo,
        actions: list[ActionManifest],
        resources: list[ResourceManifest],
        capabilities: Capabilities,
        resume_token: str,
        claim_code: str,
        url: str,
    ) -> None:
        self._session_id = session_id
        self._app = app
        self._actions = actions
        self._resources = resources
        self._capabilities = capabilities
        self._resume_token = resume_token
        self._claim_code: str | None = claim_code
        self._claimed_at: int | None = None
        self._url = url
        self._conn: _Conn | None = None

    def __repr__(self) -> str:
        state = "claimed" if self.claimed else "unclaimed"
        link = "connected" if self.connected else "disconnected"
        return f"<GatewaySession {self._session_id} app={self._app.id!r} {state} {link}>"

    @property
    def session_id(self) -> str:
        """The gateway-minted session id (``s_...``)."""
        return self._session_id

    @property
    def app(self) -> AppInfo:
        """The host's app identity."""
        return self._app

    @property
    def actions(self) -> list[ActionManifest]:
        """The host's current action manifest."""
        return self._actions

    @property
    def resources(self) -> list[ResourceManifest]:
        """The host's current resource manifest."""
        return self._resources

    @property
    def capabilities(self) -> Capabilities:
        """What the host declared it can do."""
        return self._capabilities

    @property
    def claim_code(self) -> str | None:
        """The code the user types to claim this session; ``None`` once claimed."""
        return self._claim_code

    @property
    def claimed(self) -> bool:
        """Whether an agent claimed the session (its actions are tools only then)."""
        return self._claimed_at is not None

    @property
    def claimed_at(self) -> int | None:
        """When it was claimed, in milliseconds since the epoch."""
        return self._claimed_at

    @property
    def connected(self) -> bool:
        """Whether a live connection is attached (a dropped claimed session is resumable)."""
        return self._conn is not None and not self._conn.closed

    @property
    def resume_token(self) -> str:
        """The current resume token (rotated on every resume)."""
        return self._resume_token

    @property
    def url(self) -> str:
        """The URL that was dialed."""
        return self._url

    async def disconnect(self) -> None:
        """Close this session's connection; a claimed session stays resumable (TTL)."""
        conn = self._conn
        if conn is None:
            await trio.lowlevel.checkpoint()
            return
        conn.scope.cancel(reason="session disconnected")
        await conn.finished.wait()


def _mint_claim_code() -> str:
    chars = [secrets.choice(CLAIM_ALPHABET) for _ in range(6)]
    return "".join(chars[:4]) + "-" + "".join(chars[4:])


def _check_url(url: str) -> None:
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ValueError(f"not a WebSocket URL: {url!r}") from exc
    if parts.scheme != "ws" or not host:
        raise ValueError(f"refusing {url!r}: only ws:// URLs on loopback are dialed")
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"refusing {url!r}: a Tesseron host must be on loopback")
