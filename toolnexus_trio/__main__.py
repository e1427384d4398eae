"""Command line: ``python -m toolnexus_trio demo | host | gateway``."""

from __future__ import annotations

import argparse
import sys
from functools import partial


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
    host = commands.add_parser("host", help="serve the demo's todo app as a Tesseron host")
    host.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: any)")
    host.add_argument(
        "--no-manifest", action="store_true", help="do not publish ~/.tesseron/instances"
    )
    gateway = commands.add_parser("gateway", help="dial a Tesseron host and list its tools")
    gateway.add_argument("--url", required=True, help="the host's ws://127.0.0.1:<port>/ URL")
    args = parser.parse_args(argv)
    from ._cli import run_command, run_gateway, run_host

    if args.command == "demo":
        from ._demo import run_demo
        from ._demo_app import run_app_demo

        async def both() -> int:
            first = await run_demo()
            print("\n=== From agent to app: a Tesseron host driven by the same loop ===\n")
            second = await run_app_demo(ask=args.ask)
            return 0 if first.status == second.status == "done" else 1

        return run_command(both)
    if args.command == "host":
        return run_command(partial(run_host, args.port, not args.no_manifest))
    return run_command(partial(run_gateway, args.url))


if __name__ == "__main__":
    sys.exit(main())
