"""A child process for test_crash_processes.py: a durable agent on a shared store
(DB: a SQLite file, or a ``postgresql://`` DSN), with a short lease.

    crash_child.py DB LEDGER ask ID PROMPT [--pause POINT]
    crash_child.py DB LEDGER recover ID [--ready]

``ask`` asks PROMPT under ID durably. ``--pause POINT`` (``KIND#N``: the N-th
checkpoint write of that kind, ``start``, ``responded``, ``started``, ``result``,
``step``, ``finished``; or ``tool:NAME V``, inside that tool after its ledger line)
prints ``paused POINT`` there and waits for SIGUSR1, so the test kills it exactly
there. ``recover`` waits until ID's lease has expired (``orphaned_runs``), then
recovers it; with ``--ready`` it first prints ``ready`` and waits for SIGUSR1, so two
recoverers start together. The last stdout line is a JSON summary;
RunNotRecoverable exits 3.
"""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from pathlib import Path

import trio
from crash_app import client, toolkit
from durable_app import open_store

import toolnexus_trio.loop._checkpoint as checkpoint
from toolnexus_trio.loop import RunNotRecoverable

LEASE_MS = 400
WAIT_S = 30  # a bound on waiting for the lease to expire, not a timing assertion


async def wait_for_go(message: str) -> None:
    # The receiver exists before the parent can see the message: SIGUSR1's default
    # action would kill the process.
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        print(message, flush=True)
        async for _ in signals:
            return


async def main(argv: list[str]) -> int:
    db, ledger, command, *rest = argv
    pause_at = rest[rest.index("--pause") + 1] if "--pause" in rest else None
    seen: Counter[str] = Counter()

    async def pause(point: str) -> None:
        seen[point] += 1
        if pause_at in (point, f"{point}#{seen[point]}"):
            await wait_for_go(f"paused {pause_at}")

    checkpoint._pause_hook = pause
    async with open_store(db) as store:
        tk = await toolkit(Path(ledger), pause=pause)
        agent = client(store, lease_ms=LEASE_MS)
        if command == "ask":
            thread, prompt = rest[:2]
            result = await agent.ask(prompt, tk, id=thread)
            print(json.dumps({"status": result.status, "text": result.text}), flush=True)
            return 0
        if command == "recover":
            thread = rest[0]
            with trio.fail_after(WAIT_S):
                # The dead owner's lease runs out on the store's clock: ask it.
                while True:
                    if thread in await agent.orphaned_runs():
                        break
                    await trio.sleep(LEASE_MS / 4000)
            if "--ready" in rest:
                await wait_for_go("ready")
            try:
                result = await agent.recover(thread, tk)
            except RunNotRecoverable as exc:
                print(json.dumps({"error": "RunNotRecoverable", "status": exc.status}), flush=True)
                return 3
            print(json.dumps({"status": result.status, "text": result.text}), flush=True)
            return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
