"""One way to open things: ``async with``, and a forgotten ``await`` or ``async with``
that says what to write instead of Python's own words.

Python's messages for these slips (``'coroutine' object does not support the
asynchronous context manager protocol``, ``object _AsyncGeneratorContextManager can't be
used in 'await' expression``, ``'coroutine' object has no attribute 'tools'``) name
neither our function nor the fix. :func:`opener` wraps an ``open_x`` context manager
function so that each slip is a :class:`TypeError` or :class:`AttributeError` showing
the line to write.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


class Opening(Generic[T]):
    """What an ``open_x(...)`` returns: an async context manager, for ``async with``.

    Awaiting it raises a :class:`TypeError`, and using an attribute of it (as if it
    were the opened object) an :class:`AttributeError`, each showing the
    ``async with`` line to write.
    """

    __slots__ = ("_call", "_cm", "_name")

    def __init__(self, cm: AbstractAsyncContextManager[T], call: str, name: str) -> None:
        self._cm = cm
        self._call = call
        self._name = name

    async def __aenter__(self) -> T:
        return await self._cm.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._cm.__aexit__(exc_type, exc, tb)

    def _write(self) -> str:
        return f"`async with {self._call}(...) as {self._name}:`"

    if not TYPE_CHECKING:  # hidden from type checkers, which should flag `await` here

        def __await__(self) -> NoReturn:
            raise TypeError(
                f"{self._call}(...) is not awaited: write {self._write()} "
                f"and use {self._name} inside the block"
            )

    def __getattr__(self, attr: str) -> NoReturn:
        # Only reached for names the class lacks: the caller took this for the object.
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(
            f"{self._call}(...) gives a context manager, not the {self._name}: write "
            f"{self._write()} and use {self._name}.{attr} inside the block"
        )

    def __repr__(self) -> str:
        return f"<{self._call}(...): use {self._write()}>"


def opener(
    name: str,
) -> Callable[[Callable[P, AbstractAsyncContextManager[T]]], Callable[P, Opening[T]]]:
    """Decorate an ``open_x`` context manager function (an ``asynccontextmanager``) so
    that it returns an :class:`Opening`; *name* is what the examples in its errors call
    the opened object (``toolkit``, ``runtime``)."""

    def decorate(fn: Callable[P, AbstractAsyncContextManager[T]]) -> Callable[P, Opening[T]]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Opening[T]:
            return Opening(fn(*args, **kwargs), fn.__name__, name)

        return wrapper

    return decorate


class AwaitOrEnter(Generic[T]):
    """What a ``create_x(...)`` returns: awaitable (``x = await create_x(...)``) and an
    async context manager (``async with create_x(...) as x:``, closed at the block's
    end). Used once. An attribute looked up on it (as if it were the object) raises an
    :class:`AttributeError` showing both lines; left unused, it warns as a coroutine
    never awaited would.
    """

    __slots__ = ("_build", "_call", "_cm", "_name", "_open", "_used")

    def __init__(
        self,
        call: str,
        name: str,
        build: Callable[[], Coroutine[Any, Any, T]],
        open_: Callable[[], AbstractAsyncContextManager[T]],
    ) -> None:
        self._call = call
        self._name = name
        self._build = build
        self._open = open_
        self._used = False
        self._cm: AbstractAsyncContextManager[T] | None = None

    def _take(self) -> None:
        if self._used:
            raise RuntimeError(f"{self._call}(...) is used once: call it again for another")
        self._used = True

    def __await__(self) -> Generator[Any, None, T]:
        self._take()
        return self._build().__await__()

    async def __aenter__(self) -> T:
        self._take()
        self._cm = self._open()
        return await self._cm.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._cm is None:
            raise RuntimeError(f"{self._call}(...) was not entered")
        return await self._cm.__aexit__(exc_type, exc, tb)

    def __getattr__(self, attr: str) -> NoReturn:
        # Only reached for names the class lacks: the caller took this for the object.
        if attr.startswith("__"):
            raise AttributeError(attr)
        call, name = self._call, self._name
        raise AttributeError(
            f"{call}(...) was neither awaited nor entered: write `{name} = await {call}(...)` "
            f"or `async with {call}(...) as {name}:`, then use {name}.{attr}"
        )

    def __del__(self) -> None:
        if not self._used:
            warnings.warn(
                f"{self._call}(...) was never awaited nor entered", RuntimeWarning, stacklevel=1
            )

    def __repr__(self) -> str:
        return f"<{self._call}(...): await it, or use it in `async with`>"
