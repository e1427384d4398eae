"""The command line's parser and dispatch.

``python -m toolnexus_trio demo | host | gateway | ask | serve | run | tools | acp``.
"""

from __future__ import annotations

import argparse
from functools import partial

from ._acp import add_acp_command, main_acp
from ._ask import add_ask_command, main_ask
from ._mcp import add_gateway_mcp_options, add_serve_parser, run_gateway_mcp, run_serve
from ._run import add_run_commands, main_run, main_tools


def _port(text: str) -> int:
    """A TCP port 0..65535 (0: any free port); anything else is a usage error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0..65535")
    return port


def main(argv: list[str] | None = None) -> int:
    """Parse *argv* and run the chosen command; returns the exit code.

    Ctrl-C stops any command cleanly: one goodbye line on stderr and exit code 130.
    """
    parser = argparse.ArgumentParser(prog="python -m toolnexus_trio")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the offline demo (no key, no network)")
    demo.add_argument(
        "--ask", action="store_true", help="ask confirmations and questions on the terminal"
    )
    demo.add_argument(
        "--durable", action="store_true", help="only the approval that survives a restart"
    )
    host = commands.add_parser("host", help="serve the demo's todo app as a Tesseron host")
    host.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: any)")
    host.add_argument(
        "--no-manifest", action="store_true", help="do not publish ~/.tesseron/instances"
    )
    gateway = commands.add_parser(
        "gateway", help="dial a Tesseron host and list its tools, or serve every host over MCP"
    )
    mode = gateway.add_mutually_exclusive_group(required=True)
    mode.add_argument("--url", help="the host's ws://127.0.0.1:<port>/ URL")
    mode.add_argument(
        "--mcp", action="store_true", help="be an MCP server on stdio for an agent (Tesseron apps)"
    )
    add_gateway_mcp_options(gateway)
    add_ask_command(commands)
    add_serve_parser(commands)
    add_run_commands(commands)
    add_acp_command(commands)
    args = parser.parse_args(argv)
    if args.command == "acp":
        return main_acp(args)
    if args.command == "ask":
        return main_ask(args)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "run":
        return main_run(args)
    if args.command == "tools":
        return main_tools(args)
    if args.command == "gateway" and args.mcp:
        return run_gateway_mcp(args)
    from ._commands import run_command, run_gateway, run_host

    if args.command == "demo" and args.durable:
        from ._demo_durable import run_durable_demo

        async def durable() -> int:
            return 0 if await run_durable_demo() else 1

        return run_command(durable)
    if args.command == "demo":
        from ._demo import run_demo
        from ._demo_agents import run_agents_demo
        from ._demo_app import run_app_demo
        from ._demo_http import run_http_demo

        async def both() -> int:
            first = await run_demo()
            print("\n=== From agent to app: a Tesseron host driven by the same loop ===\n")
            second = await run_app_demo(ask=args.ask)
            print("\n=== Real models: the same loop over HTTP (a local FakeProvider) ===\n")
            third = await run_http_demo()
            print("\n=== Sub-agents: a coordinator, one agent interrupted, one approved ===\n")
            fourth = await run_agents_demo()
            return 0 if first.status == second.status == third.status == "done" and fourth else 1

        return run_command(both)
    if args.command == "host":
        return run_command(partial(run_host, args.port, not args.no_manifest))
    return run_command(partial(run_gateway, args.url))
