"""A child process for test_persona_memory_bounds.py: ``memory_writer.py HOME TAG N``.

Makes its own ``memory`` tool on *HOME*, prints ``ready`` and waits for SIGUSR1 (so two
writers start together), then runs *N* ``add`` calls at once (``TAG-0`` ...), prints
``ok K`` (K = the calls that reported success) and exits.
"""

from __future__ import annotations

import signal
import sys

import trio

from toolnexus_trio.agents import memory_tool


async def main(home: str, tag: str, count: int) -> None:
    tool = memory_tool(home)
    ok = 0
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        print("ready", flush=True)
        async for _ in signals:
            break

    async def add(n: int) -> None:
        nonlocal ok
        result = await tool.call({"action": "add", "text": f"{tag}-{n}"})
        ok += not result.is_error

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(add, n)
    print(f"ok {ok}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
