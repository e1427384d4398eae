"""Command line: ``python -m toolnexus_trio demo``."""

from __future__ import annotations

import argparse
import sys

import trio


def main(argv: list[str] | None = None) -> int:
    """Parse *argv* and run the chosen command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m toolnexus_trio")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the offline agent-loop demo (no key, no network)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        result = trio.run(run_demo)
        return 0 if result.status == "done" else 1
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
