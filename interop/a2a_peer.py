"""The toolnexus 0.21 side of the A2A interop run (PyPI, asyncio): run with the peer's
own Python (its virtualenv pins mcp<2, which ours cannot share).

``serve``: a toolkit with one skill (``echo``) served as an A2A agent on loopback;
prints ``URL <base>`` and serves until killed. Its model answers ``echo: <task>``; a
task starting ``slow`` takes 30 s. ``call CARD TASK [POLL_MS]``: the peer's outbound
tool for the card's first skill, called once; prints the result as one JSON line.
``bench CARD N POLL_MS``: N calls of that tool; prints the seconds each took.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import toolnexus as tn


def generate(request: dict[str, Any]) -> dict[str, Any]:
    # The peer runs generate on a worker thread and wants it synchronous.
    text = str(request["messages"][-1]["content"])
    if text.startswith("slow"):
        time.sleep(30)
    return {"content": f"echo: {text}"}


async def serve() -> None:
    toolkit = await tn.create_toolkit(
        skills=[tn.SkillDef(name="echo", content="Echo.", description="Echoes a task")],
        builtins={"disabled": True},
    )
    client = tn.create_in_process_client(model="scripted", generate=generate)
    handle = await toolkit.serve("127.0.0.1:0", client=client, a2a={"name": "peer agent"})
    print(f"URL {handle.url}", flush=True)
    await asyncio.Event().wait()


async def tool_for(card: str, poll_ms: int) -> Any:
    toolkit = await tn.create_toolkit(
        builtins={"disabled": True}, agents=[tn.agent(card, poll_every=poll_ms)]
    )
    tools = [t for t in toolkit.tools() if t.source == "a2a"]
    return tools[0]


async def call(card: str, task: str, poll_ms: int) -> None:
    tool = await tool_for(card, poll_ms)
    result = await tool.execute({"task": task}, None)
    print(
        json.dumps(
            {
                "name": tool.name,
                "output": result.output,
                "isError": result.is_error,
                "metadata": result.metadata,
            }
        ),
        flush=True,
    )


async def bench(card: str, n: int, poll_ms: int) -> None:
    tool = await tool_for(card, poll_ms)
    times = []
    for i in range(n):
        started = time.perf_counter()
        result = await tool.execute({"task": f"t{i}"}, None)
        times.append(time.perf_counter() - started)
        assert not result.is_error, result.output
    print(json.dumps(times), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve":
        asyncio.run(serve())
    elif mode == "call":
        asyncio.run(call(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 50))
    else:
        asyncio.run(bench(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
