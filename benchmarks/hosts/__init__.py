"""Host processes for scenarios 4-7: identical actions on our host and on the peer's.

Each host prints ``url=<ws url> pid=<pid>`` on one stdout line, then serves until its
standard input is closed. Actions (raw JSON input, no schema, so neither side validates):

- ``echo``: returns its input.
- ``stubborn``: reports progress 1 (so the gateway knows it started), then sleeps
  :data:`STUBBORN_HOLD_S` while ignoring cancellation, then returns.
- ``hold``: reports progress 50, then waits until ``release`` is invoked.
- ``release``: releases every ``hold`` invocation.
- ``storm``: sends ``input["n"]`` progress updates; every tenth one goes *backwards*
  (percent - 5) so that the host's never-decreasing ceiling is exercised.
"""

STUBBORN_HOLD_S = 2.0


def storm_percent(i: int, n: int) -> int:
    """The percent the ``storm`` handler asks for at step *i* of *n* (sometimes lower)."""
    p = i * 100 // n
    return p - 5 if i % 10 == 9 else p
