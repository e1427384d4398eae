"""``python -m toolnexus_trio gateway --mcp``: the Tesseron gateway as an MCP server on stdio.

An agent (any MCP client) starts this process; it discovers Tesseron hosts from their
instance manifests, dials them with our :class:`~toolnexus_trio.tesseron.Gateway`, and
serves, over MCP:

- the meta tools (always listed; some clients ignore ``tools/list_changed``):
  ``tesseron__claim_session``, ``tesseron__list_actions``,
  ``tesseron__invoke_action``, ``tesseron__read_resource`` and
  ``tesseron__list_pending_claims``;
- one ``<app_id>__<action>`` tool per action of each claimed, live session (names as
  :meth:`Gateway.tools` makes them provider-safe), with annotations mapped to MCP
  ``ToolAnnotations``;
- each app's resources as ``tesseron://<app_id>/<name>`` (list, read, subscribe).

Per call, the MCP request's context (session, request id, progress token) lives in a
ContextVar: the gateway's per-invocation tasks inherit it, so a host's
``sampling/request`` and ``elicitation/request`` go to the MCP client of the call that
made the invocation, and progress/log go back on that request. The client's
``notifications/cancelled`` cancels the handler's task: our invoke sends
``actions/cancel`` at once and the call ends (the SDK sends no reply to a cancelled
request, which the MCP spec allows).

Both MCP revisions are served. A handshake-era client says who it is and what it can
do in ``initialize``; a 2026-07-28 client sends no ``initialize`` and says it in every
request's ``_meta``, so the agent is learnt from every request. That revision forbids
server-to-client requests, so a host's sampling or elicitation request goes out as an
``InputRequiredResult`` round of the ``tools/call`` (:mod:`._mcp_park`), and list
changes and resource updates go out on ``subscriptions/listen`` streams.

Nothing but protocol goes to stdout; claim codes and logs go to stderr.

This module holds :class:`GatewayFront` (its set-up, the agent's identity, the
background tasks: discovery, list changes, resource updates) and
:func:`run_gateway_front`, the entry point. The request handlers are mixins: the tools
and the calls they make in :mod:`._mcp_tools`, the resources in :mod:`._mcp_resources`,
the host's requests to the client in :mod:`._mcp_relay`; the request a call runs for
(the ContextVar) is :mod:`._mcp_call`.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated, ToolsListChanged

from .._groups import collapse_groups
from .._wire import Answer
from .._wire import Request as WaitRequest
from ..mcp._stdin import capped_stdio_server
from ..tesseron._wire import Agent
from ._gateway import Gateway
from ._mcp_call import _ELICITATION, _SAMPLING, _Call, _client_name
from ._mcp_park import Park
from ._mcp_relay import HostRelay
from ._mcp_resources import ResourceHandlers
from ._mcp_tools import ToolHandlers
from ._session import GatewayOptions

__all__ = ["GatewayFront", "run_gateway_front"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

POLL_SECONDS: Final = 2.0
"""How often the instances directory is read for new hosts."""
NOTIFY_BOUND: Final = 1.0
"""Seconds a ``list_changed`` may take to go out; a stuck client is skipped."""


class GatewayFront(ToolHandlers, ResourceHandlers, HostRelay):
    """The MCP server face of a :class:`Gateway` (one stdio client)."""

    def __init__(self, gateway: Gateway, instances_dir: Path | None = None) -> None:
        self.gateway = gateway
        self.instances_dir = instances_dir
        self._session: Any = None  # the client's ServerSession, once initialized
        self._sampling_depths: list[int] = []  # depths of createMessage calls in flight
        self._subscribed: dict[str, str] = {}  # uri -> gateway subscription id
        self._updates: list[str] = []  # uris to notify, filled by the reader's hook
        self._updated = trio.Event()
        self._agent_seen: tuple[str, bool, bool] | None = None  # what set_agent was told
        self._parks: dict[str, tuple[Park, _Call]] = {}  # request_state -> a 2026-07-28 call
        self._bus = InMemorySubscriptionBus()  # list_changed for subscriptions/listen
        self.nursery: trio.Nursery | None = None
        """Where parked (2026-07-28) calls run; set by :func:`run_gateway_front`."""
        gateway.on_resource_updated = self._on_resource_updated
        self.server: Server[Any] = Server(
            "tesseron-gateway",
            version="toolnexus-trio",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )
        self._listener = ListenHandler(self._bus)
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )

    def init_options(self) -> InitializationOptions:
        """``initialize``'s answer: tools and resources with ``listChanged``, subscribe, logging."""
        options = self.server.create_initialization_options(
            NotificationOptions(tools_changed=True, resources_changed=True)
        )
        caps = options.capabilities
        caps.resources = types.ResourcesCapability(subscribe=True, list_changed=True)
        caps.logging = types.LoggingCapability()
        return options

    # ------------------------------------------------------------------ agent identity

    async def _initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams | None
    ) -> None:
        self._session = ctx.session
        self._learn_agent(ctx)
        await trio.lowlevel.checkpoint()

    def _learn_agent(self, ctx: ServerRequestContext[Any]) -> None:
        """Tell the gateway who the agent is and what it can do, when that changed.

        A handshake-era client says it once, in ``initialize`` (applied at
        ``notifications/initialized``); a 2026-07-28 client sends no ``initialized`` and
        says it in every request's ``_meta`` instead, so every request is looked at
        (a claim's too, before ``tesseron/claimed`` goes out)."""
        session = ctx.session
        if session.client_params is None and session.client_capabilities is None:
            return  # an envelope-less request (or before initialize): nothing to learn
        seen = (
            _client_name(ctx),
            session.check_client_capability(_SAMPLING),
            session.check_client_capability(_ELICITATION),
        )
        if seen != self._agent_seen:
            self._agent_seen = seen
            name, sampling, elicitation = seen
            self.gateway.set_agent(
                Agent(id=name, name=name), sampling=sampling, elicitation=elicitation
            )

    # ------------------------------------------------------------------ background tasks

    async def discover_forever(self, announce: Callable[[str], None]) -> None:
        """Dial new hosts of the instances directory every :data:`POLL_SECONDS`."""
        while True:
            for session in await self.gateway.discover(self.instances_dir):
                if session.claim_code is not None:
                    announce(
                        f"Tesseron app {session.app.name!r} ({session.app.id}) is waiting: "
                        f"claim code {session.claim_code}"
                    )
                else:
                    announce(f"Tesseron app {session.app.id} resumed its session")
            await trio.sleep(POLL_SECONDS)

    async def notify_changes(self) -> None:
        """Send ``tools/list_changed`` and ``resources/list_changed`` on every gateway change."""
        version = self.gateway.version
        while True:
            version = await self.gateway.wait_changed(version)
            # 2026-07-28 clients hear it on their subscriptions/listen streams.
            await self._bus.publish(ToolsListChanged())
            await self._bus.publish(ResourcesListChanged())
            session = self._session
            if session is None:
                continue
            # Subscriptions of a dropped host are gone with its connection.
            live = set(self.gateway._subscriptions)
            for uri, sub_id in list(self._subscribed.items()):
                if sub_id not in live:
                    del self._subscribed[uri]
            with trio.move_on_after(NOTIFY_BOUND):
                await session.send_tool_list_changed()
                await session.send_resource_list_changed()

    async def forward_updates(self) -> None:
        """Send ``notifications/resources/updated`` for what the hosts published."""
        while True:
            await self._updated.wait()
            self._updated = trio.Event()
            updates, self._updates = self._updates, []
            session = self._session
            for uri in updates:
                await self._bus.publish(ResourceUpdated(uri))
                if session is not None and uri in self._subscribed:
                    with trio.move_on_after(NOTIFY_BOUND):
                        await session.send_resource_updated(uri)


async def run_gateway_front(
    instances_dir: Path | None,
    *,
    resume_ttl_ms: int,
    max_sampling_depth: int,
) -> int:
    """Serve the gateway over this process's stdin/stdout until the client closes stdin."""
    # The 2026-07-28 revision deprecates sampling and logging; a handshake-era client
    # still uses them (the calls are in _mcp_relay), so the SDK's warning says nothing useful.
    warnings.filterwarnings("ignore", module=r"toolnexus_trio\.gateway\._mcp_relay")
    warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

    def announce(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    holder: list[GatewayFront] = []

    async def sample(prompt: str, max_tokens: int | None, schema: Any) -> str:
        return await holder[0].sample(prompt, max_tokens, schema)

    async def wait_for(request: WaitRequest) -> Answer:
        return await holder[0].wait_for(request)

    options = GatewayOptions(
        sampler=sample,
        wait_for=wait_for,
        resume_ttl_ms=resume_ttl_ms,
        max_sampling_depth=max_sampling_depth,
    )
    with collapse_groups():
        async with Gateway(options) as gateway:
            # Until the client says who it is (initialize, or a 2026-07-28 request's
            # envelope), hosts hear "no sampling or elicitation" (corrected by
            # tesseron/claimed, as the reference does).
            gateway.set_agent(
                Agent(id="pending", name="Awaiting agent"), sampling=False, elicitation=False
            )
            front = GatewayFront(gateway, instances_dir)
            holder.append(front)
            async with capped_stdio_server() as (read, write), trio.open_nursery() as nursery:
                front.nursery = nursery  # 2026-07-28 calls run here between their rounds
                nursery.start_soon(front.discover_forever, announce)
                nursery.start_soon(front.notify_changes)
                nursery.start_soon(front.forward_updates)
                await front.server.run(read, write, front.init_options())
                nursery.cancel_scope.cancel()
    return 0
