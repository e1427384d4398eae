"""The MCP tool source (SPEC §2): every configured server, loaded concurrently.

:class:`McpSource` is a dynamic tool source for the toolkit. Its servers load at the
same time, each phase of each server under that server's ``timeout``: a failing or
hanging server is marked ``failed`` within its own bound and never delays or breaks
the others. Each live connection is a task in the nursery the source was started in;
:meth:`McpSource.aclose` winds them all down at once (bounded).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from .. import _sampling
from .._groups import collapse_groups
from .._sampling import SamplingLimits
from .._tools import Tool
from ._config import McpConfigInput, parse_mcp_config
from ._conn import ServerConn, WaitFor
from ._types import McpInventory, McpStatus


class McpSource:
    """The tools of every server in an MCP config, kept current.

    Build it, then :meth:`start` it in a nursery that outlives its use (or use
    :func:`open_mcp`, or ``ToolkitOptions(mcp=...)`` with
    :func:`~toolnexus_trio.open_toolkit`). With a ``wait_for``, servers may elicit
    input during a call (SPEC §2 elicitation bridge); without one, the elicitation
    capability is not advertised.

    With a *sample* (a :data:`~toolnexus_trio.Sampler`), servers may ask our model
    during a call (``sampling/createMessage``), within *sampling_limits*; without one
    the sampling capability is not advertised. When a call runs for an MCP client
    (``serve``), that client's elicitation and sampling come first (see "Sampling" and
    "Relayed elicitation" in the MCP docs); *relay_to_client* advertises
    both for that even without a ``wait_for`` or a sampler.
    """

    def __init__(
        self,
        config: McpConfigInput,
        *,
        wait_for: WaitFor | None = None,
        sample: _sampling.Sampler | None = None,
        sampling_limits: SamplingLimits | None = None,
        relay_to_client: bool = False,
    ) -> None:
        parsed = parse_mcp_config(config)
        self._conns = [
            ServerConn(
                s,
                wait_for,
                self._bump,
                sampler=sample,
                limits=sampling_limits,
                relay_to_client=relay_to_client,
            )
            for s in parsed.servers
        ]
        self._version = 0
        self._lot = trio.lowlevel.ParkingLot()  # wait_changed's waiters, woken by _bump
        self._tools: list[Tool] | None = None
        self._started = False
        self._closed = False

    def _bump(self) -> None:
        self._version += 1
        self._tools = None
        self._lot.unpark_all()

    @property
    def version(self) -> int:
        """Bumped whenever the tool surface changes (a load, a ``list_changed``, a failure)."""
        return self._version

    async def wait_changed(self, since: int) -> int:
        """Wait until :attr:`version` differs from *since* and return it (cancellable)."""
        if self._version != since:
            await trio.lowlevel.checkpoint()
        while self._version == since:
            await self._lot.park()
        return self._version

    def tools(self) -> Sequence[Tool]:
        """The tools of the connected servers, in config order."""
        if self._tools is None:
            self._tools = [t for conn in self._conns for t in conn.tools]
        return self._tools

    def status(self) -> dict[str, McpStatus]:
        """Each configured server's :class:`McpStatus`, in config order."""
        return {conn.config.name: conn.status for conn in self._conns}

    async def read_resource(self, app_id: str, name: str) -> Any:
        """MCP resources are not exposed as tools; always :class:`LookupError`."""
        await trio.lowlevel.checkpoint()
        raise LookupError(f"no MCP resource source for {app_id!r}")

    async def start(self, nursery: trio.Nursery) -> None:
        """Load every enabled server concurrently; connections then live in *nursery*.

        Returns when each server is connected or failed. Cancelling the caller cancels
        the loads still running (their processes are killed, none is left behind).
        """
        if self._started:
            raise RuntimeError("McpSource.start() was already called")
        self._started = True
        async with trio.open_nursery() as loads:
            for conn in self._conns:
                if conn.config.enabled:
                    loads.start_soon(self._start_one, conn, nursery)

    async def _start_one(self, conn: ServerConn, nursery: trio.Nursery) -> None:
        try:
            await nursery.start(conn.run)
        except Exception as exc:  # isolated: one server's failure is its status only
            conn.fail(exc)

    async def aclose(self) -> None:
        """Close every connection at once; stdio servers' process trees are stopped.

        Bounded (about 3 s at worst, shielded); idempotent.
        """
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for conn in self._conns:
                    nursery.start_soon(conn.close)


@contextlib.asynccontextmanager
async def open_mcp(
    config: McpConfigInput,
    *,
    wait_for: WaitFor | None = None,
    sample: _sampling.Sampler | None = None,
    sampling_limits: SamplingLimits | None = None,
    relay_to_client: bool = False,
) -> AsyncIterator[McpSource]:
    """Load an MCP config's servers (concurrently) for the ``async with`` block (the
    keywords are :class:`McpSource`'s)."""
    source = McpSource(
        config,
        wait_for=wait_for,
        sample=sample,
        sampling_limits=sampling_limits,
        relay_to_client=relay_to_client,
    )
    async with trio.open_nursery() as nursery:
        try:
            await source.start(nursery)
            yield source
        finally:
            await source.aclose()


async def list_mcp_tools(config: McpConfigInput) -> dict[str, McpInventory]:
    """Connect to every enabled server, list its tools (original names, unfiltered), and
    disconnect: nothing is left running. Failures are isolated as in a normal load."""
    conns = [ServerConn(s, None, lambda: None) for s in parse_mcp_config(config).servers]

    async def one(conn: ServerConn) -> None:
        try:
            with collapse_groups():
                async with trio.open_nursery() as nursery:
                    await nursery.start(functools.partial(conn.run, list_only=True))
        except Exception as exc:
            conn.fail(exc)

    async with trio.open_nursery() as nursery:
        for conn in conns:
            if conn.config.enabled:
                nursery.start_soon(one, conn)
    return {
        conn.config.name: McpInventory(
            McpStatus(conn.status.state, conn.status.error, len(conn.infos)), tuple(conn.infos)
        )
        for conn in conns
    }
