"""The limit of scenario 4: a raw WebSocket echo on our stack (Trio + our Sans-I/O server).

Same loopback, same subprotocol, same load generator; no JSON, no dispatch: every text
frame is sent straight back, except ``stream <n>``, which answers with *n*
progress-shaped frames and then ``end`` (the one-way limit of the progress storm).
Uses the private ``serve_websocket`` on purpose.
"""

from __future__ import annotations

import os
import sys
from functools import partial

import trio

from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

PROGRESS = (
    '{"jsonrpc":"2.0","method":"actions/progress","params":{"invocationId":"inv_101","percent":50}}'
)


async def echo(ws: WebSocket) -> None:
    try:
        while True:
            for text in await ws.receive_batch():
                if text.startswith("stream "):
                    for _ in range(int(text.split()[1])):
                        await ws.send(PROGRESS)
                    await ws.send("end")
                else:
                    await ws.send(text)
    except WebSocketClosed:
        return


async def main() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_websocket, echo, host="127.0.0.1", port=0))
        print(f"url=ws://127.0.0.1:{port}/ pid={os.getpid()}", flush=True)
        async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
            while await stdin.receive_some():
                pass
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
