"""One call of a remote agent's skill (SPEC §7A ``execute``): ``SendMessage``, then
``GetTask`` every ``poll_every`` until a terminal state or the agent's timeout.

The agent's ``timeout`` is the call's deadline, and every request of the call runs
under it: a peer that never answers ``SendMessage`` or a ``GetTask`` makes the call
return its "timed out" result at the deadline, not hang. Only the ``CancelTask`` sent
for a task whose id we know may take :data:`CANCEL_GRACE` more.

The poll sleeps with :func:`trio.sleep` in the call's own task, so the call's cancel
scope (the turn's token, the tool's timeout, an outer scope) stops it at once. Beyond
the SPEC, a call cancelled that way, or timed out, sends ``CancelTask`` for the remote
task before it returns (bounded, shielded): the remote task does not run on for nobody.
A cancelled call still raises ``trio.Cancelled``; it declares SPEC §7A's result
(``"A2A task <id> canceled"``, state ``canceled``) as its ``ToolContext.cancelled_result``,
which the loop and :meth:`Tool.call <toolnexus_trio.Tool.call>` record for it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Final

import trio

from .. import _tracing
from .._tools import ToolContext, ToolResult
from ._wire import (
    INTERRUPTED,
    TERMINAL,
    VERSION_HEADER,
    A2AError,
    Version,
    by_id,
    completed_text,
    dumps,
    send_message,
    status_text,
    task_from_result,
    task_state,
)

if TYPE_CHECKING:
    import httpx2  # imported on first use (issue 39: start-up)

    from ._agent import A2ASource, Headers

logger = logging.getLogger("toolnexus_trio.a2a")

REPLY_MAX_BYTES: Final = 8 * 1024 * 1024
"""A JSON-RPC reply bigger than this is an error (memory stays bounded)."""
CANCEL_GRACE: Final = 2.0
"""Seconds a ``CancelTask`` may take on the way out of a cancelled call."""
ERROR_BODY_CHARS: Final = 2000


async def read_capped(response: httpx2.Response, limit: int) -> bytes:
    """The body of *response*, at most *limit* bytes (else :class:`A2AError`); the
    response is closed either way."""
    from .._http_client import body_chunks, close_response

    data = bytearray()
    try:
        async with body_chunks(response) as chunks:
            async for chunk in chunks:
                data += chunk
                if len(data) > limit:
                    raise A2AError(f"the A2A reply is over {limit} bytes")
    finally:
        await close_response(response)
    return bytes(data)


def _only_cancelled(exc: BaseException) -> bool:
    """Whether *exc* is a ``trio.Cancelled``, or a group holding nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


class RemoteAgent:
    """A resolved agent: where to post, which protocol shape, and the call loop."""

    def __init__(
        self,
        source: A2ASource,
        name: str,
        endpoint: str,
        version: Version,
        headers: Headers,
        timeout_ms: int,
        poll_every_ms: int,
    ) -> None:
        self.source = source
        self.name = name
        self.endpoint = endpoint
        self.version: Version = version
        self.headers = headers
        self.timeout_ms = timeout_ms
        self.poll_every_ms = poll_every_ms

    async def rpc(self, payload: dict[str, Any]) -> Any:
        """POST one JSON-RPC request; its ``result``, or :class:`A2AError`."""
        import httpx2  # loaded by source.client() (first use, issue 39)

        from .._http_client import error_text, redact

        client = await self.source.client()
        headers = {"Content-Type": "application/json", **self.headers.expand()}
        if self.version == "1.0":
            headers[VERSION_HEADER] = "1.0"
        _tracing.inject(headers)  # W3C traceparent/tracestate: the caller's span
        method = payload["method"]
        try:
            request = client.build_request(
                "POST", self.endpoint, content=dumps(payload), headers=headers
            )
            response = await client.send(request, stream=True)
            body = await read_capped(response, REPLY_MAX_BYTES)
        except httpx2.HTTPError as exc:
            raise A2AError(
                f"A2A {method}: {redact(error_text(exc), self.headers.secrets)}"
            ) from None
        if not 200 <= response.status_code < 300:
            text = body.decode(errors="replace")[:ERROR_BODY_CHARS]
            raise A2AError(
                f"A2A {method}: HTTP {response.status_code}: {redact(text, self.headers.secrets)}"
            )
        try:
            reply = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser
            raise A2AError(f"A2A {method}: the reply is not JSON") from None
        if not isinstance(reply, dict):
            raise A2AError(f"A2A {method}: the reply is not a JSON-RPC object")
        error = reply.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else error
            raise A2AError(
                f"A2A {method} error {code}: {message}", code if isinstance(code, int) else None
            )
        if "result" not in reply:
            raise A2AError(f"A2A {method}: the reply has neither result nor error")
        return reply["result"]

    async def run(self, text: str, ctx: ToolContext | None = None) -> ToolResult:
        """Send *text* as a task and poll it to its end (the SPEC's result strings).

        Cancelled, it sets ``ctx.cancelled_result`` and lets the cancel go on."""
        started = trio.current_time()
        timeout = self.timeout_ms / 1000
        deadline = started + timeout
        known: list[str] = []  # the task's id, should a cancel come during SendMessage
        try:
            submitted = await self._submit(text, deadline, known)
        except BaseException as exc:
            # A cancel that came while SendMessage was on the wire leaves _submit's
            # nursery wrapped in a group of Cancelled only: still a cancelled call.
            if _only_cancelled(exc):
                self._declare_cancelled(ctx, known[0] if known else "", 0, started)
            raise
        if submitted is None:
            return ToolResult.error(
                f"A2A task timed out after {self.timeout_ms}ms (SendMessage to {self.name} "
                "was not answered)",
                {
                    "agent": self.name,
                    "taskId": "",
                    "state": "unknown",
                    "polls": 0,
                    "ms": round((trio.current_time() - started) * 1000),
                },
            )
        task = submitted
        task_id = str(task.get("id", ""))
        state = task_state(task)
        polls = 0

        def meta() -> dict[str, Any]:
            ms = round((trio.current_time() - started) * 1000)
            return {"agent": self.name, "taskId": task_id, "state": state, "polls": polls, "ms": ms}

        try:
            while state not in TERMINAL and state not in INTERRUPTED:
                elapsed = trio.current_time() - started
                if elapsed >= timeout:
                    await self._cancel_remote(task_id)
                    return ToolResult.error(
                        f"A2A task {task_id} timed out after {self.timeout_ms}ms (state={state})",
                        meta(),
                    )
                await trio.sleep(min(self.poll_every_ms / 1000, timeout - elapsed))
                polls += 1
                # The poll is under the call's deadline too: an unanswered GetTask ends
                # the loop at the deadline (the check above then reports the timeout).
                with trio.move_on_at(deadline):
                    task = task_from_result(
                        await self.rpc(by_id(str(uuid.uuid4()), "GetTask", task_id))
                    )
                    state = task_state(task)
        except trio.Cancelled:
            self._declare_cancelled(ctx, task_id, polls, started)
            with trio.move_on_after(CANCEL_GRACE, shield=True):
                await self._cancel_remote(task_id)
            raise
        if state == "completed":
            return ToolResult.ok(completed_text(task), meta())
        why = status_text(task)
        return ToolResult.error(f"A2A task {task_id} {state}" + (f": {why}" if why else ""), meta())

    def _declare_cancelled(
        self, ctx: ToolContext | None, task_id: str, polls: int, started: float
    ) -> None:
        """SPEC §7A's result for a call cancelled mid-way, as the call's declared one."""
        if ctx is not None:
            ms = round((trio.current_time() - started) * 1000)
            meta = {"agent": self.name, "taskId": task_id, "state": "canceled", "polls": polls}
            ctx.cancelled_result = ToolResult.error(
                f"A2A task {task_id} canceled", {**meta, "ms": ms}
            )

    async def _submit(self, text: str, deadline: float, known: list[str]) -> dict[str, Any] | None:
        """``SendMessage``; the task it created, or ``None`` if no answer came by
        *deadline* (the call's).

        A cancel that comes while the request is on the wire would lose the task's id
        (and leave the remote task running), so the request finishes in a shielded task
        of its own: the caller's cancel gives it :data:`CANCEL_GRACE` more (never past
        *deadline*), then cancels the remote task it created (its id added to *known*),
        then goes on being cancelled.
        """
        payload = send_message(str(uuid.uuid4()), str(uuid.uuid4()), text, self.version)
        # Shielded from the caller's cancel, but never past the call's deadline.
        shield = trio.CancelScope(shield=True, deadline=deadline)
        done = trio.Event()
        box: list[Any] = []

        async def send() -> None:
            try:
                with shield:
                    box.append(await self.rpc(payload))
            except Exception as exc:
                box.append(exc)
            finally:
                done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            try:
                await done.wait()
            except trio.Cancelled:
                shield.deadline = min(deadline, trio.current_time() + CANCEL_GRACE)
                with trio.CancelScope(shield=True):
                    await done.wait()
                    if box and not isinstance(box[0], BaseException):
                        with contextlib.suppress(A2AError):
                            task = task_from_result(box[0])
                            known.append(str(task.get("id", "")))
                            await self._cancel_remote(known[-1])
                raise
        if not box:
            return None
        if isinstance(box[0], BaseException):
            raise box[0]
        return task_from_result(box[0])

    async def _cancel_remote(self, task_id: str) -> None:
        """``CancelTask`` for *task_id*; a failure is only logged (the call is over)."""
        if not task_id:
            return
        try:
            with trio.move_on_after(CANCEL_GRACE):
                await self.rpc(by_id(str(uuid.uuid4()), "CancelTask", task_id))
        except A2AError as exc:
            logger.debug("CancelTask %s on %s: %s", task_id, self.name, exc)
