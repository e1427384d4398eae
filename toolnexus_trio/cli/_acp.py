"""``python -m toolnexus_trio acp``: our agent for an editor, over ACP on stdio.

The editor (Zed, or any ACP client) runs the command and speaks JSON-RPC on its stdin
and stdout (:mod:`toolnexus_trio.acp._agent`). Stdout carries the protocol only: the
command moves its own stdout to stderr before it starts, so a stray ``print`` cannot
break a message; logs go to stderr, which editors show in their logs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ._ask import _one_line, add_model_options, run_guarded
from ._log import terminal_logging
from ._mcp import read_config_file
from ._run import _add_toolkit_options


def add_acp_command(commands: Any) -> None:
    """Register ``acp`` on the CLI's subparsers."""
    acp = commands.add_parser(
        "acp",
        help="be an ACP agent on stdio, for an editor (Zed, ...)",
        description=(
            "Speak the Agent Client Protocol on stdin/stdout: each editor session gets the "
            "builtins confined to its folder, its MCP servers, --config's and --skills; "
            "bash, write, edit and apply_patch ask the editor first (--yes: no)."
        ),
    )
    _add_toolkit_options(acp)
    add_model_options(acp)
    acp.add_argument(
        "--store",
        metavar="FILE",
        help="keep conversations in this SQLite file (enables session/load)",
    )


def main_acp(args: argparse.Namespace) -> int:
    """Run the ``acp`` command; returns the exit code."""
    from ..acp._agent import serve_acp
    from ..mcp._config import parse_mcp_config
    from ..models import ClientOptions
    from ..stores import SqliteConversationStore

    mcp = None
    if args.config:
        try:
            mcp = parse_mcp_config(read_config_file(args.config))
        except ValueError as exc:
            print(f"error: {_one_line(f'{args.config}: {exc}', 2000)}", file=sys.stderr)
            return 2
    options = ClientOptions(
        base_url=args.base_url,
        style=args.style,
        model=args.model,
        api_key=args.api_key,
        system_prompt=args.system,
        max_turns=args.max_turns,
    )
    store = SqliteConversationStore(args.store) if args.store else None
    reader = os.dup(0)
    writer = os.dup(1)
    os.dup2(2, 1)  # our stdout is the protocol's: anything printed goes to stderr

    async def serve() -> int:
        import trio

        await serve_acp(
            options,
            mcp=mcp,
            skills=list(args.skills),
            store=store,
            confirm=not args.yes,
            reader=trio.lowlevel.FdStream(reader),
            writer=trio.lowlevel.FdStream(writer),
        )
        return 0

    with terminal_logging():
        return run_guarded(serve)
