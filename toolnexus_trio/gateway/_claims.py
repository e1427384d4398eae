"""Slowing down wrong claim codes (:meth:`Gateway.try_claim`).

A claim code is 6 characters of a 31-letter alphabet (about 887 million codes). An
agent told to guess (a prompt injection is enough) could try about a thousand a second
over stdio; this throttle makes that hopeless while a user who mistypes once or twice
never notices:

- the first :data:`FREE_MISSES` wrong codes in a row cost nothing;
- after that, each wrong code makes the *next check* wait: 1 s, then twice as long
  after every further miss, up to :data:`MAX_DELAY` (60 s), so at most about one guess
  a minute gets through (1,400 years to a 50% hit);
- checks run one at a time, in arrival order, so guesses sent side by side wait their
  turn; the wait comes before a check, so cancelling a waiting call learns nothing;
- a right code claims as soon as it is checked and resets the count, as do
  :data:`FORGET_AFTER` seconds without a miss. It is never refused for the misses
  before it (there is no lockout); it only waits out a delay already running.

Every wrong code is logged (without the code).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Final, TypeVar

import trio

from ..tesseron._errors import ActionError, TesseronErrorCode

_log = logging.getLogger("toolnexus_trio.tesseron.gateway")

FREE_MISSES: Final = 3
"""Wrong codes in a row that cost no delay."""
FIRST_DELAY: Final = 1.0
"""Seconds before the check after the first costly miss; doubled after each further one."""
MAX_DELAY: Final = 60.0
"""The longest wait before a check."""
FORGET_AFTER: Final = 900.0
"""Seconds without a wrong code after which the count starts again from zero."""

T = TypeVar("T")


def delay_after(misses: int) -> float:
    """Seconds the next check waits after *misses* wrong codes in a row."""
    if misses < FREE_MISSES:
        return 0.0
    return min(FIRST_DELAY * 2.0 ** (misses - FREE_MISSES), MAX_DELAY)


class ClaimThrottle:
    """The state of one gateway's claim checks (see the module docs)."""

    def __init__(self) -> None:
        self._lock = trio.Lock()  # checks one at a time, first come first served
        self._misses = 0
        self._last_miss = -math.inf
        self._next_check = -math.inf  # trio time before which no check runs

    @property
    def misses(self) -> int:
        """Wrong codes in a row so far."""
        return self._misses

    async def check(self, attempt: Callable[[], T]) -> T:
        """Run *attempt* (a synchronous claim) in turn; count an ``UNAUTHORIZED`` miss."""
        async with self._lock:
            await trio.sleep_until(self._next_check)
            now = trio.current_time()
            if now - self._last_miss > FORGET_AFTER:
                self._misses = 0
            try:
                result = attempt()
            except ActionError as exc:
                if exc.code == TesseronErrorCode.UNAUTHORIZED:
                    self._miss(now)
                raise
            self._misses = 0
            self._next_check = -math.inf
            return result

    def _miss(self, now: float) -> None:
        self._misses += 1
        self._last_miss = now
        delay = delay_after(self._misses)
        self._next_check = now + delay
        _log.warning(
            "wrong claim code (%d in a row); the next claim is checked in %g s",
            self._misses,
            delay,
        )
