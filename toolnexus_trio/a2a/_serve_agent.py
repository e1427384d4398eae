"""An agent served over A2A (SPEC §7B for a §7D agent): :func:`serve`.

The a2a family sits below the agent runtime, so this side never imports it: it serves
anything shaped like :class:`ServedAgent` (a name, a description and ``session()``),
and ``Agent.serve`` (in ``toolnexus_trio.agents``) hands it one. The card carries one
skill, the agent itself (its team is how it works, not what a caller picks); each A2A
task is one session (one runtime, one ``run``) in the fulfilment's cancel scope, so
``CancelTask`` cancels the agent's running turn and every descendant's model call and
tool with it.

A result that is ``pending`` (a §10 request, e.g. an approval nobody in the tree
answers) puts the task in ``input-required``, as A2A lets a task wait for its caller:
the session stays open, and a ``SendMessage`` naming the task (``message.taskId``)
answers the request (:func:`answer_of`) and resumes the same tree. No answer within
``input_timeout_ms`` fails the task.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol

import attrs
import trio

from .._wire import Answer, Request
from ._server import A2AServeConfig, A2AServer, OnTask, _Rpc
from ._serving import A2AServing
from ._wire import INVALID_PARAMS, part_texts, text_parts

DEFAULT_INPUT_TIMEOUT_MS: Final = 600_000.0
"""How long an ``input-required`` task waits for its answer (ten minutes)."""


class AgentSession(Protocol):
    """One task's run of a served agent: ``run(prompt)`` then, while its result is
    ``pending``, ``resume(answer)`` (the same tree, answered)."""

    async def run(self, prompt: str, /) -> Any:
        """Run the agent on *prompt*; the result has ``status``, ``text`` and ``pending``."""
        ...

    async def resume(self, answer: Answer, /) -> Any:
        """Answer the pending request; the result as for :meth:`run`."""
        ...


class ServedAgent(Protocol):
    """What :func:`serve` serves: ``name`` and ``description`` (the card's defaults and
    its one skill) and ``session()``, an async context manager that holds one task's
    runtime and gives an :class:`AgentSession`. A result's ``status`` decides the task:
    ``"done"`` completed (``text`` the artifact), ``"pending"`` input-required (its
    ``pending`` request asked of the caller), anything else failed (``text`` why)."""

    @property
    def name(self) -> str:
        """The agent's name: the card's name and its skill's id."""
        ...

    @property
    def description(self) -> str:
        """What the agent does: the card's and the skill's description."""
        ...

    def session(self) -> AbstractAsyncContextManager[AgentSession]:
        """Open the runtime one task runs in (closed, and cancelled, with the task)."""
        ...


class PendingRun(Exception):
    """A served agent's run ended waiting for an answer that never came."""


@attrs.define
class _Waiting:
    task: dict[str, Any]
    request: Request
    answer: Answer | None = None
    given: trio.Event = attrs.field(factory=trio.Event)


class AgentA2AServer(A2AServer):
    """An :class:`A2AServer` whose tasks run a :class:`ServedAgent` (no toolkit).

    A run that ends ``pending`` puts the task in ``input-required`` (the request's
    prompt as the status message, its wire form in the message's ``metadata.request``)
    for up to *input_timeout_ms*; a ``SendMessage`` whose message names the task
    (``taskId``) answers it and the same tree resumes.
    """

    def __init__(
        self,
        agent: ServedAgent,
        config: A2AServeConfig,
        on_task: OnTask | None = None,
        *,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        input_timeout_ms: float = DEFAULT_INPUT_TIMEOUT_MS,
    ) -> None:
        if not callable(getattr(agent, "session", None)):
            raise TypeError("serve() needs an agent with session() (a ServedAgent)")
        # The agent is not a loop client; run_task below runs it, never client.run.
        super().__init__(
            None,
            _NoClient(),
            config,
            on_task,
            host=host,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
        )
        self.agent = agent
        self.input_timeout_ms = input_timeout_ms
        self._waiting: dict[str, _Waiting] = {}
        if config.description is None:
            self.config = _with_description(config, agent.description)

    @property
    def default_name(self) -> str:
        """The agent's name."""
        return self.agent.name

    def card_skills(self) -> list[dict[str, str]]:
        """One skill: the agent itself."""
        name = self.agent.name
        return [{"id": name, "name": name, "description": self.agent.description}]

    async def run_task(self, task: dict[str, Any], text: str, skill: str | None) -> Any:
        """One session: ``run(text)``, then a ``resume`` per answered request."""
        async with self.agent.session() as session:
            result = await session.run(text)
            while getattr(result, "status", None) == "pending":
                request = getattr(result, "pending", None)
                if not isinstance(request, Request):
                    break
                result = await session.resume(await self._ask(task, request))
        return result

    async def _ask(self, task: dict[str, Any], request: Request) -> Answer:
        waiting = _Waiting(task, request)
        prompt = request.prompt if request.url is None else f"{request.prompt}\n{request.url}"
        task["status"] = {
            "state": "input-required",
            "message": {
                "role": "agent",
                "messageId": str(uuid.uuid4()),
                "parts": text_parts(prompt, "0.3"),
                "kind": "message",
                "metadata": {"request": request.to_json()},
            },
        }
        self._waiting[task["id"]] = waiting
        try:
            await self.store.save(task)
            with trio.move_on_after(self.input_timeout_ms / 1000):
                await waiting.given.wait()
        finally:
            self._waiting.pop(task["id"], None)
        if waiting.answer is None:
            raise PendingRun(
                f"no answer to the agent's {request.kind} {request.prompt!r} "
                f"within {self.input_timeout_ms:g} ms"
            )
        return waiting.answer

    async def _send(self, params: dict[str, Any], sent: trio.Event | None) -> dict[str, Any]:
        message = params.get("message")
        task_id = message.get("taskId") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(task_id, str) or not task_id:
            return await super()._send(params, sent)
        waiting = self._waiting.get(task_id)
        if waiting is None:
            task = await self._get({"id": task_id})
            state = task["status"].get("state")
            raise _Rpc(INVALID_PARAMS, f"task {task_id} is {state}, not waiting for input")
        answer = answer_of(waiting.request, message)  # a bad answer leaves it waiting
        # Claimed before the first await: one answer per request. The task is saved
        # "working" before the run resumes, so no later save of the run is overwritten.
        del self._waiting[task_id]
        waiting.answer = answer
        waiting.task["status"] = {"state": "working"}
        try:
            await self.store.save(waiting.task)
        finally:
            waiting.given.set()
        return dict(waiting.task)


_YES: Final = frozenset({"yes", "y", "ok", "approve", "approved", "allow"})
_NO: Final = frozenset({"no", "n", "deny", "denied", "decline", "declined", "reject"})


def answer_of(request: Request, message: dict[str, Any]) -> Answer:
    """The :class:`Answer` a follow-up *message* gives *request*: a data part shaped like
    an Answer (``{"ok": true|false, "data"?, "reason"?}``), else its text: yes/no words
    for any request, and for a request that is not an ``approval``, any other text
    (``ok`` with ``data={"text": ...}``)."""
    parts = message.get("parts")
    for part in parts if isinstance(parts, list) else []:
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and "ok" in data:
            try:
                return Answer.from_json({**data, "id": request.id})
            except ValueError as exc:
                raise _Rpc(INVALID_PARAMS, f"the answer's data part: {exc}") from None
    text = "\n".join(part_texts(parts)).strip()
    word = text.lower().rstrip(".!")
    if word in _YES:
        return Answer(request.id, True)
    if word in _NO:
        return Answer(request.id, False, reason="declined")
    if text and request.kind != "approval":
        return Answer(request.id, True, data={"text": text})
    raise _Rpc(
        INVALID_PARAMS,
        f"answer the {request.kind} with yes or no, or a data part {{'ok': true|false}}",
    )


class _NoClient:
    async def run(self, prompt: str, toolkit: Any = None, /) -> Any:
        raise AssertionError("an agent's A2A server runs the agent, not a client")


def _with_description(config: A2AServeConfig, description: str) -> A2AServeConfig:
    return attrs.evolve(config, description=description)


def serve(
    agent: ServedAgent,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    a2a: A2AServeConfig | None = None,
    on_task: OnTask | None = None,
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    input_timeout_ms: float = DEFAULT_INPUT_TIMEOUT_MS,
) -> A2AServing:
    """Serve *agent* as an A2A agent on hypercorn's Trio worker: ``async with
    serve(agent) as served:`` (or ``await nursery.start(serve(agent))``).

    The card (``served.card_url``) is named after the agent (``a2a.name`` overrides),
    describes it with its description and has one skill, the agent; each task is one
    ``agent.session()`` (``CancelTask`` cancels it), ``input-required`` while a pending
    request waits for the caller's answer (at most *input_timeout_ms*); *on_task*
    hears each end. *a2a*'s
    ``store``, ``version``, ``provider`` and bounds apply as for ``Toolkit.serve``; a
    *host* that is not loopback needs ``allow_remote=True``. Needs hypercorn (the
    ``a2a`` extra). ``Agent.serve`` calls this with the agent and its runtime options.
    """
    server = AgentA2AServer(
        agent,
        a2a if a2a is not None else A2AServeConfig(),
        on_task,
        host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        input_timeout_ms=input_timeout_ms,
    )
    return A2AServing(server, host, port, allow_remote=allow_remote)
