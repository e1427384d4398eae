"""An ACP agent (Gemini CLI, Claude Code's ACP adapter, ...) as the loop's model.

``async with open_acp(ACPOptions(command, ...)) as acp:`` starts the agent under our
process-tree supervisor (:mod:`.._procs`), does ``initialize`` and ``session/new``
(the absolute working directory, no MCP servers), and ``acp.generate`` is a
``generate`` for :class:`~toolnexus_trio.InProcessOptions`: each model turn is one
``session/prompt``, and only the ``agent_message_chunk`` text of its
``session/update`` notifications forms the reply. Thoughts, tool calls and plans never
reach the reply; every update goes to *on_update* (the events).

**No duplicated history.** An ACP session is stateful: the agent remembers what it was
told. Our requests carry the whole transcript. toolnexus 0.21 sent the whole transcript
every turn, followed by a ``SUPERSEDES-ALL-PRIOR:`` marker asking the agent to ignore
its memory. Here each session remembers what it has seen (the transcript messages sent
to it, plus the replies the agent gave), and a turn goes to the session that has seen
the longest prefix of its transcript, with only what is new after that prefix. When no
session has seen a prefix (a new conversation, a compaction, a ``before_llm`` rewrite,
a turn that was cancelled or failed), a fresh ``session/new`` gets the whole transcript
once. Up to :data:`MAX_WARM_SESSIONS` sessions stay warm, so interleaved conversations
(or the agents of a runtime) each keep theirs. The agent never sees a message twice,
and never answers from a stale memory.

**Permission.** ``session/request_permission`` goes to *wait_for* as a
:class:`~toolnexus_trio.Request` of kind ``"approval"`` whose ``data`` holds the agent's
options (``choices``: ``optionId``, ``name``, ``kind``) and its ``toolCall``. An
:class:`~toolnexus_trio.Answer` with ``ok`` selects ``data["optionId"]`` when given (one of
the choices), else the first ``allow_*`` option; a refusal selects the first
``reject_*`` option (else the request is cancelled). Without *wait_for* every request
is refused. ``permission="allow"`` keeps toolnexus 0.21's auto-approval.

**Bounds.** A turn during which the agent sends nothing for ``permission_timeout``
seconds (time spent waiting on *wait_for* does not count) fails with
:class:`ACPPermissionTimeoutError`. A cancelled or timed-out turn sends
``session/cancel`` and gives the agent :data:`CANCEL_GRACE` seconds to end it; an agent
that does not is stopped with its whole process tree, and the source is closed. Leaving
the ``async with`` closes the agent's stdin, then TERM and KILL to the tree (bounded).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import trio

from .._groups import collapse_groups
from .._lines import LineReader
from .._procs import ProcessTree, open_tree
from .._wire import Answer, Request
from ._rpc import MAX_MESSAGE_BYTES, METHOD_NOT_FOUND, ACPError, Connection, RpcError

logger = logging.getLogger("toolnexus_trio.acp")

HANDSHAKE_BOUND: Final = 30.0
"""Seconds for ``initialize`` and ``session/new``."""
CANCEL_GRACE: Final = 2.0
"""Seconds a cancelled turn's agent gets to answer ``session/prompt`` after
``session/cancel``, before its process tree is stopped."""
EOF_GRACE: Final = 1.0
"""Seconds the agent gets to exit once its stdin closed, before TERM."""
TERM_GRACE: Final = 1.0
"""Seconds between TERM and KILL to the agent's process tree."""
MAX_WARM_SESSIONS: Final = 8
"""Sessions kept warm, one per conversation (least recently used dropped first)."""
MAX_REPLY_CHARS: Final = MAX_MESSAGE_BYTES
"""The longest reply one turn may gather; more fails the turn."""

OnUpdate = Callable[[dict[str, Any]], None]
WaitFor = Callable[[Request], Awaitable[Answer]]


class ACPPermissionTimeoutError(ACPError):
    """A turn in which the agent stayed silent for ``permission_timeout`` seconds."""


def _check_permission(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in ("ask", "allow"):
        raise ValueError(f"permission must be 'ask' or 'allow', not {value!r}")


def _check_timeout(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"permission_timeout must be a number of seconds > 0, not {value!r}")


@attrs.frozen
class ACPOptions:
    """How to run an ACP agent as a model (see :func:`open_acp`).

    ``command`` and ``args`` start the agent; ``cwd`` is its working directory and the
    session's (made absolute; default: ours); ``env`` is added to our environment.
    ``mode`` is set with ``session/set_mode`` after ``session/new``. ``permission`` is
    ``"ask"`` (the host's ``wait_for`` decides) or ``"allow"`` (approve everything).
    """

    command: str
    args: Sequence[str] = attrs.field(default=(), converter=tuple)
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    protocol_version: int = 1
    permission_timeout: float = attrs.field(default=5.0, validator=_check_timeout)
    mode: str | None = None
    permission: Literal["ask", "allow"] = attrs.field(default="ask", validator=_check_permission)


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def _items(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(str(m.get("role", "user")), _text_of(m.get("content"))) for m in messages]


def _render(items: Sequence[tuple[str, str]]) -> str:
    """The prompt text for *items*: one user message as itself, else ``role: text`` lines."""
    if len(items) == 1 and items[0][0] == "user":
        return items[0][1]
    return "\n".join(f"{role}: {text}" for role, text in items)


def _pick(options: Sequence[Mapping[str, Any]], prefix: str) -> str | None:
    for option in options:
        if str(option.get("kind", "")).startswith(prefix) and isinstance(
            option.get("optionId"), str
        ):
            return str(option["optionId"])
    return None


class _Turn:
    """The prompt in flight: its reply so far, and its silence deadline."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.chunks: list[str] = []
        self.size = 0
        self.asking = 0  # permission requests waiting on wait_for
        self.scope = trio.CancelScope()
        self.asks: set[trio.CancelScope] = set()  # the turn's questions to wait_for
        self.over = False
        self.overflow = False
        self.heard()

    def end_asks(self) -> None:
        """The turn is over: questions still open are answered "cancelled"."""
        self.over = True
        for scope in self.asks:
            scope.cancel()

    def heard(self) -> None:
        self.scope.deadline = math.inf if self.asking else trio.current_time() + self.timeout


class ACPModel:
    """A running ACP agent and its session; :meth:`generate` is a model turn."""

    def __init__(
        self,
        options: ACPOptions,
        tree: ProcessTree,
        wait_for: WaitFor | None,
        on_update: OnUpdate | None,
    ) -> None:
        self.options = options
        self.tree = tree
        self.wait_for = wait_for
        self.on_update = on_update
        self.cwd = os.path.abspath(options.cwd or os.getcwd())
        stdout = tree.process.stdout
        stdin = tree.process.stdin
        assert isinstance(stdout, trio.lowlevel.FdStream)
        assert stdin is not None
        self.rpc = Connection(
            LineReader(stdout, MAX_MESSAGE_BYTES),
            stdin,
            self._on_request,
            self._on_notification,
            name=f"ACP agent {options.command!r}",
        )
        self.session_id: str | None = None
        """The current session's id (``None`` until ``session/new`` answered)."""
        self.sessions = 0
        """How many ``session/new`` were sent (a new one when the transcript diverged)."""
        self.agent_info: dict[str, Any] = {}
        """The agent's ``initialize`` answer."""
        # Warm sessions (id -> the transcript it has seen), least recently used first.
        self._warm: dict[str, list[tuple[str, str]]] = {}
        self._turn: _Turn | None = None
        self._lock = trio.Lock()
        self._stopped = False

    @property
    def alive(self) -> bool:
        """Whether the agent is running and its connection open."""
        return not self._stopped and not self.rpc.closed.is_set()

    # -- the agent's messages --------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update" or params.get("sessionId") != self.session_id:
            return
        update = params.get("update")
        if not isinstance(update, dict):
            return
        turn = self._turn
        if turn is not None:
            turn.heard()
            if update.get("sessionUpdate") == "agent_message_chunk":
                content = update.get("content")
                if isinstance(content, dict) and isinstance(content.get("text"), str):
                    turn.size += len(content["text"])
                    if turn.size > MAX_REPLY_CHARS:
                        turn.overflow = True
                        turn.scope.cancel()
                    else:
                        turn.chunks.append(content["text"])
        if self.on_update is not None:
            self.on_update(update)

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return {"outcome": await self._permission(params)}
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _permission(self, params: dict[str, Any]) -> dict[str, Any]:
        raw = params.get("options")
        options = [o for o in raw if isinstance(o, dict)] if isinstance(raw, list) else []
        turn = self._turn
        if turn is None or params.get("sessionId") != self.session_id:
            return {"outcome": "cancelled"}
        chosen: str | None
        if self.options.permission == "allow":
            chosen = _pick(options, "allow")
        elif self.wait_for is None:
            chosen = _pick(options, "reject")
        else:
            # One scope per question (a scope is entered once): the turn's end cancels all.
            ask = trio.CancelScope()
            if turn.over:
                ask.cancel()
            turn.asks.add(ask)
            turn.asking += 1
            turn.heard()
            try:
                with ask:
                    answer = await self.wait_for(self._request(params, options))
            finally:
                turn.asks.discard(ask)
                turn.asking -= 1
                turn.heard()
            if ask.cancelled_caught:
                return {"outcome": "cancelled"}
            chosen = self._choice(answer, options)
        if chosen is None:
            return {"outcome": "cancelled"}
        return {"outcome": "selected", "optionId": chosen}

    def _request(self, params: dict[str, Any], options: list[dict[str, Any]]) -> Request:
        call = params.get("toolCall")
        call = call if isinstance(call, dict) else {}
        title = call.get("title") or call.get("toolCallId") or "a tool call"
        choices = [
            {"optionId": o.get("optionId"), "name": o.get("name"), "kind": o.get("kind")}
            for o in options
        ]
        return Request(
            kind="approval",
            prompt=f"The agent asks permission for: {str(title)[:200]}",
            data={"choices": choices, "toolCall": call},
        )

    @staticmethod
    def _choice(answer: Answer, options: list[dict[str, Any]]) -> str | None:
        if not answer.ok:
            return _pick(options, "reject")
        wanted = (answer.data or {}).get("optionId")
        if any(o.get("optionId") == wanted for o in options) and isinstance(wanted, str):
            return wanted
        return _pick(options, "allow")

    # -- the session -----------------------------------------------------------------

    async def _new_session(self) -> None:
        self.session_id = None
        result = await self.rpc.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        session = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session, str):
            raise ACPError("session/new answered without a sessionId")
        self.sessions += 1
        self.session_id = session
        self._warm[session] = []
        if self.options.mode is not None:
            await self.rpc.request(
                "session/set_mode", {"sessionId": session, "modeId": self.options.mode}
            )

    async def _handshake(self) -> None:
        with trio.fail_after(HANDSHAKE_BOUND):
            info = await self.rpc.request(
                "initialize",
                {
                    "protocolVersion": self.options.protocol_version,
                    "clientCapabilities": {
                        "fs": {"readTextFile": False, "writeTextFile": False},
                        "terminal": False,
                    },
                },
            )
            self.agent_info = info if isinstance(info, dict) else {}
            await self._new_session()

    async def generate(self, request: Any) -> dict[str, Any]:
        """One model turn: the new part of *request*'s transcript as one ``session/prompt``
        (see the module docs); ``{"content": reply}``. Turns are serialised."""
        messages = request.messages if hasattr(request, "messages") else request["messages"]
        async with self._lock:
            if not self.alive:
                raise ACPError(self.rpc.why or "the ACP agent was stopped")
            items = _items(messages)
            # The warm session that has seen the longest prefix of this transcript.
            best: str | None = None
            for session, seen in self._warm.items():
                extends = len(items) > len(seen) and items[: len(seen)] == seen
                if extends and (best is None or len(seen) > len(self._warm[best])):
                    best = session
            if best is None:
                with trio.fail_after(HANDSHAKE_BOUND):
                    await self._new_session()
                assert self.session_id is not None
                best = self.session_id
            # Until the turn completes, what the session has seen is unknown: not warm.
            seen = self._warm.pop(best)
            self.session_id = best
            reply = await self._prompt(_render(items[len(seen) :]))
            self._warm[best] = [*items, ("assistant", reply)]
            while len(self._warm) > MAX_WARM_SESSIONS:
                del self._warm[next(iter(self._warm))]  # the least recently used
            return {"content": reply}

    async def _prompt(self, text: str) -> str:
        assert self.session_id is not None
        turn = self._turn = _Turn(self.options.permission_timeout)
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        call = await self.rpc.start("session/prompt", params)
        try:
            with turn.scope:
                await self.rpc.result(call)
                return "".join(turn.chunks)
            # The silence deadline passed, or the reply grew too long: end the turn.
            await self._end_turn(call)
            if turn.overflow:
                raise ACPError(f"the agent's reply passed {MAX_REPLY_CHARS} characters")
            raise ACPPermissionTimeoutError(
                f"acp: turn hung waiting on a reply for {self.options.permission_timeout} s"
            )
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._end_turn(call)
            raise
        finally:
            self.rpc.forget(call)
            turn.end_asks()
            self._turn = None

    async def _end_turn(self, call: Any) -> None:
        """``session/cancel``, then :data:`CANCEL_GRACE` for the prompt's answer; an agent
        that does not give it is stopped (run shielded by the caller on a cancel)."""
        assert self._turn is not None
        self._turn.end_asks()  # the spec: pending permissions answer "cancelled"
        with trio.move_on_after(CANCEL_GRACE):
            await self.rpc.notify("session/cancel", {"sessionId": self.session_id})
            with contextlib.suppress(ACPError):
                await self.rpc.result(call)
            return
        logger.warning("the ACP agent did not end a cancelled turn; stopping it")
        await self.stop(graceful=False)

    async def stop(self, *, graceful: bool = True) -> None:
        """Stop the agent and its whole process tree (bounded, shielded); idempotent."""
        with trio.CancelScope(shield=True):
            process = self.tree.process
            if graceful and not self._stopped:
                with contextlib.suppress(
                    trio.ClosedResourceError, trio.BrokenResourceError, OSError
                ):
                    assert process.stdin is not None
                    await process.stdin.aclose()
                with trio.move_on_after(EOF_GRACE):
                    await process.wait()
            self._stopped = True
            await self.tree.stop(TERM_GRACE if graceful else None, 0.5)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(
                        trio.ClosedResourceError, trio.BrokenResourceError, OSError
                    ):
                        await pipe.aclose()


@contextlib.asynccontextmanager
async def open_acp(
    options: ACPOptions,
    *,
    wait_for: WaitFor | None = None,
    on_update: OnUpdate | None = None,
) -> AsyncIterator[ACPModel]:
    """Start the ACP agent of *options* and yield it, handshake done (see the module
    docs); leaving the block stops its whole process tree. *wait_for* decides
    permission requests; *on_update* gets every ``session/update`` of the session (a
    dict, as the agent sent it), thoughts and tool calls included. :class:`ACPError`
    when the agent cannot be started or the handshake fails."""
    env = {**os.environ, **(options.env or {})}
    try:
        tree = await open_tree(
            [options.command, *options.args],
            linger=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=options.cwd,
        )
    except OSError as exc:
        raise ACPError(f"cannot start the ACP agent {options.command!r}: {exc}") from exc
    # No await until the try: a cancel in between would leak the process.
    acp = ACPModel(options, tree, wait_for, on_update)
    try:
        # The nursery is hidden: its caller sees the exception it expects, not a group.
        with collapse_groups():
            async with trio.open_nursery() as nursery:
                await nursery.start(acp.rpc.serve)
                try:
                    await acp._handshake()
                except TimeoutError:
                    await acp.stop(graceful=False)
                    raise ACPError(
                        f"the ACP agent did not finish its handshake in {HANDSHAKE_BOUND} s"
                    ) from None
                try:
                    yield acp
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        await acp.stop()
