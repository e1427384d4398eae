"""What a cancel does to a plain (sync) tool: the call returns at once; the function
runs on in its worker thread (Python cannot stop a thread) and its value is dropped,
unless it looks at ``ctx.cancel`` and stops early.

Run it: ``python docs/examples/tools_sync_cancel.py``.
"""

import threading
import time

import trio

from toolnexus_trio import CancelToken, ToolContext, tool

finished: list[str] = []
ended = threading.Event()

# --- sync-cancel: start ---


@tool
def crunch(steps: int, ctx: ToolContext) -> str:
    """Crunch numbers, one step every 10 ms."""
    try:
        for step in range(steps):
            if ctx.cancel.is_cancelled:  # the turn was cancelled: stop at the next step
                finished.append(f"crunch saw the cancel and stopped at step {step}")
                return "stopped"
            time.sleep(0.01)
        finished.append(f"crunch ran all {steps} steps (its value is dropped)")
        return "done"
    finally:
        ended.set()


async def main() -> None:
    result = await crunch.call({"steps": 3})
    print(f"<- crunch [{'error' if result.is_error else 'ok'}]: {result.output}")
    await trio.to_thread.run_sync(ended.wait)

    # A timeout: the call returns at once; the thread runs on to its end.
    ended.clear()
    result = await crunch.call({"steps": 30}, ToolContext(timeout_ms=50))
    print(f"<- crunch [{'error' if result.is_error else 'ok'}]: {result.output}")
    await trio.to_thread.run_sync(ended.wait)
    print(f"   meanwhile: {finished[-1]}")

    # The turn's cancel token: the call returns at once, and the function can see it.
    ended.clear()
    token = CancelToken()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_after, token, 0.05)  # as a user pressing Ctrl-C would
        result = await crunch.call({"steps": 1000}, ToolContext(cancel=token))
    print(f"<- crunch [{'error' if result.is_error else 'ok'}]: {result.output}")
    await trio.to_thread.run_sync(ended.wait)
    print(f"   meanwhile: {finished[-1]}")


async def cancel_after(token: CancelToken, seconds: float) -> None:
    await trio.sleep(seconds)
    token.cancel()


# --- sync-cancel: end ---

if __name__ == "__main__":
    trio.run(main)
