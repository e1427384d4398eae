"""``listen()`` and :class:`TesseronHost`: the listening side of a Tesseron app."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._groups import collapse_groups
from ._connection import _Connection
from ._errors import ActionError
from ._manifest import (
    _DefaultManifestDir,
    manifest_document,
    new_instance_id,
    prepare_directory,
    remove_manifest,
    write_manifest,
)
from ._wire import Agent, Capabilities, Claimed, Welcome
from ._ws import WebSocket
from ._ws_server import serve_websocket

if TYPE_CHECKING:
    from ._app import ResourceHandle, TesseronApp

__all__ = ["Disconnected", "HandshakeFailed", "HostEvent", "TesseronHost", "listen"]

_log = logging.getLogger("toolnexus_trio.tesseron")

EVENT_BUFFER: Final = 64
"""Buffer of each :meth:`TesseronHost.events` channel (see there)."""

CLEANUP_TIMEOUT: Final = 2.0
"""Seconds allowed for shielded cleanup (removing the manifest) on exit."""


@attrs.frozen
class HandshakeFailed:
    """Host event: the gateway refused ``tesseron/hello`` / ``tesseron/resume``.

    The connection is closed and not retried (e.g. ``-32000`` protocol mismatch).
    """

    error: ActionError
    """The gateway's error (code, message, data)."""


@attrs.frozen
class Disconnected:
    """Host event: the gateway connection closed; the host waits for the next dial."""

    code: int | None = None
    """The WebSocket close code, when known."""
    reason: str = ""
    """The close reason, when known."""


HostEvent = Welcome | Claimed | HandshakeFailed | Disconnected
"""What :meth:`TesseronHost.events` delivers."""


class TesseronHost:
    """A listening Tesseron app, yielded by :meth:`TesseronApp.listen`.

    One gateway connection is served at a time; a dial while one is live is closed
    at once with code 1013, and a new dial is accepted as soon as the live one
    closes. Resume credentials from the newest welcome are kept across dials.
    """

    def __init__(self, app: TesseronApp) -> None:
        self.app = app
        """The app being served."""
        self.url = ""
        """``ws://127.0.0.1:<port>/``: what the gateway dials."""
        self.port = 0
        """The bound port."""
        self.manifest_path: Path | None = None
        """The published instance manifest, or ``None`` when publication is disabled."""
        self.instance_id = new_instance_id()
        """This instance's id (the manifest's ``instanceId``)."""
        self.welcome: Welcome | None = None
        """The latest welcome (patched by ``tesseron/claimed``), or ``None`` before the first."""
        self._credentials: tuple[str, str] | None = None
        self._active: _Connection | None = None
        self._senders: list[trio.MemorySendChannel[HostEvent]] = []
        self._closing = False

    def events(self) -> trio.MemoryReceiveChannel[HostEvent]:
        """A new channel of host events: :class:`Welcome`, :class:`Claimed`,
        :class:`HandshakeFailed` and :class:`Disconnected`.

        Each call gets its own channel, receiving the events from then on; it ends
        (``EndOfChannel``) when ``listen()`` exits. Events are never allowed to block
        the host: with nobody listening they are dropped, and a channel whose
        buffer (:data:`EVENT_BUFFER` events) is full drops the newest event with a
        warning. :attr:`welcome` always holds the latest welcome regardless.
        """
        # Bounded: a listener that stops reading costs at most EVENT_BUFFER events.
        send, recv = trio.open_memory_channel[HostEvent](EVENT_BUFFER)
        if self._closing:
            send.close()
        else:
            self._senders.append(send)
        return recv

    @property
    def connected(self) -> bool:
        """Whether a gateway connection is live."""
        return self._active is not None

    # -- called by connections ----------------------------------------------------

    def _emit(self, event: HostEvent) -> None:
        for send in list(self._senders):
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                _log.warning("host event channel full; dropping %r", event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._senders.remove(send)

    def _on_welcome(self, welcome: Welcome) -> None:
        self.welcome = welcome
        self._emit(welcome)

    def _on_claimed(self, event: Claimed, agent: Agent, caps: Capabilities) -> None:
        if self.welcome is not None:
            self.welcome = attrs.evolve(
                self.welcome, agent=agent, capabilities=caps, claim_code=None
            )
        self._emit(event)

    def _on_handshake_failed(self, error: ActionError) -> None:
        self._emit(HandshakeFailed(error))

    def _connection_closed(self, conn: _Connection, code: int | None, reason: str) -> None:
        if self._active is conn:
            self._active = None
            self._emit(Disconnected(code, reason))

    def _manifest_changed(
        self,
        *,
        actions: bool = False,
        resources: bool = False,
        removed: ResourceHandle | None = None,
    ) -> None:
        if self._active is not None:
            self._active.manifest_changed(actions=actions, resources=resources, removed=removed)

    async def _publish(self, handle: ResourceHandle, data: Any) -> None:
        conn = self._active
        if conn is not None:
            await conn.publish(handle, data)

    async def _handle(self, ws: WebSocket) -> None:
        if self._active is not None or self._closing:
            await ws.aclose(1013, "another gateway is connected")
            return
        conn = _Connection(self, ws)
        self._active = conn
        await conn.run()

    def _shutdown(self) -> None:
        self._closing = True
        senders, self._senders = self._senders, []
        for send in senders:
            send.close()


def _check_loopback(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    refused = ValueError(f"refusing to bind {host!r}: a Tesseron host binds loopback only")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise refused from None
    if not address.is_loopback:
        raise refused
    return host


def _check_port(port: object) -> int:
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"port must be an int, got {port!r}")
    if not 0 <= port <= 65535:
        # The OS would silently take it modulo 65536 and bind another port.
        raise ValueError(f"port {port} is outside 0..65535 (0 picks a free port)")
    return port


def _url(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}/" if ":" in host else f"ws://{host}:{port}/"


def _manifest_directory(manifest_dir: Path | str | _DefaultManifestDir | None) -> Path | None:
    if manifest_dir is None:
        return None
    if isinstance(manifest_dir, _DefaultManifestDir):
        return manifest_dir.directory()
    return Path(manifest_dir)


@asynccontextmanager
async def listen(
    app: TesseronApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    manifest_dir: Path | str | _DefaultManifestDir | None,
    allowed_origins: Sequence[str] = (),
) -> AsyncIterator[TesseronHost]:
    """Serve *app* until the block exits (see :meth:`TesseronApp.listen`)."""
    bind_host = _check_loopback(host)  # before anything binds
    port = _check_port(port)
    directory = _manifest_directory(manifest_dir)
    if directory is not None:
        # Refuse an unsafe manifest_dir before binding, too.
        await trio.to_thread.run_sync(prepare_directory, directory)
    th = TesseronHost(app)
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            bound: int = await nursery.start(
                partial(
                    serve_websocket,
                    th._handle,
                    host=bind_host,
                    port=port,
                    allowed_origins=allowed_origins,
                )
            )
            th.port = bound
            th.url = _url(bind_host, bound)
            app._hosts.add(th)
            try:
                if directory is not None:
                    document = manifest_document(th.instance_id, app.name, th.url)
                    th.manifest_path = await trio.to_thread.run_sync(
                        write_manifest, directory, document
                    )
                yield th
            finally:
                app._hosts.discard(th)
                th._shutdown()
                if th.manifest_path is not None:
                    with trio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                        await trio.to_thread.run_sync(remove_manifest, th.manifest_path)
                nursery.cancel_scope.cancel()
