"""The peer's Tesseron host (PyPI ``tesseron`` 0.2.0, asyncio), black-box public API only."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import tesseron

from benchmarks.hosts import STUBBORN_HOLD_S, storm_percent

app = tesseron.TesseronApp(
    id="bench",
    name="Benchmark host",
    origin="http://127.0.0.1",
    manifest=tesseron.ManifestPublication.disabled(),
)
released: asyncio.Event | None = None


@app.action("echo", description="Returns its input")
async def echo(input: object, ctx: Any) -> Any:
    return input


@app.action("stubborn", description="Ignores cancellation")
async def stubborn(input: object, ctx: Any) -> Any:
    await ctx.progress(percent=1, message="started")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STUBBORN_HOLD_S
    while (left := deadline - loop.time()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            continue  # ignore cancellation, on purpose
    return {"done": True}


@app.action("hold", description="Reports progress, then waits for release")
async def hold(input: object, ctx: Any) -> Any:
    assert released is not None
    await ctx.progress(percent=50, message="held")
    await released.wait()
    return {"released": True}


@app.action("release", description="Releases every hold")
async def release(input: object, ctx: Any) -> Any:
    assert released is not None
    released.set()
    return {"ok": True}


@app.action("storm", description="Sends n progress updates")
async def storm(input: Any, ctx: Any) -> Any:
    n = int(input["n"])
    for i in range(n):
        await ctx.progress(percent=storm_percent(i, n))
    return {"sent": n}


async def main() -> None:
    global released
    released = asyncio.Event()
    host = await app.listen()
    print(f"url={host.url} pid={os.getpid()}", flush=True)
    loop = asyncio.get_running_loop()
    try:
        while await loop.run_in_executor(None, sys.stdin.readline):
            pass
    finally:
        await host.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
