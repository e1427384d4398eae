"""``python -m toolnexus_trio serve``: a toolkit (MCP servers of a config, the builtins)
served as one MCP server, over streamable HTTP or stdio.

This module imports no SDK at import time: the command line registers the command
even when the ``mcp`` extra is missing, and ``serve`` then says how to get it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..mcp._config import serve_profile
from ..mcp._types import MCPServeConfig

if TYPE_CHECKING:
    from .._toolkit import Toolkit
    from ._log import TerminalLog


def add_serve_parser(commands: Any) -> None:
    """Register the ``serve`` sub-command on an argparse sub-parsers object."""
    serve = commands.add_parser(
        "serve",
        help="serve a toolkit (a config's MCP servers plus the builtins) as an MCP server",
        description=(
            "Aggregate the MCP servers of --mcp-config (and the builtins) into one toolkit "
            "and serve it over streamable HTTP at /mcp, or over stdio with --stdio. A "
            "top-level 'mcpServer' block in the config ({name, version, tools}) sets the "
            "served profile; a top-level 'builtins': false turns the builtins off."
        ),
    )
    serve.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP host (default: 127.0.0.1)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host that is not loopback (0.0.0.0, a LAN address): other machines "
        "can then reach the tools",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        dest="allowed_hosts",
        metavar="HOST",
        help="also accept this Host header (HOST, HOST:PORT or HOST:*; repeatable); the "
        "bound address and the loopback names always are",
    )
    serve.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        dest="allowed_origins",
        metavar="ORIGIN",
        help="also accept this Origin (e.g. https://app.example or http://host:*; "
        "repeatable); only loopback origins are accepted otherwise",
    )
    serve.add_argument("--port", type=int, default=0, help="HTTP port (default: any free one)")
    serve.add_argument("--mcp-config", metavar="FILE", help="MCP servers to aggregate (JSON)")
    serve.add_argument("--name", help="serverInfo.name (default: toolnexus)")
    serve.add_argument("--server-version", help="serverInfo.version (default: 0.1.0)")
    serve.add_argument(
        "--tool",
        action="append",
        dest="tools",
        metavar="NAME",
        help="expose only NAME (repeatable)",
    )
    serve.add_argument("--no-builtins", action="store_true", help="leave the builtins out")


def _profile(raw: dict[str, Any], args: argparse.Namespace) -> MCPServeConfig:
    block = raw.get("mcpServer")
    block = block if isinstance(block, dict) else {}
    return serve_profile(block, name=args.name, version=args.server_version, tools=args.tools)


def read_config_file(path: str) -> dict[str, Any]:
    """The JSON object in the file at *path*; :class:`ValueError` saying what is wrong."""
    try:
        loaded = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} is not a JSON object")
    return loaded


def run_serve(args: argparse.Namespace) -> int:
    """Run the ``serve`` command; returns the exit code."""
    from ._log import terminal_logging

    with terminal_logging(names=True) as log:
        return _run_serve(args, log)


def _run_serve(args: argparse.Namespace, log: TerminalLog) -> int:
    from ..mcp._sdk import require_sdk

    try:
        require_sdk("serve")
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        raw = read_config_file(args.mcp_config) if args.mcp_config else {}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        profile = _profile(raw, args)
        from ..mcp._config import parse_mcp_config

        servers = parse_mcp_config(raw) if raw else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    builtins = not args.no_builtins and raw.get("builtins") is not False
    if not args.stdio:
        from ..mcp._serving import is_loopback

        if not is_loopback(args.host) and not args.allow_remote:
            print(
                f"error: --host {args.host} is not a loopback address: the served tools "
                "would be reachable from other machines; add --allow-remote to serve there",
                file=sys.stderr,
            )
            return 2

    import trio

    from .._toolkit import ToolkitOptions, open_toolkit
    from ..mcp._stdin import LineTooLong
    from ._commands import run_command, stopped_by_sigterm

    # The toolkit exists to be served: the servers' sampling and elicitation go to the client.
    options = ToolkitOptions(mcp=servers, builtins=builtins, relay_to_client=True)

    async def serve(toolkit: Toolkit) -> None:
        if args.stdio:
            await toolkit.serve_stdio(mcp=profile)
            return
        async with toolkit.serve(
            args.host,
            args.port,
            mcp=profile,
            allow_remote=args.allow_remote,
            allowed_hosts=args.allowed_hosts,
            allowed_origins=args.allowed_origins,
        ) as served:
            print(f"serving MCP on {served.url} (Ctrl-C to stop)", flush=True)
            await trio.sleep_forever()

    async def main() -> int:
        # SIGTERM stops as Ctrl-C does: the toolkit is closed, so the MCP servers it
        # started are stopped too, not orphaned.
        try:
            log.hold()  # the library logs each failure too: one report is enough
            async with stopped_by_sigterm(), open_toolkit(options) as toolkit:
                report_failed_servers(toolkit, log)
                await serve(toolkit)
        except LineTooLong as exc:  # the client's fault, said in one line
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0

    return run_command(main)  # Ctrl-C: the shared goodbye line (stderr) and exit 130


def report_failed_servers(toolkit: Toolkit, log: TerminalLog) -> None:
    """Each MCP server of *toolkit* that failed to start, one escaped line on stderr;
    then the log records *log* held meanwhile, except those saying the same again."""
    from ._ask import _one_line

    failed = {
        name: status.error or ""
        for name, status in toolkit.mcp_status().items()
        if status.state == "failed"
    }
    for name, error in failed.items():
        print(_one_line(f"MCP server {name!r} failed: {error}", 2000), file=sys.stderr, flush=True)

    def reported(message: str) -> bool:
        return any(
            message.startswith(f"MCP server {name!r}") and error in message
            for name, error in failed.items()
        )

    log.show_held(skip=reported)


def add_gateway_mcp_options(gateway: Any) -> None:
    """The options of ``gateway --mcp`` on the ``gateway`` sub-parser."""
    group = gateway.add_argument_group("with --mcp")
    group.add_argument(
        "--instances-dir",
        metavar="DIR",
        help="where hosts publish instance manifests (default: ~/.tesseron/instances)",
    )
    group.add_argument(
        "--resume-ttl",
        type=float,
        default=4 * 3600.0,
        metavar="SECONDS",
        help="how long a dropped, claimed session stays resumable (default: 14400; 0: never)",
    )
    group.add_argument(
        "--max-sampling-depth",
        type=int,
        default=3,
        metavar="N",
        help="nested sampling beyond N is refused with -32008 (default: 3)",
    )
    group.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default: warning)",
    )


def run_gateway_mcp(args: argparse.Namespace) -> int:
    """Run ``gateway --mcp``: the Tesseron gateway as an MCP server on stdio."""
    from ._log import terminal_logging

    with terminal_logging(level=logging.getLevelName(args.log_level.upper()), names=True):
        return _run_gateway_mcp(args)


def _run_gateway_mcp(args: argparse.Namespace) -> int:
    from ..mcp._sdk import require_sdk

    try:
        require_sdk("gateway --mcp")
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.resume_ttl < 0 or args.max_sampling_depth < 0:
        print("error: --resume-ttl and --max-sampling-depth must be >= 0", file=sys.stderr)
        return 2

    from ..gateway._mcp_front import run_gateway_front
    from ..mcp._stdin import LineTooLong
    from ._commands import run_command, stopped_by_sigterm

    directory = Path(args.instances_dir).expanduser() if args.instances_dir else None

    async def main() -> int:
        # SIGTERM stops as Ctrl-C does: every host connection closes.
        try:
            async with stopped_by_sigterm():
                await run_gateway_front(
                    directory,
                    resume_ttl_ms=int(args.resume_ttl * 1000),
                    max_sampling_depth=args.max_sampling_depth,
                )
        except LineTooLong as exc:  # the client's fault, said in one line
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0

    return run_command(main)
