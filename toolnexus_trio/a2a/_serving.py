"""Serving a toolkit over A2A alone (hypercorn's Trio worker, no MCP SDK needed).

``Toolkit.serve(..., a2a=...)`` uses this when the ``mcp`` extra is not installed;
with it, the same :class:`~._server.A2AServer` is mounted beside ``/mcp`` on the MCP
server instead (:class:`toolnexus_trio.mcp.McpServing`), so one port serves both.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import trio

from .._groups import collapse_groups
from .._served import SHUTDOWN_GRACE, HttpServed
from ._server import A2AServer, is_loopback

logger = logging.getLogger("toolnexus_trio.a2a.serve")

A2A_HINT: Final = "pip install -e '.[a2a]' in the toolnexus-trio checkout"


class A2AServing(HttpServed):
    """A toolkit served as an A2A agent (made by ``Toolkit.serve`` with ``a2a=``).

    ``async with`` it (or ``await nursery.start(serving)``); :attr:`url` is the
    JSON-RPC endpoint (``<base>/``), :attr:`card_url` the agent card, :meth:`aclose`
    stops it (running tasks are cancelled and saved ``canceled``). A *host* that is not
    loopback needs ``allow_remote=True``.
    """

    _close_bound = SHUTDOWN_GRACE + 3

    def __init__(
        self,
        server: A2AServer,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allow_remote: bool = False,
    ) -> None:
        if not is_loopback(host):
            if not allow_remote:
                raise ValueError(
                    f"{host!r} is not a loopback address: the agent would be reachable from "
                    "other machines; pass allow_remote=True to serve there anyway"
                )
            logger.warning("serving A2A on %s, which other machines can reach", host)
        super().__init__()
        self.a2a = server
        self.host, self.port = host, port

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``."""
        if self._url is None:
            raise RuntimeError("not serving yet")
        return self._url

    @property
    def url(self) -> str:
        """The A2A JSON-RPC endpoint, ``http://HOST:PORT/``."""
        return self.base_url + "/"

    @property
    def card_url(self) -> str:
        """The agent card's URL."""
        return self.a2a.card_url

    async def __call__(
        self, *, task_status: trio.TaskStatus[A2AServing] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`aclose` or cancellation."""
        try:
            import hypercorn  # noqa: F401 - the extra, named when it is missing
        except ImportError as exc:
            raise ImportError(f"serving A2A needs hypercorn: {A2A_HINT}") from exc
        done = trio.Event()
        app = _no_lifespan(self.a2a)
        try:
            with collapse_groups():
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.a2a.run)
                    binds: list[str] = await nursery.start(
                        self._hypercorn, app, self.host, self.port, "toolnexus_trio.a2a.http", done
                    )
                    self._url = binds[0]
                    self.a2a.bound(binds[0])
                    task_status.started(self)
                    await self._stop.wait()
                    with trio.move_on_after(SHUTDOWN_GRACE + 1):
                        await done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            self._stopped.set()


def _no_lifespan(app: A2AServer) -> Any:
    """*app*, answering hypercorn's lifespan protocol itself (the app has no startup)."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await app(scope, receive, send)

    return asgi
