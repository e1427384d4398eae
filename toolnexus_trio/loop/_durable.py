"""Durable approvals: :meth:`Client.answer` continues a stored pending run exactly once.

The order of :func:`answer` is what makes an answer impossible to replay and a crash
harmless:

1. load the thread's :class:`PendingState` and check the answers against it (a wrong
   answer id is refused here, before anything is consumed);
2. *take* it: one conditional update flips ``"pending"`` to ``"taken"`` and, in the
   same write, replaces the transcript with the *interrupted* outcome (each suspended
   call answered ``"interrupted: <prompt> ..."``), and records a token of the answers
   (:func:`_answer_token`), so that the retry of an attempt whose take committed as
   its connection broke is told so (``AlreadyAnswered.in_doubt``), not "another
   answer". Of two answers racing, in one process or two, exactly one take succeeds;
   the other raises :class:`AlreadyAnswered`;
3. resume the run (the approved calls run here, once);
4. save the real outcome over the interrupted one, marking the state ``"answered"``
   (or saving the new pending state if the resumed run suspended again).

A process killed anywhere in between leaves the thread either still answerable
(before 2) or with an outcome saved, interrupted or real (from 2 on): never both,
never neither. The approved calls run at most once; when the process died after the
take, the interrupted outcome says it may or may not have run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import trio

from .._cancel import CancelToken
from .._wire import Answer, Request
from ..stores._base import ConversationStore, PendingState, PendingStore, take_with_token
from ._conversation import _thread_lock
from ._results import Message, RunError, RunResult, RunTimeout

if TYPE_CHECKING:
    from .._toolkit import Toolkit
    from ._client import Client
    from ._turns import Emit

_SAVE_GRACE_S = 30.0
"""How long the outcome's save may take once the answer's scope is cancelled."""

_pause_hook: Callable[[str], Awaitable[None]] | None = None
"""Tests only: awaited at the named points of :func:`answer` (``"loaded"``, ``"taken"``,
``"resumed"``, ``"saved"``) so a test can kill the process exactly there."""


class AlreadyAnswered(RuntimeError):
    """The pending run was already answered, is being answered, or was superseded.

    ``status`` is the state found: ``"taken"``, ``"answered"`` or ``"superseded"``.
    Nothing ran for this answer. ``in_doubt`` is true when the state was taken by an
    earlier attempt of this same answer (the same answers to the same suspension)
    whose outcome its caller did not learn: a take that committed as its connection
    broke, or a process that stopped after its take. The answer is taken then, by that
    attempt, not by a competitor.
    """

    def __init__(self, id: str, status: str, *, in_doubt: bool = False) -> None:
        if status == "taken" and in_doubt:
            why = (
                "an earlier attempt of this same answer took it, and its outcome was "
                "unknown (its take committed as the connection broke, or its process "
                "stopped): the answer is now taken and will not run again; the thread "
                "holds that attempt's outcome, or the interrupted one"
            )
        else:
            why = {
                "taken": "another answer took it first (if that process stopped, the thread "
                "holds the interrupted outcome)",
                "answered": "its outcome is saved",
                "superseded": "the conversation moved on before it was answered",
            }.get(status, status)
        super().__init__(f"the pending run of {id!r} was already answered: {why}")
        self.id = id
        self.status = status
        self.in_doubt = in_doubt


class PendingExpired(RuntimeError):
    """Answers were given to requests past their ``expires_at``: they were refused.

    The run went on as if those requests had been declined (their calls got
    ``"declined/expired: <prompt>"``; the model decides what next) and its outcome is
    saved; :attr:`result` is it. ``request_ids`` names the refused answers.
    """

    def __init__(self, id: str, requests: list[Request], result: RunResult) -> None:
        prompts = "; ".join(repr(r.prompt) for r in requests)
        super().__init__(
            f"the pending run of {id!r} expired before it was answered ({prompts}): "
            "the answer was refused and the calls declined"
        )
        self.id = id
        self.request_ids = [r.id for r in requests]
        self.result = result


def _interrupted(halted: RunResult) -> list[Message]:
    """The transcript saved by the take: the outcome if the process dies before saving."""
    messages = list(halted.messages)
    for s in halted.suspended:
        messages[s.message_index] = {
            "role": "tool",
            "tool_call_id": s.id,
            "content": f"interrupted: {s.request.prompt} (answered, but the run stopped "
            "before its outcome was saved; the action may or may not have run)",
        }
    return messages


def is_expired(request: Request, now: datetime) -> bool:
    """Whether *request* is past its ``expires_at``.

    An ``expires_at`` that is not an RFC 3339 time with an offset counts as expired:
    a stale approval must not run because its deadline could not be read.
    """
    if request.expires_at is None:
        return False
    try:
        when = datetime.fromisoformat(request.expires_at)
    except ValueError:
        return True
    return when.tzinfo is None or when <= now


def _by_id(answers: Mapping[str, Answer] | Iterable[Answer]) -> dict[str, Answer]:
    items = answers.items() if isinstance(answers, Mapping) else ((None, a) for a in answers)
    out: dict[str, Answer] = {}
    for key, value in items:
        if not isinstance(value, Answer):
            raise TypeError(f"answers must be Answer objects, not {type(value).__name__}")
        out[value.id if key is None else key] = value
    return out


def _answer_token(id: str, key: str, answers: Mapping[str, Answer]) -> str:
    """What a take records so that a retry recognises its own in-doubt attempt: a
    digest of the thread, the suspension's key and the answers. The same answers to the
    same suspension give the same token, in any process; any other answer another."""
    document = [id, key, sorted((k, a.to_json()) for k, a in answers.items())]
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def _pause(point: str) -> None:
    if _pause_hook is not None:
        await _pause_hook(point)


async def _save_outcome(store: PendingStore, id: str, key: str, result: RunResult) -> None:
    state = PendingState.of(result) if result.status == "pending" else PendingState(key, "answered")
    # Shielded: once the calls ran, their outcome should replace the interrupted one
    # even if the caller is being cancelled; bounded, and if it does not finish the
    # interrupted outcome stays, which is consistent.
    with trio.move_on_after(_SAVE_GRACE_S, shield=True):
        await store.save_pending(id, result.messages, state)


async def answer(
    client: Client,
    store: ConversationStore,
    id: str,
    answers: Mapping[str, Answer] | Iterable[Answer],
    *,
    toolkit: Toolkit,
    cancel: CancelToken | None = None,
    emit: Emit | None = None,
) -> RunResult:
    """See :meth:`Client.answer`; *emit* gets the resumed run's §8 events (as
    :meth:`Client.stream`'s) as they happen."""
    if not isinstance(store, PendingStore):
        raise TypeError(
            f"{type(store).__name__} keeps no pending state: Client.answer needs a "
            "PendingStore (get_pending, save_pending, take_pending)"
        )
    by_id = _by_id(answers)
    async with _thread_lock(store, id):
        state = await store.get_pending(id)
        if state is None:
            raise LookupError(f"no pending run is stored under {id!r}")
        token = _answer_token(id, state.key, by_id)
        if state.status != "pending":
            raise AlreadyAnswered(id, state.status, in_doubt=state.taken_by == token)
        if state.result is None:
            raise ValueError(f"the pending state of {id!r} has no result: the store is damaged")
        halted = RunResult.from_json(state.result)
        requests = {s.request.id: s.request for s in halted.suspended}
        for key, given in by_id.items():
            if key not in requests or given.id != key:
                raise ValueError(f"answer {given.id!r} matches no suspended request of {id!r}")
        now = datetime.now(UTC)
        expired = [r for r in requests.values() if is_expired(r, now)]
        refused = [r for r in expired if r.id in by_id]
        effective = dict(by_id)
        for r in expired:
            effective[r.id] = Answer(r.id, False, reason="expired")
        await _pause("loaded")
        if not await take_with_token(store, id, state.key, _interrupted(halted), token):
            # Lost the take: to a competitor, or to an earlier attempt of ours whose
            # statement was still on its way when that attempt gave up on it.
            # (The status is "taken", as the take found it; the winner may be further.)
            now_state = await store.get_pending(id)
            mine = now_state is not None and now_state.taken_by == token
            raise AlreadyAnswered(id, "taken", in_doubt=mine)
        await _pause("taken")
        try:
            result = await client._resume(
                halted, effective, toolkit=toolkit, cancel=cancel, emit=emit
            )
        except (RunError, RunTimeout) as exc:
            # The calls ran; what the run produced before failing beats "interrupted".
            if exc.result is not None:
                await _save_outcome(store, id, state.key, exc.result)
            raise
        await _pause("resumed")
        await _save_outcome(store, id, state.key, result)
        await _pause("saved")
    if refused:
        raise PendingExpired(id, refused, result)
    return result
