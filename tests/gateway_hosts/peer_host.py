"""A tesseron 0.2.0 host (PyPI, asyncio; black-box public API only) for the
``gateway --mcp`` tests: ``python peer_host.py INSTANCES_DIR`` serves until killed.

Actions: ``add`` (a Pydantic model: bad input is -32004), ``fail`` (-32005), ``steps``
(progress and a log), ``slow`` (sleeps until cancelled; ``seen`` tells), ``ask_model``
and ``nest`` (sample), ``confirm``, ``rename`` (elicit), ``bump`` (publishes the
``counter`` resource), ``grow`` (registers ``extra``: ``actions/list_changed``) and
``drop`` (cuts the gateway connection, as a network drop would).

tesseron 0.2.0 offers no way to drop a live gateway connection, so the published
manifest points at a loopback TCP relay in this process (the host's own manifest is
disabled), and ``drop`` closes the relayed sockets: both sides see the connection go,
and the gateway's next dial reaches the host, which resumes. Its log (a refused resume
included) goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import pydantic
import tesseron
from tesseron.manifest import mint_instance_id, publish, withdraw

SEEN: dict[str, Any] = {"slow_cancelled": None, "slow_started": 0}
RELAYED: set[asyncio.StreamWriter] = set()
TASKS: set[asyncio.Task[None]] = set()


class Numbers(pydantic.BaseModel):
    a: int
    b: int


def build() -> tuple[Any, Any]:
    app = tesseron.TesseronApp(
        id="peer",
        name="Peer host (tesseron 0.2.0)",
        origin="http://127.0.0.1",
        manifest=tesseron.ManifestPublication.disabled(),
    )
    state = {"counter": 0}

    async def read_counter() -> Any:
        return state["counter"]

    counter = app.resource("counter", read=read_counter, description="A counter", subscribable=True)

    @app.action("echo", description="Echo the input")
    async def echo(input: Any, ctx: Any) -> Any:
        return input

    @app.action("add", description="Add two integers")
    async def add(input: Numbers, ctx: Any) -> Any:
        return input.a + input.b

    @app.action("fail", description="Always fails")
    async def fail(input: Any, ctx: Any) -> Any:
        raise tesseron.ActionError.handler("it broke", {"why": "on purpose"})

    @app.action("steps", description="Reports progress")
    async def steps(input: Any, ctx: Any) -> Any:
        await ctx.log("careful", level=tesseron.LogLevel.WARN, meta={"k": 1})
        for percent in (0, 30, 20, 60, 100):  # 0 first (it goes); 20 goes back: kept 30
            await ctx.progress(percent=percent, message=f"at {percent}")
        return "done"

    @app.action("slow", description="Sleep until cancelled", timeout_ms=120_000)
    async def slow(input: Any, ctx: Any) -> Any:
        SEEN["slow_started"] += 1  # a test's signal that the call reached the handler
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

    @app.action("nest", description="Samples; the model may call nest again")
    async def nest(input: Any, ctx: Any) -> Any:
        return {"answer": await ctx.sample("nest again?")}

    @app.action("confirm", description="Confirm something")
    async def confirm(input: Any, ctx: Any) -> Any:
        return {"yes": await ctx.confirm("Really?")}

    @app.action("rename", description="Ask for a new name")
    async def rename(input: Any, ctx: Any) -> Any:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        return {"value": await ctx.elicit("New name?", json_schema=schema)}

    @app.action("bump", description="Increment the counter resource")
    async def bump(input: Any, ctx: Any) -> Any:
        state["counter"] += 1
        await counter.publish(state["counter"])
        return state["counter"]

    @app.action("drop", description="Cut the gateway connection (it redials and resumes)")
    async def drop(input: Any, ctx: Any) -> Any:
        async def later() -> None:
            await asyncio.sleep(0.05)
            for writer in list(RELAYED):
                writer.transport.abort()

        task = asyncio.get_running_loop().create_task(later())
        TASKS.add(task)  # asyncio keeps only a weak reference
        task.add_done_callback(TASKS.discard)
        return "dropping"

    return app, state


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()


async def main(directory: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    app, _ = build()
    host = await app.listen()

    async def grow(input: Any, ctx: Any) -> Any:
        @host.action("extra", description="Added at run time")
        async def extra(input: Any, ctx: Any) -> Any:
            return "extra"

        return "grown"

    host.action("grow", description="Register the action extra")(grow)
    port = int(host.url.rsplit(":", 1)[1].strip("/"))

    async def relay(down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        RELAYED.update((down_w, up_w))
        try:
            await asyncio.gather(pipe(down_r, up_w), pipe(up_r, down_w))
        finally:
            RELAYED.difference_update((down_w, up_w))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    relay_port = server.sockets[0].getsockname()[1]
    manifest = tesseron.InstanceManifest(
        instance_id=mint_instance_id(),
        app_name=app.descriptor.name,
        url=f"ws://127.0.0.1:{relay_port}/",
    )
    path = publish(manifest, Path(directory))
    print(f"url={host.url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        withdraw(path)
        server.close()
        await host.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
