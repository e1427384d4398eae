"""CancelToken: a cancellation request that drives real Trio cancel scopes.

A token is not a polled flag: every scope bound to it (the turn's nursery, a call's
own scope) is cancelled the moment :meth:`CancelToken.cancel` is called, so a tool
that merely awaits ``trio.sleep`` still stops promptly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


class CancelToken:
    """A per-turn (or per-run, or per-call) cancellation request.

    ``cancel()`` is synchronous and idempotent; call it from Trio code (from another
    thread, go through :func:`trio.from_thread.run_sync`).
    """

    __slots__ = ("_event", "_one", "_reason", "_scopes")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._event: trio.Event | None = None
        # The bound scopes: the first in `_one`, any more in the set, made only then
        # (an empty set is 216 bytes, and a run or a turn binds one scope: a thousand
        # conversations in flight hold two tokens each). `_scopes` is None once fired.
        self._one: trio.CancelScope | None = None
        self._scopes: set[trio.CancelScope] | tuple[()] | None = ()

    def cancel(self, reason: str | None = None) -> None:
        """Request cancellation; every bound scope is cancelled now. Later calls do nothing."""
        scopes = self._scopes
        if scopes is None:
            return
        self._scopes = None
        self._reason = reason
        one, self._one = self._one, None
        if one is not None:
            one.cancel(reason=reason)
        for scope in scopes:
            scope.cancel(reason=reason)
        if self._event is not None:
            self._event.set()

    @property
    def is_cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._scopes is None

    @property
    def reason(self) -> str | None:
        """The reason given to :meth:`cancel`, if any."""
        return self._reason

    async def wait_cancelled(self) -> None:
        """Return once the token is cancelled (at once if it already is)."""
        if self._scopes is None:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def attach(self, scope: trio.CancelScope) -> None:
        """Bind *scope* for the rest of this token's life (use for a scope the token outlives)."""
        scopes = self._scopes
        if scopes is None:
            scope.cancel(reason=self._reason)
        elif self._one is None:
            self._one = scope
        elif isinstance(scopes, set):
            scopes.add(scope)
        else:
            self._scopes = {scope}

    def detach(self, scope: trio.CancelScope) -> None:
        """Undo :meth:`attach` (a no-op once the token has fired)."""
        scopes = self._scopes
        if scopes is None:
            return
        if self._one is scope:
            self._one = None
        elif isinstance(scopes, set):
            scopes.discard(scope)

    @contextmanager
    def bound(self, scope: trio.CancelScope) -> Iterator[trio.CancelScope]:
        """Bind *scope* to this token for the ``with`` body: cancelling the token cancels it."""
        if self._scopes is None:
            scope.cancel(reason=self._reason)
            yield scope
            return
        self.attach(scope)
        try:
            yield scope
        finally:
            self.detach(scope)  # a no-op if the token fired meanwhile

    def __repr__(self) -> str:
        state = f"cancelled, reason={self._reason!r}" if self.is_cancelled else "active"
        return f"<CancelToken {state}>"
