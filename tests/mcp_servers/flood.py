"""A hand-written stdio MCP server that floods us with its own requests and then never
reads again (no SDK: a well-behaved one would not). It answers ``initialize`` and
``tools/list`` (one tool, ``flood``) properly; ``tools/call`` gets no answer: the
server writes COUNT requests of KIND (``ping`` or ``sampling``:
``sampling/createMessage``), one line each, and then sleeps until it is killed, its
stdin unread, so every answer we write to it sits in a pipe nobody reads.

    python flood.py KIND COUNT
"""

from __future__ import annotations

import json
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def request(kind: str, n: int) -> dict[str, object]:
    if kind == "ping":
        return {"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"}
    return {
        "jsonrpc": "2.0",
        "id": f"s{n}",
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 5,
        },
    }


def main() -> None:
    kind, count = sys.argv[1], int(sys.argv[2])
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flood", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif method == "tools/list":
            tool = {"name": "flood", "description": "Floods.", "inputSchema": {"type": "object"}}
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [tool]}})
        elif method == "tools/call":
            # One write of everything (it blocks once our end stops reading).
            lines = "".join(json.dumps(request(kind, n)) + "\n" for n in range(count))
            sys.stdout.write(lines)
            sys.stdout.flush()
            time.sleep(300)


if __name__ == "__main__":
    main()
