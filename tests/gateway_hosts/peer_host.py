"""A tesseron 0.2.0 host (PyPI, asyncio; black-box public API only) for the
``gateway --mcp`` tests: ``python peer_host.py INSTANCES_DIR`` publishes its manifest
there and serves until killed. Actions: ``add``, ``fail``, ``slow``/``seen``,
``ask_model``, ``confirm`` and ``rename``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import tesseron

SEEN: dict[str, Any] = {"slow_cancelled": None}


def build(directory: str) -> Any:
    app = tesseron.TesseronApp(
        id="peer",
        name="Peer host (tesseron 0.2.0)",
        origin="http://127.0.0.1",
        manifest=tesseron.ManifestPublication.in_directory(Path(directory)),
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

    @app.action("seen", description="What slow saw")
    async def seen(input: Any, ctx: Any) -> Any:
        return dict(SEEN)

    @app.action("ask_model", description="Ask the agent's model")
    async def ask_model(input: Any, ctx: Any) -> Any:
        return {"answer": await ctx.sample("What is 6 times 7?", max_tokens=5)}

    @app.action("confirm", description="Confirm something")
    async def confirm(input: Any, ctx: Any) -> Any:
        return {"yes": await ctx.confirm("Really?")}

    @app.action("rename", description="Ask for a new name")
    async def rename(input: Any, ctx: Any) -> Any:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        return {"value": await ctx.elicit("New name?", json_schema=schema)}

    return app


async def main(directory: str) -> None:
    host = await build(directory).listen()
    print(f"url={host.url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await host.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
