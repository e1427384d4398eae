"""Scenario 16: A2A, ours (Trio, httpx2 + hypercorn) and the peer's (toolnexus 0.21.0:
urllib in threads + ``ThreadingHTTPServer``), each stack against itself on loopback.

One process measures one side and prints one JSON object::

    python -m benchmarks.a2a roundtrip ours --runs 50 --poll 20
    python -m benchmarks.a2a cancel peer --runs 10

- ``roundtrip``: one tool call of a served agent's skill: ``SendMessage``, then
  ``GetTask`` every ``--poll`` ms until ``completed`` (the served model answers at
  once), both sides at the same ``poll_every``.
- ``cancel``: a call of a task that would take 30 s is cancelled once the remote task
  is ``working``; the figure is the time from the cancel to the remote task's state
  ``canceled`` in the server's store. The peer never sends ``CancelTask``: its remote
  task is checked still ``working`` a second later (``remote_canceled`` false).

The peer needs its own virtualenv (toolnexus 0.21 pins ``mcp<2``): ``BENCH_A2A_PEER_PYTHON``
(default: this interpreter); ours runs from ``BENCH_MCP_OURS_PYTHON``, as scenario 13.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

CARD = "/.well-known/agent-card.json"
WARMUP = 5
SLOW_S = 30.0
PEER_SLOW_S = 2.0
"""The peer's slow task: long enough to outlive the 1 s look, short enough to let it exit."""
SCENARIO_TEXT = [
    "16. **A2A** (``benchmarks/a2a.py``): each side's outbound tool against its own served",
    "    agent on loopback. Round trip: ``SendMessage`` then ``GetTask`` every 20 ms to",
    "    ``completed`` (the served model answers at once). Cancel: from cancelling a call to",
    "    the remote task's ``canceled``; the peer sends no ``CancelTask``, so its remote task",
    "    runs on.",
]


# ---------------------------------------------------------------------------
# ours
# ---------------------------------------------------------------------------


def ours(mode: str, runs: int, poll: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio import (
        CancelToken,
        InProcessOptions,
        InProcessResponse,
        SkillDef,
        ToolContext,
        ToolkitOptions,
        create_in_process_client,
        create_toolkit,
    )
    from toolnexus_trio.a2a import A2AServeConfig, InMemoryTaskStore, TaskInfo, agent

    working = trio.Event()

    async def generate(request: Any) -> InProcessResponse:
        text = str(request.messages[-1]["content"])
        if text.startswith("slow"):
            working.set()
            await trio.sleep(SLOW_S)
        return InProcessResponse(content=f"echo: {text}")

    async def main() -> dict[str, Any]:
        nonlocal working
        skills = [SkillDef(name="echo", content="Echo.", description="Echoes")]
        served_kit = await create_toolkit(ToolkitOptions(skills=skills, builtins=False))
        client = create_in_process_client(InProcessOptions(model="bench", generate=generate))
        ended: list[float] = []
        canceled: list[trio.Event] = []

        def on_task(info: TaskInfo) -> None:
            if info.state == "canceled":
                ended.append(time.perf_counter())
                canceled[0].set()

        async def slow_call(tool: Any, n: int, token: CancelToken) -> None:
            await tool.call({"task": f"slow {n}"}, ToolContext(cancel=token))

        config = A2AServeConfig(name="bench", store=InMemoryTaskStore())
        serving = served_kit.serve(client=client, a2a=config, on_task=on_task)
        async with served_kit, serving as served:
            options = ToolkitOptions(
                builtins=False, agents=[agent(served.base_url + CARD, poll_every=poll)]
            )
            async with await create_toolkit(options) as toolkit:
                tool = toolkit.get("bench_echo")
                assert tool is not None
                samples: list[float] = []
                if mode == "roundtrip":
                    for i in range(WARMUP + runs):
                        started = time.perf_counter()
                        result = await tool.call({"task": f"t{i}"})
                        took = (time.perf_counter() - started) * 1000
                        assert not result.is_error, result.output
                        if i >= WARMUP:
                            samples.append(took)
                    return {"samples": samples}
                for i in range(runs):
                    working = trio.Event()
                    canceled[:] = [trio.Event()]
                    token = CancelToken()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(slow_call, tool, i, token)
                        await working.wait()
                        await trio.sleep(2 * poll / 1000)  # the caller is polling now
                        cancelled_at = time.perf_counter()
                        token.cancel("bench")
                    with trio.fail_after(5):
                        await canceled[0].wait()
                    samples.append((ended[-1] - cancelled_at) * 1000)
                return {"samples": samples, "remote_canceled": True}

    result: dict[str, Any] = trio.run(main)
    return result


# ---------------------------------------------------------------------------
# the peer (toolnexus 0.21, asyncio)
# ---------------------------------------------------------------------------


def peer(mode: str, runs: int, poll: int) -> dict[str, Any]:
    import asyncio

    import toolnexus as tn

    def generate(request: dict[str, Any]) -> dict[str, Any]:
        text = str(request["messages"][-1]["content"])
        if text.startswith("slow"):
            time.sleep(PEER_SLOW_S)  # the peer runs generate on a worker thread
        return {"content": f"echo: {text}"}

    async def main() -> dict[str, Any]:
        store = tn.InMemoryTaskStore()
        served_kit = await tn.create_toolkit(
            skills=[tn.SkillDef(name="echo", content="Echo.", description="Echoes")],
            builtins={"disabled": True},
        )
        client = tn.create_in_process_client(model="bench", generate=generate)
        handle = await served_kit.serve(
            "127.0.0.1:0", client=client, a2a={"name": "bench", "store": store}
        )
        try:
            toolkit = await tn.create_toolkit(
                builtins={"disabled": True},
                agents=[tn.agent(handle.url + CARD, poll_every=poll)],
            )
            [tool] = [t for t in toolkit.tools() if t.source == "a2a"]
            samples: list[float] = []
            if mode == "roundtrip":
                for i in range(WARMUP + runs):
                    started = time.perf_counter()
                    result = await tool.execute({"task": f"t{i}"}, None)
                    took = (time.perf_counter() - started) * 1000
                    assert not result.is_error, result.output
                    if i >= WARMUP:
                        samples.append(took)
                return {"samples": samples}
            # Cancel: the peer's own cancel (the caller's task cancelled mid-poll), then
            # a look at the remote task a second later.
            call = asyncio.ensure_future(tool.execute({"task": "slow 0"}, None))
            await asyncio.sleep(3 * poll / 1000)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            await asyncio.sleep(1.0)
            states = [t["status"]["state"] for t in store._tasks.values()]
            return {"samples": [], "remote_canceled": "canceled" in states, "states": states}
        finally:
            await handle.stop()

    result: dict[str, Any] = asyncio.run(main())
    return result


# ---------------------------------------------------------------------------
# the orchestrator's side
# ---------------------------------------------------------------------------


def collect_a2a(
    rounds: int, add: Callable[[str, str, dict[str, Any]], None], progress: Callable[[str], None]
) -> None:
    """Scenario 16, *rounds* processes per side and mode, ours and the peer alternately."""
    pythons = {
        "ours": os.environ.get("BENCH_MCP_OURS_PYTHON", sys.executable),
        "peer": os.environ.get("BENCH_A2A_PEER_PYTHON", sys.executable),
    }
    for r in range(rounds):
        for side in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            for mode, runs in (("roundtrip", 50), ("cancel", 10)):
                proc = subprocess.run(
                    [
                        pythons[side],
                        "-m",
                        "benchmarks.a2a",
                        mode,
                        side,
                        "--runs",
                        str(runs),
                        "--poll",
                        "20",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                add(f"a2a_{mode}", side, json.loads(proc.stdout.strip().splitlines()[-1]))
    progress("A2A")


def a2a_rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The report rows of scenario 16 (empty when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    if "a2a_roundtrip" not in raw:
        return []

    def samples(key: str, side: str) -> list[float]:
        return [x for run in raw[key].get(side, []) for x in run["samples"]]

    peer_cancels = [run.get("remote_canceled") for run in raw["a2a_cancel"].get("peer", [])]
    return [
        Row(
            "16. A2A round trip, one-turn remote task (poll_every 20 ms)",
            "tool call -> completed",
            "ms",
            Stats.of(samples("a2a_roundtrip", "ours")),
            Stats.of(samples("a2a_roundtrip", "peer")),
            "one poll period (20 ms)",
            Target("ratio", "<=", 1.0),
        ),
        Row(
            "16. A2A cancel to remote canceled",
            "cancel -> remote task canceled",
            "ms",
            Stats.of(samples("a2a_cancel", "ours")),
            Stats.of([0.0]),
            "the peer sends no CancelTask: its remote task runs on "
            f"(remote canceled: {peer_cancels})",
            Target("ours", "<=", 50.0, unit="ms"),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.a2a")
    parser.add_argument("mode", choices=["roundtrip", "cancel"])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--poll", type=int, default=20)
    args = parser.parse_args()
    run = ours if args.side == "ours" else peer
    print(json.dumps(run(args.mode, args.runs, args.poll)), flush=True)


if __name__ == "__main__":
    main()
