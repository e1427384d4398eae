"""``python -m toolnexus_trio.testing serve --port N --script FILE.json [--cycle]``.

Prints the provider's base URL (``http://127.0.0.1:N/v1``) as the first stdout line,
then serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys

import trio

from ._script import load_script
from ._server import FakeProvider


def main(argv: list[str] | None = None) -> int:
    """Parse *argv* and serve; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m toolnexus_trio.testing")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a scripted FakeProvider on 127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    serve.add_argument("--script", required=True, help="a JSON file: a list of steps")
    serve.add_argument("--cycle", action="store_true", help="repeat the script forever")
    args = parser.parse_args(argv)
    try:
        with open(args.script, encoding="utf-8") as f:
            steps, cycle = load_script(json.load(f))
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: bad script {args.script}: {exc}", file=sys.stderr)
        return 2
    provider = FakeProvider(steps, cycle=cycle or args.cycle)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(provider.serve, "127.0.0.1", args.port)
            print(provider.base_url, flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
