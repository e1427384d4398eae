"""A hand-written stdio MCP server that misbehaves on purpose (no SDK: the SDK would not
send what these tests need). It answers ``initialize`` and ``tools/list`` (one tool,
``huge``) properly; ``tools/call`` then gets one line of ``x`` without a newline, of
the size given on the command line, and the server waits to be killed.

    python rogue.py BYTES
"""

from __future__ import annotations

import json
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    size = int(sys.argv[1])
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "rogue", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            tool = {
                "name": "huge",
                "description": "Answers too much.",
                "inputSchema": {"type": "object"},
            }
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [tool]}})
        elif method == "tools/call":
            block = b"x" * 65536
            for _ in range(size // len(block) + 1):
                sys.stdout.buffer.write(block)
            sys.stdout.buffer.flush()
            time.sleep(300)


if __name__ == "__main__":
    main()
