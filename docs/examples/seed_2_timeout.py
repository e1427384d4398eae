"""Seed example 2: honouring the caller's timeout.

``timeout_ms`` is this call's budget; 0 means unset. ``Tool.call`` enforces it (a call
still running at the deadline gives "timed out after <N>ms"); this tool stops itself
a little earlier, on its own terms, with the same message.
"""

import trio

from toolnexus_trio import ToolContext, ToolResult, define_tool


async def fetch_fn(args: dict[str, object], ctx: ToolContext) -> ToolResult:
    if ctx.timeout_ms == 0:
        await trio.sleep(0.2)
        return ToolResult.ok("finished")
    # 90% of the budget: the tool answers before Tool.call's own deadline fires.
    with trio.move_on_after(ctx.timeout_ms * 0.9 / 1000):
        await trio.sleep(0.2)
        return ToolResult.ok("finished")
    return ToolResult.error(f"timed out after {ctx.timeout_ms}ms")


async def main() -> None:
    fetch = define_tool("fetch", "Simulates a 200 ms call", None, fetch_fn)
    tight = await fetch.call({}, ToolContext(timeout_ms=20))
    loose = await fetch.call({}, ToolContext())
    print(f"with a 20 ms budget: {tight.output!r} (an error: {tight.is_error})")
    print(f"with no budget: {loose.output!r} (an error: {loose.is_error})")


if __name__ == "__main__":
    trio.run(main)
