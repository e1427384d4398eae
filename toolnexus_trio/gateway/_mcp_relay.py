"""The host's requests of ``gateway --mcp`` to its client: progress, logs, sampling, elicitation.

:class:`HostRelay` is a mixin of :class:`~toolnexus_trio.gateway._mcp_front.GatewayFront`.
A host's progress and logs go back on the MCP request of the call that made the
invocation (:data:`~toolnexus_trio.gateway._mcp_call.current_call`); its
``sampling/request`` becomes ``sampling/createMessage`` and its ``elicitation/request``
a form elicitation, sent to that call's client, or on a 2026-07-28 connection (which
forbids server-to-client requests) handed to the parked call's next round
(:mod:`._mcp_park`).
"""

from __future__ import annotations

import logging
from typing import Any, Final

import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from .._wire import Answer
from .._wire import Request as WaitRequest
from ..mcp._elicit import answer_from_elicit_result, elicitation_from_request
from ..tesseron._errors import ActionError, TesseronErrorCode
from ._invoke import sampling_depth
from ._mcp_call import _Call, current_call
from ._mcp_park import ANSWER_SECONDS, Park

__all__ = ["DEFAULT_MAX_TOKENS", "HostRelay"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

DEFAULT_MAX_TOKENS: Final = 1024
_LOG_LEVELS: Final = {"debug": "debug", "info": "info", "warn": "warning", "error": "error"}


def _sampled_text(result: types.CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, types.TextContent) else str(content)


class HostRelay:
    """Host requests to the MCP client for :class:`._mcp_front.GatewayFront` (a mixin)."""

    _sampling_depths: list[int]

    async def _emit(self, event: dict[str, Any]) -> None:
        call = current_call.get()
        if call is None or not call.live:
            return  # a parked call between rounds: no request to ride on
        try:
            if event.get("type") == "progress":
                await self._progress(call, event)
            elif event.get("type") == "log":
                await self._log(call, event)
        except Exception as exc:  # the client's stream may be gone: the call goes on
            logger.debug("dropped a notification: %s", exc)

    @staticmethod
    async def _progress(call: _Call, event: dict[str, Any]) -> None:
        percent = event.get("percent")
        if call.token is None or not isinstance(percent, int) or percent <= call.cursor:
            return  # only with a token, and MCP progress must increase
        call.cursor = percent
        message = event.get("message")
        await call.ctx.session.send_progress_notification(
            call.token,
            float(percent),
            100.0,
            message if isinstance(message, str) else None,
            related_request_id=str(call.ctx.request_id),
        )

    @staticmethod
    async def _log(call: _Call, event: dict[str, Any]) -> None:
        level = _LOG_LEVELS.get(str(event.get("level")), "info")
        data: dict[str, Any] = {"message": event.get("message")}
        meta = event.get("meta")
        if isinstance(meta, dict):
            data.update(meta)
        if call.park is not None:
            # 2026-07-28: sent only when the request opted in (its log level), by the SDK.
            await call.ctx.session.send_log_message(
                level,  # type: ignore[arg-type]  # one of _LOG_LEVELS' values
                data,
                logger=call.app_id,
                related_request_id=call.ctx.request_id,
            )
            return
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level=level,  # type: ignore[arg-type]  # one of _LOG_LEVELS' values
                data=data,
                logger=call.app_id,
            )
        )
        await call.ctx.session.send_notification(notification, call.ctx.request_id)

    async def sample(self, prompt: str, max_tokens: int | None, schema: Any) -> str:
        """The gateway's sampler: a host's ``sampling/request`` as ``sampling/createMessage``."""
        call = current_call.get()
        if call is None:
            raise ActionError(TesseronErrorCode.SAMPLING_NOT_AVAILABLE, "No agent to sample")
        ctx = call.ctx
        if not call.sampling:
            name = call.client_name
            raise ActionError(
                TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                f"The agent ({name}) does not support sampling",
                {"clientName": name},
            )
        depth = sampling_depth.get()  # set by the gateway for this request's task
        self._sampling_depths.append(depth)
        if call.park is not None:
            try:
                return await self._sample_parked(call, call.park, prompt, max_tokens)
            finally:
                self._sampling_depths.remove(depth)
        try:
            result = await ctx.session.create_message(
                [
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text=prompt)
                    )
                ],
                max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                related_request_id=ctx.request_id,
            )
        except MCPError as exc:
            if exc.code == types.METHOD_NOT_FOUND:
                # The client said it samples but does not: "not available", as the
                # reference gateway answers, so the host can tell it from a failure.
                name = call.client_name
                raise ActionError(
                    TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                    f"The agent ({name}) rejected sampling: {exc.message}",
                    {"clientName": name},
                ) from None
            raise ActionError(TesseronErrorCode.HANDLER_ERROR, f"Sampling failed: {exc}") from None
        finally:
            self._sampling_depths.remove(depth)
        return _sampled_text(result)

    @staticmethod
    async def _ask_parked(
        park: Park, request: types.CreateMessageRequest | types.ElicitRequest
    ) -> types.InputResponse | None:
        """Hand *request* to the parked call's next round; wait for the retry's answer."""
        question = park.ask(request)
        try:
            with trio.move_on_after(ANSWER_SECONDS):
                await question.answered.wait()
        finally:
            park.withdraw(question)
        return question.reply

    async def _sample_parked(
        self, call: _Call, park: Park, prompt: str, max_tokens: int | None
    ) -> str:
        reply = await self._ask_parked(
            park,
            types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[
                        types.SamplingMessage(
                            role="user", content=types.TextContent(type="text", text=prompt)
                        )
                    ],
                    max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                )
            ),
        )
        if not isinstance(reply, types.CreateMessageResult):
            raise ActionError(
                TesseronErrorCode.HANDLER_ERROR,
                f"Sampling failed: the agent ({call.client_name}) gave no answer",
            )
        return _sampled_text(reply)

    async def wait_for(self, request: WaitRequest) -> Answer:
        """The gateway's ``wait_for``: a host's ``elicitation/request`` as a form elicitation."""
        call = current_call.get()
        if call is None or not call.elicitation:
            raise ActionError(
                TesseronErrorCode.ELICITATION_NOT_AVAILABLE,
                "The agent does not support elicitation",
            )
        ctx = call.ctx
        params = elicitation_from_request(request, url_supported=False)
        if call.park is not None:
            reply = await self._ask_parked(
                call.park,
                types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=params["message"], requested_schema=params["requestedSchema"]
                    )
                ),
            )
            if not isinstance(reply, types.ElicitResult):
                return Answer(request.id, False, reason="cancelled")  # no answer given
            return answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        reply = await ctx.session.elicit_form(
            params["message"], params["requestedSchema"], ctx.request_id
        )
        return answer_from_elicit_result(
            request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
