"""Run docs/examples/tesseron_todo_host.py as a subprocess and play the gateway."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import trio
from gateway_helpers import dial

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tesseron_todo_host.py"


async def read_url(proc: trio.Process) -> str:
    assert proc.stdout is not None
    data = b""
    while not data.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(1)
        assert chunk, "the example exited before printing its URL"
        data += chunk
    line = data.decode().strip()
    assert line.startswith("url=ws://127.0.0.1:"), line
    return line.removeprefix("url=")


async def test_todo_host_example() -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            proc: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    [sys.executable, str(EXAMPLE)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    check=False,
                )
            )
            url = await read_url(proc)
            async with dial(url) as gw:
                hello = await gw.handshake()
                names = [a["name"] for a in hello["params"]["actions"]]
                assert names == ["add", "delete", "rename"]

                others: list[dict[str, Any]] = []
                rid = gw.invoke("add", {"items": ["milk", "eggs"]})
                added = await gw.response(rid, others=others)
                assert added["result"]["output"] == [
                    {"id": 1, "text": "milk", "done": False},
                    {"id": 2, "text": "eggs", "done": False},
                ]
                progress = [f["params"] for f in others if f["method"] == "actions/progress"]
                assert [(p["percent"], p["message"]) for p in progress] == [
                    (50, "1/2 added"),
                    (100, "2/2 added"),
                ]

                rid = gw.invoke("delete", {"id": 1})
                req = await gw.expect_method("elicitation/request")
                assert req["params"]["question"].startswith('Delete "milk"?')
                assert req["params"]["schema"] == {
                    "type": "object",
                    "properties": {},
                    "required": [],
                }
                gw.respond(req["id"], {"action": "accept"})
                others = []
                deleted = await gw.response(rid, others=others)
                assert deleted["result"]["output"] == {"deleted": True}
                assert [f["method"] for f in others] == ["log"]

                rid = gw.invoke("rename", {"id": 2})
                req = await gw.expect_method("elicitation/request")
                gw.respond(req["id"], {"action": "accept", "value": {"text": "oat milk"}})
                renamed = await gw.response(rid)
                assert renamed["result"]["output"] == {"id": 2, "text": "oat milk", "done": False}

            assert proc.stdin is not None
            await proc.stdin.aclose()
            assert proc.stdout is not None
            said = b""
            while chunk := await proc.stdout.receive_some():
                said += chunk
            assert await proc.wait() == 0
    # What the app printed for the person watching it, one line per change.
    assert said.decode().splitlines() == [
        "added #1 milk",
        "added #2 eggs",
        "deleted #1 milk",
        "renamed #2 eggs to oat milk",
    ]
