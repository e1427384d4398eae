"""Our Tesseron host for scenario 13 (``gateway --mcp``):
``python -m benchmarks.hosts.gateway_mcp INSTANCES_DIR`` publishes its manifest there and
serves until killed. Actions: ``echo`` (returns at once), ``stubborn`` (ignores
cancellation for :data:`HOLD_S`, stamping the moment the cancel reached it) and ``seen``
(that stamp, CLOCK_MONOTONIC, comparable across processes).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import trio

from toolnexus_trio.tesseron import ActionContext, TesseronApp

HOLD_S = 0.2
SEEN: dict[str, Any] = {"cancelled_at": None}


def build() -> TesseronApp:
    app = TesseronApp("ours", "Scenario 13 host")

    @app.action("echo", "Returns its input")
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    @app.action("stubborn", "Ignores cancellation for a while")
    async def stubborn(input: Any, ctx: ActionContext) -> str:
        async def stamp() -> None:
            # Our host answers -32001 and flags the cancel in the same step.
            await ctx.cancelled()
            SEEN["cancelled_at"] = time.monotonic()

        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stamp)
                await trio.sleep(HOLD_S)
                nursery.cancel_scope.cancel()
        return "late"

    @app.action("seen", "When the last cancel reached stubborn")
    async def seen(input: Any, ctx: ActionContext) -> Any:
        return dict(SEEN)

    return app


async def main(directory: str) -> None:
    async with build().listen(manifest_dir=directory):
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
