"""``python -m toolnexus_trio ui``: the agent of ``run`` in a local web page.

The toolkit is ``run``'s (``--config`` MCP servers, ``--skills``, the builtins confined
to the current directory; bash, write, edit and apply_patch ask first, answered with
the page's Approve / Deny unless ``--yes``). The first line of stdout is the page's
URL; the rest goes to stderr. With ``--store FILE`` (SQLite) an approval is durable:
the pending run is saved there and any ``ui`` sharing the file can answer it.
Ctrl-C stops the server and every run in it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import trio

from ._ask import add_model_options, run_guarded
from ._log import terminal_logging
from ._run import _add_toolkit_options, _checked_options, _client_options, _toolkit


def add_ui_command(commands: Any, port_type: Any) -> None:
    """Register ``ui`` on the CLI's subparsers (*commands*)."""
    ui = commands.add_parser(
        "ui",
        help="the agent of run in a local web page (and its AG-UI endpoint at /agui)",
        description=(
            "Serve one page on 127.0.0.1 (its URL is the first line of stdout): chat with "
            "streamed answers, every tool call with its arguments and result, Approve / "
            "Deny for bash, write, edit and apply_patch, the live agent tree with its "
            "budgets, Interrupt per agent and Stop. POST /agui is the AG-UI endpoint."
        ),
    )
    _add_toolkit_options(ui)
    add_model_options(ui)
    ui.add_argument("--port", type=port_type, default=0, help="port on 127.0.0.1 (default: any)")
    ui.add_argument(
        "--store",
        metavar="FILE",
        help="a SQLite file for durable approvals: a pending run is saved there and "
        "answered by whichever server sharing the file gets the resume",
    )


def main_ui(args: argparse.Namespace) -> int:
    """Run the ``ui`` command; returns the exit code."""
    from ..ui import AguiAgent, UiServing

    with terminal_logging() as log:
        options = _checked_options(args, confirm=not args.yes)
        if options is None:
            return 2

        async def serve() -> int:
            async with contextlib.AsyncExitStack() as stack:
                toolkit = await stack.enter_async_context(_toolkit(options, log))
                store = None
                if args.store is not None:
                    from ..stores import SqliteConversationStore

                    store = await stack.enter_async_context(SqliteConversationStore(args.store))
                llm = _client_options(args, max_turns=args.max_turns)
                agent = AguiAgent(llm, toolkit.tools(), system_prompt=args.system, store=store)
                served = await stack.enter_async_context(UiServing(agent, "127.0.0.1", args.port))
                print(served.url, flush=True)
                print("serving the web UI; Ctrl-C stops it", file=sys.stderr, flush=True)
                await trio.sleep_forever()  # until Ctrl-C cancels it
            raise AssertionError("unreachable")  # sleep_forever only ends by raising

        return run_guarded(serve)
