"""Fair I/O without a scheduler pass per operation.

Trio's own stream methods are each a *checkpoint*: a cancel point and a schedule point,
even when the socket or pipe could serve them at once. On the request path that is a
trip through the scheduler (an ``epoll_wait`` and a run-queue pass) per read and per
write. The streams we own on that path (the direct HTTP connection and the stdio pipes
of an MCP server) check for a cancel before every operation, wait in Trio only when the
descriptor is not ready, and take a schedule point anyway once :data:`FAIR_EVERY`
operations in a row did not wait, so a peer that always has bytes ready cannot starve
the other tasks.
"""

from __future__ import annotations

from typing import Final

import trio

FAIR_EVERY: Final = 16
"""Operations in a row that did not wait before one yields to the scheduler anyway."""


class ReadyStreak:
    """Counts a stream's operations in a row that did not wait."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def waited(self) -> None:
        """The operation waited in Trio (a schedule point): the streak starts over."""
        self.count = 0

    async def done(self) -> None:
        """The operation finished without waiting: every :data:`FAIR_EVERY`-th in a row
        yields to the scheduler."""
        self.count += 1
        if self.count >= FAIR_EVERY:
            self.count = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
