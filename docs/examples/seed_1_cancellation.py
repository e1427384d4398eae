"""Seed example 1: a tool that respects cancellation.

The token is cancelled 50 ms in; the five-second tool returns "cancelled" at once,
because ``Tool.call`` runs it in a cancel scope bound to ``ctx.cancel``.
"""

import trio

from toolnexus_trio import ToolContext, define_tool


async def slow_fn(args: dict[str, object], ctx: ToolContext) -> str:
    await trio.sleep(5)
    return "done"


async def main() -> None:
    slow = define_tool("slow", "Waits five seconds", None, slow_fn)
    ctx = ToolContext()

    async def cancel_soon() -> None:
        await trio.sleep(0.05)
        print("cancelling the call's token")
        ctx.cancel.cancel()

    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_soon)
        print("calling slow (it waits five seconds)")
        result = await slow.call({}, ctx)
    elapsed = trio.current_time() - t0
    print(f"slow returned {result.output!r} (an error: {result.is_error})")
    print(f"after {elapsed * 1000:.0f} ms, not five seconds")


if __name__ == "__main__":
    trio.run(main)
