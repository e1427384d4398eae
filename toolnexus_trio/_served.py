"""What every toolkit server on hypercorn's Trio worker shares (MCP at ``/mcp``, A2A
alone): the bind, the graceful stop, and the two ways to run one (``async with``, or
``await nursery.start(server)``).

hypercorn is imported when a server starts, not with this module: a toolkit imports the
A2A server class whether or not the extra that brings hypercorn is installed.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from types import TracebackType
from typing import Any, Final, Self

import trio

from ._groups import collapse_groups

SHUTDOWN_GRACE: Final = 1.0
"""Seconds open HTTP streams get to finish when serving stops."""


class HttpServed(abc.ABC):
    """The lifecycle of one served toolkit: subclasses set :attr:`_url` once listening,
    serve in ``__call__`` until ``self._stop`` is set, and set ``self._stopped`` (in a
    ``finally``) when they are done."""

    _close_bound: float = SHUTDOWN_GRACE + 2
    """Seconds :meth:`aclose` waits (shielded) for the server to wind down."""

    def __init__(self) -> None:
        self._url: str | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._stack: contextlib.AsyncExitStack | None = None

    @abc.abstractmethod
    async def __call__(self, *, task_status: trio.TaskStatus[Any]) -> None:
        """Serve until ``self._stop`` is set; ``task_status.started()`` once listening."""

    async def aclose(self) -> None:
        """Stop serving (open streams get :data:`SHUTDOWN_GRACE` to finish). Idempotent."""
        self._stop.set()
        with trio.move_on_after(self._close_bound, shield=True):
            if self._url is not None:
                await self._stopped.wait()

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            stack.enter_context(collapse_groups())
            nursery = await stack.enter_async_context(trio.open_nursery())
            await nursery.start(self)
        except BaseException as exc:
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._stop.set()
        assert self._stack is not None
        return await self._stack.__aexit__(exc_type, exc, tb)

    async def _hypercorn(
        self,
        app: Any,
        host: str,
        port: int,
        errorlog: str,
        done: trio.Event,
        *,
        task_status: trio.TaskStatus[list[str]],
    ) -> None:
        """Serve *app* on *host*:*port* until ``self._stop``; started, it reports the
        bound addresses; *done* is set when hypercorn has stopped."""
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        bind_host = f"[{host}]" if ":" in host else host
        config.bind = [f"{bind_host}:{port}"]
        config.graceful_timeout = SHUTDOWN_GRACE
        config.accesslog = None
        config.errorlog = logging.getLogger(errorlog)
        try:
            await serve(app, config, shutdown_trigger=self._stop.wait, task_status=task_status)
        finally:
            done.set()
