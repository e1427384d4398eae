"""Our Tesseron host (``toolnexus_trio.tesseron``, Trio) with the benchmark actions."""

from __future__ import annotations

import os
import sys
from typing import Any

import trio

from benchmarks.hosts import STUBBORN_HOLD_S, storm_percent
from toolnexus_trio.tesseron import ActionContext, TesseronApp

app = TesseronApp("bench", "Benchmark host")
released = trio.Event()


@app.action("echo", "Returns its input")
async def echo(input: Any, ctx: ActionContext) -> Any:
    return input


@app.action("stubborn", "Ignores cancellation")
async def stubborn(input: Any, ctx: ActionContext) -> Any:
    await ctx.progress(percent=1, message="started")
    with trio.CancelScope(shield=True):
        await trio.sleep(STUBBORN_HOLD_S)
    return {"done": True}


@app.action("hold", "Reports progress, then waits for release")
async def hold(input: Any, ctx: ActionContext) -> Any:
    await ctx.progress(percent=50, message="held")
    await released.wait()
    return {"released": True}


@app.action("release", "Releases every hold")
async def release(input: Any, ctx: ActionContext) -> Any:
    released.set()
    return {"ok": True}


@app.action("storm", "Sends n progress updates")
async def storm(input: Any, ctx: ActionContext) -> Any:
    n = int(input["n"])
    for i in range(n):
        await ctx.progress(percent=storm_percent(i, n))
    return {"sent": n}


async def wait_for_stdin_eof() -> None:
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
        while await stdin.receive_some():
            pass


async def main() -> None:
    async with app.listen(port=0, manifest_dir=None) as host:
        print(f"url={host.url} pid={os.getpid()}", flush=True)
        await wait_for_stdin_eof()


if __name__ == "__main__":
    trio.run(main)
