"""A Tesseron host on our SDK for the ``gateway --mcp`` tests (run as a subprocess).

``python our_host.py INSTANCES_DIR`` publishes its manifest there and serves until
killed. Actions: ``echo``, ``add`` (typed: bad input is -32004), ``fail`` (-32005),
``steps`` (progress and a log), ``slow`` (sleeps until cancelled; ``seen`` tells),
``stubborn`` (shields itself from cancellation), ``whoami`` (the agent and its
capabilities as the gateway told them), ``ask_model`` (sample), ``nest``
(samples: the client may call ``nest`` again from its sampling), ``confirm``,
``rename`` (elicit), ``bump`` (publishes the ``counter`` resource), ``grow`` (registers
``extra``: ``actions/list_changed``) and ``drop`` (closes the gateway connection so the
gateway resumes). Its log (a refused resume included) goes to stderr.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import attrs
import trio

from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    ElicitRequest,
    LogEntry,
    SampleRequest,
    TesseronApp,
)

SEEN: dict[str, Any] = {"slow_cancelled": None, "cancelled_at": None, "slow_started": 0}


@attrs.frozen
class Numbers:
    a: int
    b: int


def build() -> TesseronApp:
    app = TesseronApp("ours", "Our test host")
    state = {"counter": 0}
    counter = app.resource("counter", lambda: state["counter"], "A counter", subscribable=True)

    @app.action("echo", "Echo the input", annotations={"readOnly": True, "idempotent": True})
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    @app.action("add", "Add two integers")
    async def add(input: Numbers, ctx: ActionContext) -> int:
        return input.a + input.b

    @app.action("fail", "Always fails", annotations={"destructive": True})
    async def fail(input: Any, ctx: ActionContext) -> Any:
        raise ActionError.handler("it broke", {"why": "on purpose"})

    @app.action("steps", "Reports progress")
    async def steps(input: Any, ctx: ActionContext) -> str:
        await ctx.log(LogEntry.warn("careful").meta({"k": 1}))
        for percent in (0, 30, 20, 60, 100):  # 0 first (it goes); 20 goes back: kept 30
            await ctx.progress(percent=percent, message=f"at {percent}")
        return "done"

    @app.action("slow", "Sleeps until cancelled", timeout_ms=120_000)
    async def slow(input: Any, ctx: ActionContext) -> str:
        SEEN["slow_started"] += 1  # a test's signal that the call reached the handler
        try:
            await trio.sleep(60)
        finally:
            SEEN["slow_cancelled"] = ctx.is_cancelled()
            SEEN["cancelled_at"] = time.monotonic()  # the benchmark's cancel latency
        return "finished"

    @app.action("stubborn", "Ignores cancellation for a while", timeout_ms=120_000)
    async def stubborn(input: Any, ctx: ActionContext) -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(float(input.get("seconds", 0.5)) if isinstance(input, dict) else 0.5)
        return "late"

    @app.action("seen", "What slow saw")
    async def seen(input: Any, ctx: ActionContext) -> Any:
        return dict(SEEN)

    @app.action("whoami", "The agent and capabilities the gateway told this host")
    async def whoami(input: Any, ctx: ActionContext) -> Any:
        caps = ctx.agent_capabilities
        return {
            "agent": ctx.agent.name,
            "sampling": caps.sampling,
            "elicitation": caps.elicitation,
        }

    @app.action("ask_model", "Ask the agent's model")
    async def ask_model(input: Any, ctx: ActionContext) -> Any:
        return {"answer": await ctx.sample(SampleRequest("What is 6 times 7?", max_tokens=5))}

    @app.action("nest", "Samples; the model may call nest again")
    async def nest(input: Any, ctx: ActionContext) -> Any:
        return {"answer": await ctx.sample(SampleRequest("nest again?"))}

    @app.action("ask_anyway", "Sample and elicit even when the agent lacks the capability")
    async def ask_anyway(input: Any, ctx: ActionContext) -> Any:
        # Test-only: a host that ignores the negotiated capabilities, so the gateway's
        # own refusals (-32006 {clientName}, -32007) are what answers.
        conn = ctx._session
        conn._capabilities = attrs.evolve(  # type: ignore[attr-defined]
            conn.capabilities, sampling=True, elicitation=True
        )
        if input.get("what") == "elicit":
            return await ctx.elicit(ElicitRequest("Name?", None))
        return await ctx.sample(SampleRequest("What is 6 times 7?"))

    @app.action("confirm", "Confirm something")
    async def confirm(input: Any, ctx: ActionContext) -> Any:
        return {"yes": await ctx.confirm("Really?")}

    @app.action("rename", "Ask for a new name")
    async def rename(input: Any, ctx: ActionContext) -> Any:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        return {"value": await ctx.elicit(ElicitRequest("New name?", schema))}

    @app.action("bump", "Increment the counter resource")
    async def bump(input: Any, ctx: ActionContext) -> int:
        state["counter"] += 1
        await counter.publish(state["counter"])
        return state["counter"]

    return app


async def main(directory: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)  # a refused resume shows
    app = build()
    async with app.listen(manifest_dir=directory) as host:

        @app.action("grow", "Register the action extra (actions/list_changed)")
        async def grow(input: Any, ctx: ActionContext) -> str:
            @app.action("extra", "Added at run time")
            async def extra(input: Any, ctx: ActionContext) -> str:
                return "extra"

            return "grown"

        @app.action("drop", "Close the gateway connection (it redials and resumes)")
        async def drop(input: Any, ctx: ActionContext) -> str:
            async def later() -> None:
                await trio.sleep(0.05)
                conn = host._active  # test-only: cut the connection as a network drop would
                if conn is not None:
                    await conn._ws.aclose(1001, "dropped on purpose")

            host_nursery.start_soon(later)
            return "dropping"

        async with trio.open_nursery() as host_nursery:
            print(f"url={host.url}", flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
