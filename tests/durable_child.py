"""A child process for test_durable_processes.py: one agent on a shared store
(DB: a SQLite file, or a ``postgresql://`` DSN).

    durable_child.py DB LEDGER halt ID PROMPT
    durable_child.py DB LEDGER answer ID REQUEST_ID [--decline] [--pause POINT]
    durable_child.py DB LEDGER load PREFIX COUNT
    durable_child.py DB LEDGER take WORKER COUNT

``halt`` asks PROMPT under ID and exits (the run halts pending). ``answer`` answers
it. ``load`` runs COUNT tasks, each asking ``deploy PREFIX-i`` under its own id and
answering it. The last stdout line is a JSON summary; AlreadyAnswered exits 3.

``--pause POINT`` stops at that point of ``Client.answer`` (``loaded``, ``taken``,
``resumed``, ``saved``) or in the tool right after it ran (``tool``): the child prints
``paused POINT`` and waits for SIGUSR1, so the test can kill it exactly there or let
it go. ``load`` prints ``ready`` and waits for SIGUSR1 before starting, so that two
processes start together. ``take`` reads the keys of the pending states ``id-0`` ..
``id-<COUNT-1>``, prints ``ready``, and on SIGUSR1 runs COUNT/4 tasks, task t calling
``take_pending`` on ids 4t..4t+3 (in an order rotated by WORKER); it reports the ids
it won.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import trio
from durable_app import client, open_store, toolkit

import toolnexus_trio.loop._durable as durable
from toolnexus_trio import AlreadyAnswered, Answer


async def wait_for_go(message: str) -> None:
    # The receiver exists before the parent can see the message: SIGUSR1's default
    # action would kill the process.
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        print(message, flush=True)
        async for _ in signals:
            return


def say(summary: dict[str, Any]) -> None:
    print(json.dumps(summary), flush=True)


async def main(argv: list[str]) -> int:
    db, ledger, command, *rest = argv
    pause_at = rest[rest.index("--pause") + 1] if "--pause" in rest else None

    async def pause(point: str) -> None:
        if point == pause_at:
            await wait_for_go(f"paused {point}")

    durable._pause_hook = pause
    async with open_store(db) as store:
        tk = await toolkit(Path(ledger), pause=pause)
        agent = client(store)
        if command == "halt":
            thread, prompt = rest[:2]
            result = await agent.ask(prompt, tk, id=thread)
            say({"status": result.status, "pending": [s.request.id for s in result.suspended]})
            return 0
        if command == "answer":
            thread, request_id = rest[:2]
            answer = Answer(request_id, "--decline" not in rest)
            try:
                result = await agent.answer(thread, [answer], toolkit=tk)
            except AlreadyAnswered as exc:
                say({"error": "AlreadyAnswered", "status": exc.status})
                return 3
            say({"status": result.status, "text": result.text})
            return 0
        if command == "load":
            prefix, count = rest[0], int(rest[1])
            await wait_for_go("ready")

            async def one(thread: str) -> None:
                await agent.ask(f"deploy {thread}", tk, id=thread)
                await agent.answer(
                    thread, [Answer(f"req-{thread}-call-{thread}", True)], toolkit=tk
                )

            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(one, f"{prefix}-{i}")
            say({"done": count})
            return 0
        if command == "take":
            # Store-level contention: every id is taken by one task of each process.
            worker, count = int(rest[0]), int(rest[1])
            ids = [f"id-{i}" for i in range(count)]
            keys = {}
            for thread in ids:
                state = await store.get_pending(thread)
                assert state is not None
                keys[thread] = state.key
            await wait_for_go("ready")
            won: list[str] = []

            async def take(task: int) -> None:
                mine = ids[4 * task : 4 * task + 4]
                shift = worker % len(mine)
                for thread in mine[shift:] + mine[:shift]:
                    taken = [{"role": "user", "content": f"taken by {worker}-{task}"}]
                    if await store.take_pending(thread, keys[thread], taken):
                        won.append(thread)

            async with trio.open_nursery() as nursery:
                for task in range(count // 4):
                    nursery.start_soon(take, task)
            say({"won": won})
            return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
