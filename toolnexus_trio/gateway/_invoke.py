"""One ``actions/invoke`` from the gateway: the invoking task's side.

The invoking task (a tool call of the client loop, or :meth:`Gateway.invoke`) owns a
small per-invocation nursery:

- the task itself waits for the response on a one-shot channel;
- a *drain* task takes what the connection's reader queued for this invocation:
  ``actions/progress`` and ``log`` become stream events and metrics of the run that
  made the call, and ``sampling/request`` / ``elicitation/request`` are serviced in
  tasks of this nursery, so they run in the tool call's context (its
  :class:`~toolnexus_trio._runctx.RunServices` and the sampling depth).

Cancellation: when ``trio.Cancelled`` reaches the invoking task before the answer,
``actions/cancel`` is queued synchronously and the cancellation propagates; the
host's ``-32001`` answer is not awaited.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

import trio

from .. import _tracing
from .._groups import collapse_groups
from .._runctx import current_run
from .._sampling import sampling_depth
from .._tools import Tool, ToolContext, ToolHints, ToolResult, ToolSource, output_text
from .._wire import Request as WaitRequest
from ..tesseron._errors import ActionError, TesseronErrorCode, transport_closed
from ..tesseron._wire import ActionManifest, Request, clamp_percent, error_frame, result_frame
from ._conn import MAX_REQUESTS_PER_INVOCATION, _Conn, _Inv

if TYPE_CHECKING:
    from ._session import GatewayOptions

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")

# sampling_depth (imported above) is shared with the MCP source's sampling, so nesting
# across the gateway and MCP hops adds up.
__all__ = ["invoke", "make_tool", "new_invocation_id", "sampling_depth"]

OBJECT_SCHEMA: Final[dict[str, Any]] = {"type": "object"}


def new_invocation_id() -> str:
    """``inv_`` plus 16 random URL-safe characters."""
    return f"inv_{secrets.token_urlsafe(12)}"


def _cancelled_error() -> ActionError:
    return ActionError(TesseronErrorCode.CANCELLED, "Cancelled")


async def invoke(
    conn: _Conn,
    options: GatewayOptions,
    action: str,
    input: Any,
    *,
    tool: str,
    call_id: str | None,
) -> tuple[Any, str]:
    """Invoke *action* on *conn*; return ``(output, invocation_id)``.

    Raises :class:`ActionError` for the host's error answer, and ``TRANSPORT_CLOSED``
    (-32010) when the connection drops first.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    if conn.closed:
        raise transport_closed()
    inv_id = new_invocation_id()
    inv = _Inv(inv_id, tool, call_id, current_run.get(), sampling_depth.get())
    conn.invocations[inv_id] = inv
    answered = False
    params = {"name": action, "input": input, "invocationId": inv_id}
    # The tool call's trace context in params._meta (as MCP carries it): a field
    # tesseron 0.2.0 and the reference gateway ignore; our host parents the handler on it.
    _tracing.inject_meta(params)
    rid, reply_recv = conn.request("actions/invoke", params, inv)
    try:
        with reply_recv, collapse_groups():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, conn, inv, options, nursery)
                try:
                    reply = await reply_recv.receive()
                    answered = True
                finally:
                    # The drain task forwards what was queued before the answer (the
                    # reader finished the invocation when it read it), then ends.
                    inv.finish()
    except BaseException:
        if not answered:
            # Synchronous on purpose: we may be inside a cancelled scope.
            conn.notify("actions/cancel", {"invocationId": inv_id})
        raise
    finally:
        conn.forget(rid)
        conn.invocations.pop(inv_id, None)
    if reply.error is not None:
        raise reply.error
    result = reply.result
    if isinstance(result, dict) and "output" in result:
        return result["output"], inv_id
    return result, inv_id  # a bare result, as the protocol docs show it


async def _drain(conn: _Conn, inv: _Inv, options: GatewayOptions, nursery: trio.Nursery) -> None:
    while True:
        while not inv.queue:
            if inv.done or conn.closed:
                return
            await inv.lot.park()
        kind, item = inv.queue.popleft()
        if kind == "request":
            if inv.done:
                conn.send(error_frame(item.id, _cancelled_error()))
            elif inv.requests_in_flight >= MAX_REQUESTS_PER_INVOCATION:
                busy = ActionError(
                    TesseronErrorCode.INTERNAL_ERROR,
                    f"Too many concurrent requests for invocation {inv.id}",
                    {"max": MAX_REQUESTS_PER_INVOCATION},
                )
                conn.send(error_frame(item.id, busy))
            else:
                inv.requests_in_flight += 1
                nursery.start_soon(_serve_request, conn, inv, options, item)
        elif kind == "progress":
            await _forward_progress(inv, item)
        else:
            await _forward_log(inv, item)


async def _emit(inv: _Inv, event: dict[str, Any], metric: dict[str, Any]) -> None:
    services = inv.services
    if services is None:
        return
    if services.metric is not None:
        services.metric(metric)
    if services.emit is not None:
        # A consumer that is gone means the run is ending: drop the event.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await services.emit(event)


async def _forward_progress(inv: _Inv, params: dict[str, Any]) -> None:
    percent = clamp_percent(params.get("percent"), inv.percent)
    if percent is not None:
        inv.percent = percent
    else:
        percent = inv.percent  # a message-only update keeps the cursor where it was
    message = params.get("message")
    await _emit(
        inv,
        {
            "type": "progress",
            "id": inv.call_id,
            "tool": inv.tool,
            "invocation_id": inv.id,
            "percent": percent,
            "message": message,
            "data": params.get("data"),
        },
        {"event": "progress", "tool": inv.tool, "percent": percent, "message": message},
    )


async def _forward_log(inv: _Inv, params: dict[str, Any]) -> None:
    level, message, meta = params.get("level"), params.get("message"), params.get("meta")
    await _emit(
        inv,
        {
            "type": "log",
            "id": inv.call_id,
            "tool": inv.tool,
            "level": level,
            "message": message,
            "meta": meta,
        },
        {"event": "log", "tool": inv.tool, "level": level, "message": message},
    )


async def _serve_request(conn: _Conn, inv: _Inv, options: GatewayOptions, req: Request) -> None:
    """Answer one sampling/elicitation request: exactly one answer goes out, even on cancel."""
    frame: str | None = None
    with trio.CancelScope() as scope:  # cancelled by inv.finish() when the call ends
        inv.scopes.add(scope)
        if inv.done:
            scope.cancel()  # the call ended between the queue and this task starting
        try:
            if req.method == "sampling/request":
                result = await _sample(inv, options, req.params)
            else:
                result = await _elicit(inv, options, req.params)
            frame = result_frame(req.id, result)
        except ActionError as exc:
            frame = error_frame(req.id, exc)
        except Exception as exc:
            frame = error_frame(req.id, ActionError.internal(exc))
        finally:
            inv.scopes.discard(scope)
            inv.requests_in_flight -= 1
            # Synchronous, so it also goes out from a cancelled scope.
            conn.send(frame if frame is not None else error_frame(req.id, _cancelled_error()))


async def _sample(inv: _Inv, options: GatewayOptions, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict) or not isinstance(params.get("prompt"), str):
        raise ActionError(TesseronErrorCode.INVALID_PARAMS, "sampling/request needs a prompt")
    depth = inv.depth + 1
    limit = options.max_sampling_depth
    if depth > limit:
        raise ActionError(
            TesseronErrorCode.SAMPLING_DEPTH_EXCEEDED,
            f"Sampling depth {depth} exceeds the limit of {limit}",
            {"depth": depth, "max": limit},
        )
    prompt: str = params["prompt"]
    raw_max = params.get("maxTokens")
    max_tokens = raw_max if isinstance(raw_max, int) and not isinstance(raw_max, bool) else None
    schema = params.get("schema") if isinstance(params.get("schema"), dict) else None
    token = sampling_depth.set(depth)  # this task only: it inherited a copy of the call's context
    try:
        sampler = options.sampler
        if sampler == "model":
            services = inv.services
            if services is None or services.sample is None:
                raise ActionError(
                    TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                    "Sampling is not available: the call was not made by a client loop",
                )
            text = await services.sample(prompt, max_tokens)
        else:
            assert sampler is not None  # the reader refuses requests it cannot serve
            text = await sampler(prompt, max_tokens, schema)
    finally:
        sampling_depth.reset(token)
    return {"content": text}


async def _elicit(inv: _Inv, options: GatewayOptions, params: Any) -> dict[str, Any]:
    # The MCP client of a served toolkit that made the call asks its user first
    # (relayed elicitation); else the gateway's wait_for.
    services = inv.services
    relay = services.elicit if services is not None else None
    wait_for = relay or options.wait_for
    assert wait_for is not None  # the reader refuses requests it cannot serve
    if not isinstance(params, dict) or not isinstance(params.get("question"), str):
        raise ActionError(TesseronErrorCode.INVALID_PARAMS, "elicitation/request needs a question")
    schema = params.get("schema")
    request = WaitRequest(
        kind="input",
        prompt=params["question"],
        data={"schema": schema if isinstance(schema, dict) else dict(OBJECT_SCHEMA)},
    )
    try:
        answer = await wait_for(request)
    except ActionError:
        raise  # a typed refusal (e.g. -32007 from a client without elicitation) goes to the host
    except Exception:
        _log.exception("wait_for failed for an elicitation; answering cancel")
        return {"action": "cancel"}
    if answer.ok:
        out: dict[str, Any] = {"action": "accept"}
        if answer.data is not None:
            out["value"] = answer.data
        return out
    if answer.reason == "declined":
        return {"action": "decline"}
    return {"action": "cancel"}


# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------


def _hints(annotations: dict[str, Any] | None) -> ToolHints | None:
    if not annotations:
        return None
    return ToolHints(
        read_only=annotations.get("readOnly") is True,
        destructive=annotations.get("destructive") is True,
        idempotent=annotations.get("idempotent") is True,
        open_world=annotations.get("openWorld") is True,
    )


def make_tool(name: str, app_id: str, manifest: ActionManifest, call: Any) -> Tool:
    """The :class:`Tool` *name* for one action; *call* is ``async (action, input, tool, call_id)``.

    *name* is the sanitized tool name the model sees; the invoke carries the action's
    original name. A schema that is not an object schema, or that does not compile, is
    replaced by ``{"type": "object"}`` (logged) so the action stays usable.
    """
    action = manifest.name

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            output, inv_id = await call(action, args, name, ctx.call_id)
        except ActionError as exc:
            return ToolResult.error(exc.message, metadata={"code": int(exc.code), "data": exc.data})
        return ToolResult.ok(
            output_text(output), metadata={"app": app_id, "action": action, "invocation_id": inv_id}
        )

    schema = manifest.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = dict(OBJECT_SCHEMA)
    hints = _hints(manifest.annotations)
    try:
        return Tool(name, manifest.description, schema, ToolSource.TESSERON, execute, hints)
    except Exception as exc:  # a hostile schema must not break the whole toolkit
        _log.warning("tool %s: input schema does not compile (%s); using an open object", name, exc)
        return Tool(
            name, manifest.description, dict(OBJECT_SCHEMA), ToolSource.TESSERON, execute, hints
        )
