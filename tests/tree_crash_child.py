"""A child process for test_tree_crash_processes.py: a durable agent tree on a shared
store (DB: a SQLite file, or a ``postgresql://`` DSN), with a short lease.

    tree_crash_child.py DB LEDGER run ID [--pause POINT]
    tree_crash_child.py DB LEDGER recover ID [--ready]

The tree: ``boss`` delegates ``pay`` to ``worker`` with its ``task`` tool; ``worker``
calls ``lookup b`` (idempotent), then ``charge a`` (not), then answers ``worker:
<outputs>``; ``boss`` answers ``boss: <the task's output>``. Both tools append a line
to LEDGER each time they run (crash_app.ledger_tool), so the ledger counts real
executions across processes.

``run`` runs the tree under ID durably; ``--pause POINT`` (as crash_child.py: ``KIND#N``
of the checkpoint writes of every agent of the process, or ``tool:NAME V`` inside a
tool after its ledger line) prints ``paused POINT`` there and waits for SIGUSR1, so the
test kills it exactly there. ``recover`` waits until ID is listed by
``orphaned_trees``, then recovers it; ``--ready`` first prints ``ready`` and waits for
SIGUSR1, so two recoverers start together. The last stdout line is a JSON summary;
RunNotRecoverable exits 3.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import trio
from crash_app import Pause, ledger_tool
from crash_child import WAIT_S, wait_for_go
from durable_app import open_store

import toolnexus_trio.loop._checkpoint as checkpoint
from toolnexus_trio import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.loop import RunNotRecoverable

LEASE_MS = 400


async def generate(req: GenerateRequest) -> InProcessResponse:
    users = [str(m["content"]) for m in req.messages if m["role"] == "user"]
    outputs = [str(m["content"]) for m in req.messages if m["role"] == "tool"]
    if users and users[0].startswith("pay"):  # the worker
        if not outputs:
            return InProcessResponse(
                tool_calls=[InProcessToolCall(id="w1", name="lookup", arguments={"v": "b"})]
            )
        if len(outputs) == 1:
            return InProcessResponse(
                tool_calls=[InProcessToolCall(id="w2", name="charge", arguments={"v": "a"})]
            )
        return InProcessResponse(content="worker: " + "; ".join(outputs))
    if not outputs:  # the boss
        call = InProcessToolCall(
            id="t1", name="task", arguments={"agent": "worker", "prompt": "pay"}
        )
        return InProcessResponse(tool_calls=[call])
    return InProcessResponse(content="boss: " + "; ".join(outputs))


def registry(ledger: Path, pause: Pause) -> dict[str, AgentDef]:
    tools = [
        ledger_tool("charge", "charged", ledger, idempotent=False, pause=pause),
        ledger_tool("lookup", "found", ledger, idempotent=True, pause=pause),
    ]
    return {
        "boss": AgentDef("boss", "delegates", "", "m", task_targets=["worker"]),
        "worker": AgentDef("worker", "pays", "", "m", tools=tools),
    }


async def main(argv: list[str]) -> int:
    db, ledger, command, id, *rest = argv
    pause_at = rest[rest.index("--pause") + 1] if "--pause" in rest else None
    seen: Counter[str] = Counter()

    async def pause(point: str) -> None:
        seen[point] += 1
        if pause_at in (point, f"{point}#{seen[point]}"):
            await wait_for_go(f"paused {pause_at}")

    checkpoint._pause_hook = pause
    async with (
        open_store(db) as store,
        open_agent_runtime(
            registry(Path(ledger), pause), generate=generate, store=store, durable=True,
            lease_ms=LEASE_MS,
        ) as rt,
    ):  # fmt: skip
        if command == "run":
            result = await rt.run("boss", "job", id=id)
        elif command == "recover":
            with trio.fail_after(WAIT_S):
                # The dead owner's lease runs out on the store's clock: ask it.
                while True:
                    if id in await rt.orphaned_trees():
                        break
                    await trio.sleep(LEASE_MS / 4000)
            if "--ready" in rest:
                await wait_for_go("ready")
            try:
                result = await rt.recover(id)
            except RunNotRecoverable as exc:
                print(json.dumps({"error": "RunNotRecoverable", "status": exc.status}), flush=True)
                return 3
        else:
            raise SystemExit(f"unknown command {command!r}")
        print(json.dumps({"status": result.status, "text": result.text}), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
