"""The resources of ``gateway --mcp``: each app's resources as ``tesseron://<app_id>/<name>``.

:class:`ResourceHandlers` is a mixin of
:class:`~toolnexus_trio.gateway._mcp_front.GatewayFront` holding ``resources/list``,
``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe``, and the
2026-07-28 ``subscriptions/listen`` (list changes, and the updates of the resources a
stream names). A host's update is queued by the gateway's hook; the front's
``forward_updates`` task sends it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError

from ..tesseron._errors import ActionError
from ._gateway import Gateway
from ._mcp_call import _text
from ._session import GatewaySession

__all__ = ["MAX_LISTENED", "URI_SCHEME", "ResourceHandlers"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

URI_SCHEME: Final = "tesseron://"
MAX_LISTENED: Final = 64
"""Resources one ``subscriptions/listen`` stream may name; the rest are not followed."""


class ResourceHandlers:
    """The resources of :class:`._mcp_front.GatewayFront` (a mixin)."""

    gateway: Gateway
    _subscribed: dict[str, str]
    _updates: list[str]
    _updated: trio.Event
    _listener: ListenHandler

    if TYPE_CHECKING:

        def _learn_agent(self, ctx: ServerRequestContext[Any]) -> None: ...
        def _check_claimed(self, app_id: str) -> None: ...

    def _resource_target(self, uri: str) -> tuple[str, str]:
        if uri.startswith(URI_SCHEME):
            app_id, sep, name = uri[len(URI_SCHEME) :].partition("/")
            if sep and app_id and name:
                self._check_claimed(app_id)
                return app_id, name
        raise MCPError(code=types.INVALID_PARAMS, message=f"Not a Tesseron resource: {uri}")

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        seen: set[str] = set()
        out: list[types.Resource] = []
        live = [s for s in self.gateway.sessions() if s.claimed and s.connected]
        for session in sorted(live, key=lambda s: s.claimed_at or 0, reverse=True):
            for resource in session.resources:
                uri = f"{URI_SCHEME}{session.app.id}/{resource.name}"
                if uri not in seen:
                    seen.add(uri)
                    out.append(
                        types.Resource(
                            uri=uri,
                            name=resource.name,
                            description=resource.description or None,
                            mime_type="application/json",
                        )
                    )
        await trio.lowlevel.checkpoint()
        return types.ListResourcesResult(resources=out)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            app_id, name = self._resource_target(uri)
            value = await self.gateway.read_resource(app_id, name)
        except ActionError as exc:
            raise MCPError(code=int(exc.code), message=exc.message, data=exc.data) from None
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type="application/json", text=_text(value))
            ]
        )

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        if uri not in self._subscribed:
            try:
                app_id, name = self._resource_target(uri)
                sub_id = await self.gateway.subscribe_resource(app_id, name)
            except ActionError as exc:
                raise MCPError(code=int(exc.code), message=exc.message, data=exc.data) from None
            self._subscribed[uri] = sub_id
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        sub_id = self._subscribed.pop(str(params.uri), None)
        if sub_id is not None:
            self.gateway.unsubscribe_resource(sub_id)
        await trio.lowlevel.checkpoint()
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen`` (2026-07-28): list changes, and the updates of the
        ``tesseron://`` resources it names (subscribed at their hosts while it lasts)."""
        self._learn_agent(ctx)
        subs: list[str] = []
        try:
            for uri in list(params.notifications.resource_subscriptions or ())[:MAX_LISTENED]:
                try:
                    app_id, name = self._resource_target(uri)
                    subs.append(await self.gateway.subscribe_resource(app_id, name))
                except (ActionError, MCPError, LookupError) as exc:
                    logger.info("not listening to %s: %s", uri, exc)  # never updated, then
            return await self._listener(ctx, params)
        finally:
            for sub_id in subs:
                self.gateway.unsubscribe_resource(sub_id)

    def _on_resource_updated(self, session: GatewaySession, name: str, value: Any) -> None:
        # Called from a connection's reader: queue, never await.
        uri = f"{URI_SCHEME}{session.app.id}/{name}"
        if uri not in self._updates:
            self._updates.append(uri)
        self._updated.set()
