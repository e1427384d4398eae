"""A tesseron 0.2.0 host (asyncio, PyPI) used as a black-box peer by ``run_interop.py``.

Only the package's public API is used. The host prints ``url=<ws url>`` on stdout once
it listens, and shuts down when its stdin closes. Actions: ``add`` (a sum), ``slow``
(sleeps until cancelled), ``was_cancelled`` (what ``slow`` saw), ``ask_model``
(``ctx.sample``), ``confirm_delete`` (``ctx.confirm``) and ``rename`` (``ctx.elicit``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import tesseron

SEEN: dict[str, Any] = {"slow_cancelled": None}


def build_app() -> Any:
    app = tesseron.TesseronApp(
        id="peer",
        name="Interop peer (tesseron 0.2.0)",
        origin="http://127.0.0.1",
        manifest=tesseron.ManifestPublication.disabled(),
    )
    numbers = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }

    @app.action("add", description="Add two numbers", input_schema=numbers)
    async def add(input: Any, ctx: Any) -> Any:
        return input["a"] + input["b"]

    @app.action("slow", description="Sleep until cancelled", timeout_ms=120_000)
    async def slow(input: Any, ctx: Any) -> Any:
        try:
            await asyncio.sleep(60)
        finally:
            SEEN["slow_cancelled"] = ctx.is_cancelled
        return "finished"

    @app.action("was_cancelled", description="What slow saw")
    async def was_cancelled(input: Any, ctx: Any) -> Any:
        return {"slow_cancelled": SEEN["slow_cancelled"]}

    @app.action("ask_model", description="Ask the agent's model")
    async def ask_model(input: Any, ctx: Any) -> Any:
        return {"answer": await ctx.sample("What is 6 times 7?", max_tokens=5)}

    @app.action("confirm_delete", description="Confirm, then delete")
    async def confirm_delete(input: Any, ctx: Any) -> Any:
        return {"deleted": await ctx.confirm("Delete the file?")}

    @app.action("rename", description="Ask for a new name")
    async def rename(input: Any, ctx: Any) -> Any:
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        }
        return {"value": await ctx.elicit("New name?", json_schema=schema)}

    return app


async def main() -> None:
    host = await build_app().listen()
    sys.stdout.write(f"url={host.url}\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    try:
        while await loop.run_in_executor(None, sys.stdin.readline):
            pass
    finally:
        await host.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
