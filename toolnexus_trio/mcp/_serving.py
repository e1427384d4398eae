"""Serving a toolkit over MCP: streamable HTTP at ``/mcp`` (hypercorn's Trio worker) and
stdio. Both run on Trio, in the caller's structured scope."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio
from mcp.server.transport_security import TransportSecuritySettings

from .._groups import collapse_groups
from .._served import SHUTDOWN_GRACE as SHUTDOWN_GRACE
from .._served import HttpServed
from ._serve import ServedToolkit
from ._stdin import capped_stdio_server
from ._types import MCPServeConfig, OnCall

if TYPE_CHECKING:
    from .._toolkit import Toolkit

logger = logging.getLogger("toolnexus_trio.mcp.serve")

MCP_PATH: Final = "/mcp"
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
"""Host names every bind accepts in ``Host`` (and, as ``http://`` origins, in ``Origin``)."""


class SideApp(Protocol):
    """An ASGI app served beside ``/mcp`` on the same port (the A2A routes): it gets
    every HTTP request whose path is not ``/mcp``, and a service of its own."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None:
        """Its service (a nursery for its work), started before serving."""
        ...

    def bound(self, base_url: str) -> None:
        """Told the server's ``http://HOST:PORT`` once it listens."""
        ...


def _beside(mcp_app: Any, side: SideApp) -> Any:
    """One ASGI app: ``/mcp`` (and the lifespan) to *mcp_app*, the rest to *side*."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan" or path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            await mcp_app(scope, receive, send)
        else:
            await side(scope, receive, send)

    return asgi


def is_loopback(host: str) -> bool:
    """Whether *host* (a bind address or name) is this machine only: ``localhost`` or
    an address in 127.0.0.0/8 or ``::1``. ``0.0.0.0``, ``::`` and other names are not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def transport_security(
    host: str, allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """The DNS-rebinding checks for a bind to *host*, on whatever it is (the SDK turns
    them on only for three loopback spellings, and a bind to ``127.0.0.2`` or
    ``0.0.0.0`` would go unchecked).

    ``Host`` may be the bound address or a loopback name (any port), or one of
    *allowed_hosts*; ``Origin``, when sent, a loopback ``http://`` origin (the bound
    address among them when it is loopback) or one of *allowed_origins*. Entries take
    the SDK's forms: exact, or ``name:*`` for any port.
    """
    bound = f"[{host.strip('[]')}]" if ":" in host else host
    names = list(dict.fromkeys([bound, *LOOPBACK_NAMES]))
    local = [n for n in names if n in LOOPBACK_NAMES or is_loopback(host)]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for n in names for form in (n, f"{n}:*")] + list(allowed_hosts),
        allowed_origins=[form for n in local for form in (f"http://{n}", f"http://{n}:*")]
        + list(allowed_origins),
    )


class McpServing(HttpServed):
    """A toolkit served over streamable HTTP at ``/mcp`` (made by ``Toolkit.serve``).

    Use it as an async context manager, or start it in a nursery; either way
    :attr:`url` is set once it listens, and :meth:`aclose` stops it::

        async with toolkit.serve("127.0.0.1", 0) as served:
            print(served.url)

        served = await nursery.start(toolkit.serve("127.0.0.1", 8000))
        ...
        await served.aclose()

    Sessions are stateful (the client's ``notifications/cancelled``, server-to-client
    elicitation and ``list_changed`` need a session). Every bind checks ``Host`` and
    ``Origin`` against DNS rebinding (see :func:`transport_security`; more names with
    *allowed_hosts* and *allowed_origins*). A *host* that is not loopback (``0.0.0.0``,
    a LAN address, a name) exposes the toolkit's tools to other machines: it needs
    ``allow_remote=True``, else :class:`ValueError`, and is logged as a warning.
    """

    def __init__(
        self,
        toolkit: Toolkit,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        mcp: MCPServeConfig | None = None,
        on_call: OnCall | None = None,
        allow_remote: bool = False,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        side: SideApp | None = None,
    ) -> None:
        if isinstance(allowed_hosts, str) or isinstance(allowed_origins, str):
            raise TypeError("allowed_hosts and allowed_origins are lists of names, not a string")
        if not is_loopback(host):
            if not allow_remote:
                raise ValueError(
                    f"{host!r} is not a loopback address: the toolkit's tools would be "
                    "reachable from other machines; pass allow_remote=True (--allow-remote) "
                    "to serve there anyway"
                )
            logger.warning(
                "serving MCP on %s, which other machines can reach: anyone who gets through "
                "can run the toolkit's tools (Host and Origin are still checked)",
                host,
            )
        super().__init__()
        self.security = transport_security(host, allowed_hosts, allowed_origins)
        self.face = ServedToolkit(toolkit, mcp, on_call)
        self.host, self.port = host, port
        self.side = side

    @property
    def url(self) -> str:
        """``http://HOST:PORT/mcp`` (the bound port when 0 was asked)."""
        if self._url is None:
            raise RuntimeError("not serving yet")
        return self._url

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (the A2A routes, when served, are under it)."""
        return self.url[: -len(MCP_PATH)]

    async def __call__(
        self, *, task_status: trio.TaskStatus[McpServing] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`aclose` or cancellation (``nursery.start(served)``)."""
        app = self.face.server.streamable_http_app(
            streamable_http_path=MCP_PATH, host=self.host, transport_security=self.security
        )
        http_done = trio.Event()
        if self.side is not None:
            app = _beside(app, self.side)
        try:
            async with trio.open_nursery() as nursery:
                if self.side is not None:
                    await nursery.start(self.side.run)
                binds: list[str] = await nursery.start(
                    self._hypercorn, app, self.host, self.port, "toolnexus_trio.mcp.http", http_done
                )
                self._url = binds[0] + MCP_PATH
                if self.side is not None:
                    self.side.bound(binds[0])
                self.face.nursery = nursery  # 2026-07-28 calls are parked here
                nursery.start_soon(self.face.watch_changes)
                task_status.started(self)
                await self._stop.wait()
                # hypercorn stops gracefully (bounded by SHUTDOWN_GRACE); then the rest goes.
                with trio.move_on_after(SHUTDOWN_GRACE + 1):
                    await http_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._stopped.set()


async def serve_stdio(
    toolkit: Toolkit, *, mcp: MCPServeConfig | None = None, on_call: OnCall | None = None
) -> None:
    """Serve *toolkit* over this process's stdin/stdout until the client closes stdin.

    While serving, file descriptor 1 points at stderr and 0 at ``/dev/null``, so nothing
    but protocol reaches stdout, whatever a tool prints, and no tool reads the wire.
    One incoming line (one message) may be at most 16 MiB: a longer one ends the
    session with :class:`~toolnexus_trio.mcp._stdin.LineTooLong`.
    """
    face = ServedToolkit(toolkit, mcp, on_call)
    with collapse_groups():
        async with capped_stdio_server() as (read, write), trio.open_nursery() as nursery:
            face.nursery = nursery  # 2026-07-28 calls are parked here
            nursery.start_soon(face.watch_changes)
            await face.server.run(read, write, face.init_options())
            nursery.cancel_scope.cancel()
