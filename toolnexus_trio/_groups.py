"""The one ExceptionGroup policy for context managers that hide a nursery.

APIs whose concurrency is the contract (a turn running several tools) let groups
propagate. A context manager that merely *hides* a background task uses
:func:`collapse_groups` so its caller sees the exception it would expect:

1. ``KeyboardInterrupt`` / ``SystemExit`` anywhere in the group win.
2. If every leaf is ``trio.Cancelled``, one ``Cancelled`` is re-raised.
3. If exactly one non-``Cancelled`` leaf exists, it is re-raised.
4. Otherwise the group itself propagates: several real failures are never
   silently reduced to one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


def leaf_exceptions(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    """Every non-group exception inside *group*, depth first."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from leaf_exceptions(exc)
        else:
            yield exc


def reraise_single(group: BaseExceptionGroup[BaseException]) -> None:
    """Raise the one exception *group* stands for, or *group* itself (see module doc)."""
    leaves = list(leaf_exceptions(group))
    for fatal in (KeyboardInterrupt, SystemExit):
        for leaf in leaves:
            if isinstance(leaf, fatal):
                raise leaf
    real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if not real and leaves:
        raise leaves[0]
    if len(real) == 1:
        raise real[0]
    raise group


@contextmanager
def collapse_groups() -> Iterator[None]:
    """Apply :func:`reraise_single` to any group escaping the ``with`` body."""
    try:
        yield
    except BaseExceptionGroup as group:
        reraise_single(group)
