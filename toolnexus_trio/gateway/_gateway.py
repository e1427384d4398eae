"""The Trio Tesseron gateway: dial hosts, claim sessions, expose their actions as tools.

Roles: a Tesseron *host* (the app) listens on loopback and sends ``tesseron/hello``;
the *gateway* dials it, answers with a welcome, and, once the session is claimed,
invokes the host's actions on the agent's behalf. :class:`Gateway` is such a gateway
and a :class:`~toolnexus_trio._toolkit.DynamicToolSource`:
``ToolkitOptions(tesseron=gateway)`` turns every action of every claimed host into a
tool named ``<app_id>__<action>``, made provider-safe (``[a-zA-Z0-9_-]``, at most
64 characters; see :mod:`toolnexus_trio._names`).

Structure: :class:`Gateway` is an async context manager owning a nursery. Each
connection is one task in it: it dials, runs the handshake (:mod:`._handshake`), then
reads frames (:mod:`._frames`), routing responses to one-shot channels and host
notifications/requests to per-invocation queues; it never awaits user code. Frames
go out through the transport's single writer (``send_nowait``). Invocations run in
the caller's task (:mod:`._invoke`). This module holds the lifecycle, the tools, claiming,
dialling and the sessions a drop leaves resumable; resources are :mod:`._resources`' part
and the reading of the instances directory :mod:`._discovery`'s.

Choices where the protocol is silent (documented for users):

- A malformed or reserved ``app.id`` in hello is refused with ``-32602`` and the
  connection closed (the reference gateway answers ``-32603``).
- A ``sampling/request`` or ``elicitation/request`` whose ``invocationId`` is not an
  in-flight invocation of that connection is answered ``-32003``.
- Hosts whose manifest says ``helloHandledByHost`` (host-minted claims, which need
  the bind subprotocol) are skipped by :meth:`Gateway.discover`.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import trio

from .._cancel import CancelToken
from .._groups import reraise_single
from .._names import sanitize_tool_name, unique_tool_names
from .._tools import Tool
from ..tesseron._errors import ActionError, TesseronErrorCode
from ..tesseron._manifest import ManifestScanner
from ..tesseron._wire import ActionManifest, Agent, unstructure
from ..tesseron._ws import WebSocketClosed
from ._claims import ClaimThrottle
from ._conn import _Conn
from ._discovery import scan_instances
from ._frames import Frames
from ._handshake import Handshake
from ._invoke import invoke, make_tool
from ._resources import Resources
from ._session import GatewayOptions, GatewaySession, Sampler, _check_url
from ._ws_client import connect_websocket

__all__ = ["Gateway", "GatewayOptions", "GatewaySession", "Sampler"]

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")


class Gateway(Handshake, Frames, Resources):
    """A Tesseron gateway: dials hosts, claims sessions, exposes their actions as tools.

    Use ``async with Gateway(options) as gw:``; then :meth:`connect` or :meth:`discover`
    hosts, :meth:`claim` a session by its code, and pass the gateway to
    ``ToolkitOptions(tesseron=gw)``. Each connection is one task of the gateway's
    nursery; leaving the block (or :meth:`aclose`, which a toolkit calls when it
    closes) closes every connection, and no task outlives it. Choices where the
    protocol is silent are listed in the "From agent to app" docs page.
    """

    def __init__(self, options: GatewayOptions | None = None) -> None:
        self.options = options or GatewayOptions()
        """The options."""
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None
        self._closed = False
        self._version = 0
        self._sessions: dict[str, GatewaySession] = {}
        self._zombies: dict[str, float] = {}  # session id -> expiry (trio clock), FIFO
        self._claims: dict[str, GatewaySession] = {}  # pending claim code -> session
        self._conns: set[_Conn] = set()
        self._scopes: set[trio.CancelScope] = set()  # every connection, dialling or live
        self._tool_cache: dict[tuple[str, str], tuple[ActionManifest, Tool]] = {}
        self._tools: list[Tool] | None = None  # cleared by _bump()
        self._targets: dict[str, tuple[GatewaySession, ActionManifest]] = {}
        self._changed = trio.Event()  # set (and replaced) by _bump(): wait_changed()
        self._agent_override: Agent | None = None  # set_agent(): the real agent
        self._caps_override: dict[str, bool] | None = None
        self._subscriptions: dict[str, tuple[GatewaySession, str]] = {}  # id -> (session, name)
        self._scanners: dict[Path, ManifestScanner] = {}  # discover(): per instances directory
        self._claim_throttle = ClaimThrottle()  # try_claim(): one agent per gateway
        self.on_resource_updated: Callable[[GatewaySession, str, Any], None] | None = None
        """Called (synchronously, from a connection's reader) with the session, the
        resource name and the new value when a subscribed resource changes
        (:meth:`subscribe_resource`); it must not block."""

    # -- lifecycle --------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        if self._nursery_cm is not None:
            raise RuntimeError("a Gateway can be entered only once")
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            await self.aclose()
        finally:
            self._nursery = None
            try:
                suppressed = bool(await self._nursery_cm.__aexit__(exc_type, exc, tb))
            except BaseExceptionGroup as group:
                reraise_single(group)
                raise  # unreachable: reraise_single always raises
        return suppressed

    async def aclose(self) -> None:
        """Close every connection and forget every session; idempotent."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        for scope in list(self._scopes):
            scope.cancel(reason="gateway closed")
        conns = list(self._conns)
        for conn in conns:
            await conn.finished.wait()
        self._sessions.clear()
        self._zombies.clear()
        self._claims.clear()
        self._bump()

    def _bump(self) -> None:
        self._version += 1
        self._tools = None
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def wait_changed(self, since: int) -> int:
        """Wait until :attr:`version` differs from *since*; return the new version.

        Returns at once (after a checkpoint) when it already differs. The version moves
        on a claim, a host's ``actions/list_changed`` or ``resources/list_changed``, a
        drop, a resume and a new connection.
        """
        while self._version == since:
            await self._changed.wait()
        await trio.lowlevel.checkpoint()
        return self._version

    # -- DynamicToolSource -----------------------------------------------------------

    @property
    def version(self) -> int:
        """Bumped whenever :meth:`tools` would change (claim, list_changed, drop, resume)."""
        return self._version

    def sessions(self) -> list[GatewaySession]:
        """Every known session: connected ones and resumable (dropped, claimed) ones."""
        self._expire_zombies()
        return list(self._sessions.values())

    def _live_claimed(self) -> list[GatewaySession]:
        live = [s for s in self._sessions.values() if s.claimed and s.connected]
        # On an app id served twice, the newest claim wins.
        live.sort(key=lambda s: s.claimed_at or 0, reverse=True)
        return live

    def tools(self) -> list[Tool]:
        """One tool per action of every claimed, connected session.

        Tool names are ``<app_id>__<action>`` made provider-safe by
        :func:`~toolnexus_trio._names.unique_tool_names` (``[a-zA-Z0-9_-]``, at most 64
        characters, collisions resolved deterministically); the invoke carries the
        original action name.
        """
        if self._tools is not None:
            return self._tools
        # Newest claim first: on an app id served twice, its actions win.
        chosen: dict[str, tuple[GatewaySession, ActionManifest]] = {}
        for session in self._live_claimed():
            for manifest in session.actions:
                chosen.setdefault(f"{session.app.id}__{manifest.name}", (session, manifest))
        names = unique_tool_names(chosen)
        self._targets = {names[original]: target for original, target in chosen.items()}
        out: list[Tool] = []
        cache: dict[tuple[str, str], tuple[ActionManifest, Tool]] = {}
        for original, (session, manifest) in chosen.items():
            key = (session.session_id, manifest.name)
            name = names[original]
            cached = self._tool_cache.get(key)
            if cached is None or cached[0] != manifest or cached[1].name != name:
                tool = make_tool(name, session.app.id, manifest, self._caller(session))
                cached = (manifest, tool)
            cache[key] = cached
            out.append(cached[1])
        self._tool_cache = cache
        self._tools = out
        return out

    def tool_target(self, name: str) -> tuple[GatewaySession, ActionManifest] | None:
        """The session and action behind tool *name* of :meth:`tools`, or ``None``."""
        self.tools()
        return self._targets.get(name)

    def _caller(self, session: GatewaySession) -> Callable[..., Awaitable[tuple[Any, str]]]:
        async def call(action: str, input: Any, tool: str, call_id: str | None) -> tuple[Any, str]:
            conn = session._conn
            if conn is None or conn.closed:
                raise ActionError(
                    TesseronErrorCode.TRANSPORT_CLOSED, f"Session {session.session_id} is offline"
                )
            return await invoke(conn, self.options, action, input, tool=tool, call_id=call_id)

        return call

    def _tool_name(self, session: GatewaySession, action: str) -> str:
        """The tool name that events and metrics of a direct :meth:`invoke` carry."""
        self.tools()  # brings the name cache up to date
        cached = self._tool_cache.get((session.session_id, action))
        if cached is not None:
            return cached[1].name
        return sanitize_tool_name(f"{session.app.id}__{action}")

    def _session_for(self, app_id: str) -> GatewaySession:
        for session in self._live_claimed():
            if session.app.id == app_id:
                return session
        raise LookupError(f"no claimed, connected Tesseron session for app {app_id!r}")

    async def invoke(
        self, app_id: str, action: str, input: Any, *, cancel: CancelToken | None = None
    ) -> Any:
        """Invoke *action* of app *app_id*; return its output.

        Raises :class:`ActionError` with the host's code, message and data;
        ``CANCELLED`` (-32001) when *cancel* (a :class:`CancelToken`) fires first, after
        sending ``actions/cancel``; :class:`LookupError` when no claimed session
        serves *app_id*.
        """
        session = self._session_for(app_id)
        call = self._caller(session)
        tool = self._tool_name(session, action)
        if cancel is None:
            output, _ = await call(action, input, tool, None)
            return output
        with trio.CancelScope() as scope, cancel.bound(scope):
            output, _ = await call(action, input, tool, None)
            return output
        assert scope.cancelled_caught
        raise ActionError(TesseronErrorCode.CANCELLED, "Cancelled")

    # -- claiming -------------------------------------------------------------------

    def claim(self, code: str) -> GatewaySession:
        """Claim the session whose pending claim code is *code* (case-insensitive).

        Sends ``tesseron/claimed``; raises :class:`ActionError` ``UNAUTHORIZED``
        (-32009) for an unknown or spent code.
        """
        wanted = code.strip().upper().encode("utf-8", "surrogatepass")
        found: GatewaySession | None = None
        for pending, session in list(self._claims.items()):
            # Compare against every pending code, no early exit.
            if hmac.compare_digest(wanted, pending.encode()):
                found = session
        if found is None:
            raise ActionError(TesseronErrorCode.UNAUTHORIZED, "Unknown or spent claim code")
        self._claim(found)
        return found

    async def try_claim(self, code: str) -> GatewaySession:
        """:meth:`claim` for a code an agent typed: wrong codes are slowed down.

        The first three wrong codes in a row cost nothing; after that each one makes
        the next check wait 1 s, doubling up to 60 s; checks run one at a time, so
        guesses sent side by side wait their turn. A right code claims as soon as it is
        checked (it waits out only a delay already running) and resets the count.
        Every wrong code is logged. Raises as :meth:`claim` does.
        """
        return await self._claim_throttle.check(partial(self.claim, code))

    def set_agent(self, agent: Agent, *, sampling: bool, elicitation: bool) -> None:
        """Say who the agent really is and what it can do (e.g. from an MCP ``initialize``).

        From now on welcomes and ``tesseron/claimed`` carry *agent* and these
        capabilities instead of the ones derived from :attr:`options`; every claimed,
        connected session is sent ``tesseron/claimed`` again so its host applies them.
        """
        self._agent_override = agent
        self._caps_override = {
            "streaming": True,
            "subscriptions": True,
            "sampling": sampling,
            "elicitation": elicitation,
        }
        for session in self._live_claimed():
            self._send_claimed(session)

    def _agent(self) -> Agent:
        return self._agent_override if self._agent_override is not None else self.options.agent

    def _agent_caps(self) -> dict[str, bool]:
        if self._caps_override is not None:
            return dict(self._caps_override)
        opts = self.options
        return {
            "streaming": True,
            "subscriptions": True,
            "sampling": opts.sampler is not None,
            "elicitation": opts.wait_for is not None,
        }

    def _claim(self, session: GatewaySession) -> None:
        if session._claim_code is not None:
            self._claims.pop(session._claim_code, None)
            session._claim_code = None
        session._claimed_at = int(time.time() * 1000)
        self._send_claimed(session)
        self._bump()

    def _send_claimed(self, session: GatewaySession) -> None:
        conn = session._conn
        if conn is not None:
            conn.notify(
                "tesseron/claimed",
                {
                    "agent": unstructure(self._agent()),
                    "claimedAt": session._claimed_at,
                    "agentCapabilities": self._agent_caps(),
                },
            )

    # -- dialing --------------------------------------------------------------------

    async def connect(self, url: str) -> GatewaySession:
        """Dial the host at *url* (``ws://`` on loopback) and complete its handshake.

        A host that still holds credentials sends ``tesseron/resume`` and gets its
        claimed session back (with a rotated token); otherwise a fresh session is
        minted and awaits :meth:`claim` (or is claimed at once with ``auto_claim``).
        Raises :class:`ValueError` for a refused URL, :class:`OSError` /
        :class:`ConnectionError` when the dial fails, :class:`ActionError` when the
        host's hello is refused, and :class:`TimeoutError` without a hello in time.
        """
        _check_url(url)
        if self._nursery is None or self._closed:
            raise RuntimeError("the Gateway is not open (use `async with Gateway(...)`)")
        session: GatewaySession = await self._nursery.start(partial(self._run_connection, url))
        return session

    async def discover(
        self, instances_dir: str | os.PathLike[str] | None = None
    ) -> list[GatewaySession]:
        """Dial every live v2 ``ws`` manifest in *instances_dir* not already connected.

        The default directory is ``~/.tesseron/instances``. Manifests of dead
        processes are ignored; a failing dial is logged and skipped. Only regular files
        of at most 64 KiB are read (never a symlink, FIFO or device), each again only
        once it changed; one that does not parse is skipped with one log line. The reading runs
        in a worker thread that a cancel abandons, so discovery stays cancellable.
        Returns the new sessions.
        """
        urls = await scan_instances(self._scanners, instances_dir)
        connected = {c.url for c in self._conns if not c.closed}
        out: list[GatewaySession] = []
        for url in urls:
            if url in connected:
                continue
            try:
                out.append(await self.connect(url))
            except (OSError, ValueError, ActionError, TimeoutError) as exc:
                _log.warning("could not connect to Tesseron host %s: %s", url, exc)
            connected.add(url)
        return out

    async def _run_connection(
        self, url: str, *, task_status: trio.TaskStatus[GatewaySession]
    ) -> None:
        started = False
        conn: _Conn | None = None
        # Registered before the dial, so aclose() also stops a connection still dialling.
        scope = trio.CancelScope()
        self._scopes.add(scope)
        if self._closed:
            scope.cancel()
        try:
            with scope:
                async with connect_websocket(url) as ws:
                    conn = _Conn(ws, url, scope)
                    self._conns.add(conn)
                    try:
                        session = await self._handshake(conn)
                        started = True
                        task_status.started(session)
                        await self._read_loop(conn)
                    finally:
                        self._connection_lost(conn)
        except Exception:
            if not started:
                raise
            _log.exception("Tesseron connection to %s failed", url)
        finally:
            self._scopes.discard(scope)
            if conn is not None:
                self._conns.discard(conn)
                conn.finished.set()
        if not started:
            raise trio.ClosedResourceError(f"the Gateway closed while connecting to {url}")

    async def _read_loop(self, conn: _Conn) -> None:
        batch, conn.backlog = conn.backlog, []
        while True:
            for text in batch:
                try:
                    self._on_frame(conn, text)
                except Exception:
                    _log.exception("handling a frame from %s failed", conn.url)
            if conn.closed:
                return
            try:
                # A host that stops reading must not make our answers pile up: read
                # more only once the writer has room (this never awaits user code).
                await conn.ws.wait_writable()
                batch = await conn.ws.receive_batch()
            except WebSocketClosed:
                return

    def _connection_lost(self, conn: _Conn) -> None:
        conn.close()
        session = conn.session
        if session is None or session._conn is not conn:
            return
        session._conn = None
        opts = self.options
        sid = session.session_id
        if session.claimed and opts.resume_ttl_ms > 0 and opts.max_zombies > 0 and not self._closed:
            self._expire_zombies()
            self._zombies.pop(sid, None)
            self._zombies[sid] = trio.current_time() + opts.resume_ttl_ms / 1000
            while len(self._zombies) > opts.max_zombies:
                oldest = next(iter(self._zombies))
                del self._zombies[oldest]
                self._forget_session(oldest)
        else:
            self._forget_session(sid)
            if session._claim_code is not None:
                self._claims.pop(session._claim_code, None)
        self._bump()

    def _expire_zombies(self) -> None:
        if not self._zombies:
            return
        now = trio.current_time()
        for sid, expiry in list(self._zombies.items()):
            if expiry <= now:
                del self._zombies[sid]
                self._forget_session(sid)

    def _forget_session(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        # A zombie keeps its resource subscriptions (a resume re-makes them); a
        # forgotten session takes them along.
        for sub_id, (owner, _) in list(self._subscriptions.items()):
            if owner is session:
                del self._subscriptions[sub_id]
