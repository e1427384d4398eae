"""Fallback and hedged requests across providers (``ClientOptions.fallback``), issue 38.

:class:`FallbackTurns` is a :class:`~toolnexus_trio.loop._turns.TurnSource` over one
:class:`~._source.HttpTurns` per provider (the client's own first, then each fallback),
each with its own pool, key and retries.

Without ``hedge_after_ms`` the providers are tried one after the other: a call that
fails for good (its retries spent) moves on to the next when ``fallback_on`` says so
(by default: a connection error, a 5xx or a 429). A streamed call that already sent
text to the consumer never moves on (the consumer would see two answers).

With ``hedge_after_ms`` the attempts race, in one nursery, each in its own
``CancelScope``: the next provider starts when the current one has not begun to
answer (no status line) within the delay, or at once when it failed and the failure
moves on. The next attempt waits in a task of its own from the moment the current one
starts, and builds its call (body, encoding) just before its delay is up, so that at
the delay only the posting is left; its wait ends on time (:func:`_until`), not up to
a millisecond late as a plain Trio timer does. The first attempt whose answer begins
wins: it cancels the other scopes, which aborts their requests on the socket (their
connections are closed) and ends the attempts still waiting, and only it reads its
body and streams. No attempt outlives the turn: the nursery closes before the turn
returns, and a cancel of the run cancels every attempt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx2
import trio

from .._http_client import safe_url
from .._toolkit import Toolkit
from ..loop._results import GenerateError, GenerateRequest, TranslateResult
from ..loop._turns import Emit, TranslateCall, Turn
from ._options import ClientOptions
from ._source import HttpTurns, Prepared

Observe = Callable[[dict[str, Any]], None]

_OS_TICK = 0.001
"""How coarse a Trio timer is: CPython's ``epoll.poll`` (and kqueue's) waits whole
milliseconds, rounded up, so a timer wakes up to this late after the loop last went idle."""
_POLL_LIMIT = 0.003
"""The most real time :func:`_until` polls, whatever the Trio clock does (a ``MockClock``
stands still meanwhile)."""


async def _until(deadline: float, go: trio.Event, *, polled: bool) -> None:
    """Until the Trio clock reaches *deadline*, or *go* is set. *polled*: the last
    stretch (at most a tick or two) in scheduler checkpoints, on time, other tasks
    running meanwhile; else asleep until a tick before the deadline first.

    A hedge's next request is meant to start at its delay, and a plain timer starts it
    up to :data:`_OS_TICK` late; the price is at most a tick or two of polling per hedge.
    """
    if not polled:
        with trio.move_on_at(deadline - _OS_TICK):
            await go.wait()
    stop = time.perf_counter() + _POLL_LIMIT
    while not go.is_set() and trio.current_time() < deadline and time.perf_counter() < stop:
        await trio.lowlevel.checkpoint()
    if not go.is_set() and trio.current_time() < deadline:  # a clock of its own
        with trio.move_on_at(deadline):
            await go.wait()


def default_fallback_on(error: GenerateError) -> bool:
    """Whether a failed call moves on by default: a 5xx, a 429, or a connection error."""
    status = error.status
    if status is not None:
        return status == 429 or 500 <= status <= 599
    return isinstance(error.__cause__, httpx2.TransportError)


@attrs.define
class _Attempt:
    index: int
    started: float
    status: str = "cancelled"
    error: str | None = None
    ms: float = 0.0


class FallbackTurns:
    """Model turns from the first provider that answers (see the module docstring)."""

    def __init__(self, options: ClientOptions) -> None:
        chain = [options, *options.fallback]
        for i, other in enumerate(options.fallback):
            if not isinstance(other, ClientOptions):
                raise TypeError(f"fallback[{i}] must be ClientOptions, not {type(other).__name__}")
            if other.fallback:
                raise ValueError(f"fallback[{i}] has a fallback of its own; list them all in one")
        hedge = options.hedge_after_ms
        if hedge is not None and (
            isinstance(hedge, bool) or not isinstance(hedge, int) or hedge < 0
        ):
            raise ValueError(f"hedge_after_ms must be an integer >= 0, not {hedge!r}")
        # Nothing is open yet (each pool is made on first use): a refused option leaks none.
        self.sources = [HttpTurns(opts) for opts in chain]
        self.chain = chain
        self.hedge = None if hedge is None else hedge / 1000
        self.moves_on = options.fallback_on or default_fallback_on
        self.observe: Observe | None = None
        """The client's metric sink (set by :func:`~toolnexus_trio.create_client`)."""

    def tools_for(self, toolkit: Toolkit | None) -> list[dict[str, Any]]:
        """OpenAI-shaped: each provider's wire declares them its own way."""
        return toolkit.to_openai() if toolkit is not None else []

    async def turn(self, request: GenerateRequest, emit: Emit | None) -> Turn:
        """One model turn from the first provider that answers."""
        if self.hedge is None or len(self.sources) == 1:
            return await self._in_order(request, emit)
        return await self._hedged(request, emit, self.hedge)

    async def translate(self, call: TranslateCall) -> TranslateResult:
        """§11 translate on the providers in order (never hedged: one call each)."""
        last = len(self.sources) - 1
        for i, source in enumerate(self.sources):
            attempt = _Attempt(i, trio.current_time())
            try:
                result = await source.translate(self._call(i, call))
            except GenerateError as exc:
                self._settle(attempt, "error", exc)
                if i == last or not self.moves_on(exc):
                    raise
                continue
            except BaseException:
                self._settle(attempt, "cancelled")
                raise
            self._settle(attempt, "ok")
            return result
        raise AssertionError("unreachable: the last provider's failure is raised")

    async def aclose(self) -> None:
        """Close every provider's pool (each is closed even if another fails)."""
        for source in self.sources:
            with trio.move_on_after(1, shield=True):
                await source.aclose()

    # -- in order -----------------------------------------------------------

    async def _in_order(self, request: GenerateRequest, emit: Emit | None) -> Turn:
        sent = False

        async def guarded(event: dict[str, Any]) -> None:
            nonlocal sent
            sent = True
            assert emit is not None
            await emit(event)

        last = len(self.sources) - 1
        for i, source in enumerate(self.sources):
            attempt = _Attempt(i, trio.current_time())
            try:
                turn = await source.turn(self._request(i, request), guarded if emit else None)
            except GenerateError as exc:
                self._settle(attempt, "error", exc)
                await self._announce([attempt], emit)
                if sent or i == last or not self.moves_on(exc):
                    raise
                continue
            except BaseException:
                self._settle(attempt, "cancelled")
                raise
            self._settle(attempt, "ok")
            await self._announce([attempt], emit)
            return attrs.evolve(turn, model=self._model(i, request))
        raise AssertionError("unreachable: the last provider's failure is raised")

    # -- hedged -------------------------------------------------------------

    async def _hedged(self, request: GenerateRequest, emit: Emit | None, delay: float) -> Turn:
        n = len(self.sources)
        stream = emit is not None
        scopes = [trio.CancelScope() for _ in range(n)]
        # go[i]: attempt i starts now, not at its deadline (the one before it failed and
        # the failure moves on).
        go = [trio.Event() for _ in range(n)]
        built = [0.0] * n  # how long each attempt took to build its call (real seconds)
        attempts: list[_Attempt] = []
        turns: dict[int, Turn] = {}
        errors: dict[int, GenerateError] = {}
        winner: int | None = None

        def claim(i: int) -> None:
            nonlocal winner
            if winner is None:
                winner = i
                for j, scope in enumerate(scopes):
                    if j != i:
                        scope.cancel(reason="another provider answered first")

        async def attempt(i: int, nursery: trio.Nursery, due: float) -> None:
            with scopes[i]:
                ready = None
                if i > 0:
                    ready = await self._ready(i, request, stream, due, built[i - 1], go[i])
                # The first starts with the call (its task's own start is not the
                # provider's delay), the others when they do.
                record = _Attempt(i, due if i == 0 else trio.current_time())
                attempts.append(record)
                if i + 1 < n:  # waits for its deadline, or go, or a winner's cancel
                    nursery.start_soon(attempt, i + 1, nursery, record.started + delay)
                try:
                    if ready is None:
                        began = time.perf_counter()
                        ready = await self.sources[i].prepare(self._request(i, request), stream)
                        built[i] = time.perf_counter() - began
                    turns[i] = await self.sources[i].send(ready, emit, on_head=lambda: claim(i))
                except GenerateError as exc:
                    errors[i] = exc
                    self._settle(record, "error", exc)
                    if self.moves_on(exc):
                        if i + 1 < n:
                            go[i + 1].set()
                    else:  # no more attempts start (those running may still answer)
                        for scope in scopes[len(attempts) :]:
                            scope.cancel(reason="a failure that does not move on")
                except BaseException:
                    self._settle(record, "cancelled")
                    raise
                else:
                    self._settle(record, "ok")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt, 0, nursery, trio.current_time())
        await self._announce(attempts, emit)
        if winner is not None and winner in turns:
            return attrs.evolve(turns[winner], model=self._model(winner, request))
        if winner is not None and winner in errors:
            raise errors[winner]
        # No answer began: the first failure that does not move on, else the last one.
        for i in sorted(errors):
            if not self.moves_on(errors[i]):
                raise errors[i]
        raise errors[max(errors)]

    async def _ready(
        self,
        i: int,
        request: GenerateRequest,
        stream: bool,
        deadline: float,
        lead: float,
        go: trio.Event,
    ) -> Prepared | None:
        """Wait until attempt *i* is due (its *deadline*, or *go*), its call built
        meanwhile: just ahead of the deadline (twice the previous build's time *lead*,
        plus a tick), so that the previous attempt's request goes out first and this
        one's goes out on time. Not when the provider has a ``body_transform``: user code
        runs only for a call that is made. ``None``: build it when it starts."""
        source = self.sources[i]
        if source.transform is not None:
            await _until(deadline, go, polled=False)
            return None
        with trio.move_on_at(deadline - _OS_TICK - 2 * lead):
            await go.wait()
        try:
            ready: Prepared | None = await source.prepare(self._request(i, request), stream)
        except GenerateError:
            ready = None  # built again when it starts, failing then as that attempt's error
        # Awake already: polled from here, unless a long build left more than two ticks.
        await _until(deadline, go, polled=trio.current_time() > deadline - 2 * _OS_TICK)
        return ready

    # -- helpers ------------------------------------------------------------

    def _model(self, i: int, request: GenerateRequest) -> str:
        return request.model if i == 0 else self.chain[i].model

    def _request(self, i: int, request: GenerateRequest) -> GenerateRequest:
        return request if i == 0 else attrs.evolve(request, model=self.chain[i].model)

    def _call(self, i: int, call: TranslateCall) -> TranslateCall:
        return call if i == 0 else attrs.evolve(call, model=self.chain[i].model)

    def _settle(self, record: _Attempt, status: str, error: Exception | None = None) -> None:
        if record.ms:
            return  # already settled
        record.status = status
        record.error = str(error) if error is not None else None
        record.ms = max((trio.current_time() - record.started) * 1000, 1e-9)
        if self.observe is not None:
            self.observe(self._event(record))

    def _event(self, record: _Attempt) -> dict[str, Any]:
        opts = self.chain[record.index]
        event: dict[str, Any] = {
            "event": "attempt",
            "index": record.index,
            "model": opts.model,
            "base_url": safe_url(opts.base_url),
            "status": record.status,
            "ms": record.ms,
        }
        if record.error is not None:
            event["error"] = record.error
        return event

    async def _announce(self, attempts: list[_Attempt], emit: Emit | None) -> None:
        if emit is None:
            return
        for record in attempts:
            event: Mapping[str, Any] = self._event(record)
            await emit({"type": "attempt", **{k: v for k, v in event.items() if k != "event"}})
