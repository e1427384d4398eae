"""Command line: ``python -m toolnexus_trio demo | host | gateway | serve``."""

from __future__ import annotations

import argparse
import sys

import trio

from .mcp._cli import add_serve_parser, run_serve


def main(argv: list[str] | None = None) -> int:
    """Parse *argv* and run the chosen command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m toolnexus_trio")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the offline demo (no key, no network)")
    demo.add_argument(
        "--ask", action="store_true", help="ask confirmations and questions on the terminal"
    )
    host = commands.add_parser("host", help="serve the demo's todo app as a Tesseron host")
    host.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any)")
    host.add_argument(
        "--no-manifest", action="store_true", help="do not publish ~/.tesseron/instances"
    )
    gateway = commands.add_parser("gateway", help="dial a Tesseron host and list its tools")
    gateway.add_argument("--url", required=True, help="the host's ws://127.0.0.1:<port>/ URL")
    add_serve_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "demo":
        from ._demo import run_demo
        from ._demo_app import run_app_demo

        async def both() -> bool:
            first = await run_demo()
            print("\n=== From agent to app: a Tesseron host driven by the same loop ===\n")
            second = await run_app_demo(ask=args.ask)
            return first.status == second.status == "done"

        return 0 if trio.run(both) else 1
    from ._cli import run_gateway, run_host

    if args.command == "host":
        return trio.run(run_host, args.port, not args.no_manifest)
    return trio.run(run_gateway, args.url)


if __name__ == "__main__":
    sys.exit(main())
