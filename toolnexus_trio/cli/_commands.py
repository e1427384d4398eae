"""``python -m toolnexus_trio host`` and ``... gateway``, and the Ctrl-C policy of every command."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from .._groups import collapse_groups
from .._names import unique_tool_names

if TYPE_CHECKING:
    # The Tesseron family is imported by the two commands that use it: every other
    # command (``serve --stdio``, ``ask``, ``run``) imports this module for its Ctrl-C
    # policy, and start-up is what an MCP client waits for (issue 39).
    from ..gateway import GatewaySession
    from ..tesseron import TesseronHost

EXIT_INTERRUPTED: Final = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells report it."""

GOODBYE: Final = "interrupted (Ctrl-C): stopped cleanly, goodbye"


async def until_interrupted(main: Callable[[], Awaitable[int]]) -> int:
    """Run *main*; the first Ctrl-C cancels it and returns :data:`EXIT_INTERRUPTED`.

    SIGINT is turned into a cancellation instead of a ``KeyboardInterrupt`` raised at
    an arbitrary point, so every ``async with`` unwinds normally (the host removes its
    manifest, the gateway closes its connection). The handler is restored as soon as
    the first signal arrives: a second Ctrl-C during a slow cleanup interrupts as usual.
    """
    interrupted = False
    code = 1
    async with trio.open_nursery() as nursery:

        async def watch(*, task_status: trio.TaskStatus[None]) -> None:
            nonlocal interrupted
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                task_status.started()
                async for _ in signals:
                    break
            interrupted = True
            nursery.cancel_scope.cancel(reason="Ctrl-C")

        await nursery.start(watch)
        code = await main()
        nursery.cancel_scope.cancel()
    if interrupted:
        print(GOODBYE, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return code


def stopped_by_sigterm() -> AbstractAsyncContextManager[trio.CancelScope]:
    """Run the block until it ends or SIGTERM arrives (a client closing a stdio server
    sends it), which stops it as Ctrl-C does: everything inside unwinds normally, so what
    it started (a toolkit's MCP servers, host connections) is stopped, not orphaned.
    An exception from the block comes out as itself, not in a group."""
    return stopped_by_signal(signal.SIGTERM)


@asynccontextmanager
async def stopped_by_signal(signum: int) -> AsyncIterator[trio.CancelScope]:
    """Run the block until it ends or *signum* arrives, which cancels only the block
    (its scope, yielded: ``cancelled_caught`` says whether the signal stopped it).

    While the block runs, its receiver replaces the signal's previous handler (for
    SIGINT: :func:`until_interrupted`'s), which is back once the block is over: so
    ``run``'s Ctrl-C cancels the turn in flight, and at the prompt the whole command.
    An exception from the block comes out as itself, not in a group."""
    with trio.open_signal_receiver(signum) as signals, trio.CancelScope() as scope:

        async def on_signal() -> None:
            async for _ in signals:
                scope.cancel()

        with collapse_groups():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(on_signal)
                yield scope
                nursery.cancel_scope.cancel()


def run_command(main: Callable[[], Awaitable[int]]) -> int:
    """``trio.run(until_interrupted, main)``; a stray ``KeyboardInterrupt`` is the goodbye too."""
    try:
        with collapse_groups():
            return trio.run(until_interrupted, main)
    except KeyboardInterrupt:  # Ctrl-C before the handler is in place, or a second one
        print(GOODBYE, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


async def run_host(port: int, publish: bool) -> int:
    """Serve the todo app until interrupted, printing its URL and claim codes.

    A port that cannot be bound is one ``error: ...`` line and exit 1.
    """
    from ..tesseron import DEFAULT_MANIFEST_DIR
    from ._todo import build_todo_app

    app = build_todo_app()
    manifest_dir = DEFAULT_MANIFEST_DIR if publish else None
    try:
        # listen() hides a nursery: one failure comes out as itself, not as a group.
        with collapse_groups():
            async with app.listen(port=port, manifest_dir=manifest_dir) as host:
                await _serve(host, publish)
    except (OSError, ValueError) as exc:
        print(f"error: could not serve the todo host on port {port}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(host: TesseronHost, publish: bool) -> None:
    from ..tesseron import Claimed, Disconnected, Welcome

    print(f"todo host listening on {host.url}", flush=True)
    if publish:
        print("instance manifest published for gateways to discover", flush=True)
    print("waiting for a gateway (Ctrl-C to stop)", flush=True)
    async with host.events() as events:
        async for event in events:
            if isinstance(event, Welcome):
                code = event.claim_code or "(resumed: no code needed)"
                print(f"gateway connected; claim code: {code}", flush=True)
            elif isinstance(event, Claimed):
                print(f"claimed by {event.agent.name}", flush=True)
            elif isinstance(event, Disconnected):
                print("gateway disconnected; waiting for the next dial", flush=True)


async def run_gateway(url: str) -> int:
    """Dial *url* and list the tools its actions would become; it does not claim.

    Every failure is one ``error: ...`` line on stderr: exit 2 for a refused URL, 1
    when the host cannot be reached or its hello is refused.
    """
    from ..gateway import Gateway
    from ..tesseron import ActionError

    try:
        # The Gateway hides a nursery: one failure comes out as itself, not as a group.
        with collapse_groups():
            async with Gateway() as gateway:
                session = await gateway.connect(url)
                _print_session(session)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ActionError as exc:
        print(f"error: refused the hello of the Tesseron host at {url}: {exc}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as exc:  # ConnectionError included
        print(f"error: could not reach a Tesseron host at {url}: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_session(session: GatewaySession) -> None:
    app_id = session.app.id
    print(f"connected to '{session.app.name}' ({app_id}), session {session.session_id}")
    print(f"claim code: {session.claim_code} (type it into your agent to claim the session)")
    # The names an agent would see: sanitized as the gateway does (toolnexus_trio._names).
    names = unique_tool_names(f"{app_id}__{action.name}" for action in session.actions)
    for action in session.actions:
        name = names[f"{app_id}__{action.name}"]
        shown = name if name == f"{app_id}__{action.name}" else f"{name} (action {action.name!r})"
        print(f"\n{shown}: {action.description}")
        print("  input schema: " + json.dumps(action.input_schema))
    resources = ", ".join(r.name for r in session.resources) or "(none)"
    print(f"\nresources: {resources}")
