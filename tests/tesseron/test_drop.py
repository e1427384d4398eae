"""Transport drop: pending requests fail with -32010, then everything winds down."""

from __future__ import annotations

from typing import Any

import trio
from gateway_helpers import dial, gateway, serving, wait_until

from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    ElicitRequest,
    LogEntry,
    SampleRequest,
    TesseronApp,
)


async def test_drop_fails_pending_requests_then_cancels() -> None:
    """Seed: a pending confirm (and a clone's later requests) get TRANSPORT_CLOSED,
    progress and log become silent no-ops, the invocation is cancelled, the
    subscription stops, and the host takes the next dial. Nothing hangs."""
    app = TesseronApp("t", "T")
    log: list[Any] = []
    cleanups: list[str] = []
    after_drop = trio.Event()

    @app.action("ask")
    async def ask(input: Any, ctx: ActionContext) -> Any:
        clone = ctx.clone()
        try:
            await ctx.confirm("Really?")
        except ActionError as exc:
            log.append(("confirm", int(exc.code)))
        log.append(("cancel flag", ctx.is_cancelled()))
        with trio.CancelScope(shield=True):
            await clone.progress(50, "after drop")  # silently discarded
            await clone.log(LogEntry.info("after drop"))
            for call in (
                lambda: clone.sample(SampleRequest("p")),
                lambda: clone.elicit(ElicitRequest("q")),
                lambda: clone.confirm("again?"),
            ):
                try:
                    await call()
                except ActionError as exc:
                    log.append(("later", int(exc.code)))
        after_drop.set()
        try:
            await trio.sleep_forever()
        finally:
            log.append("handler cancelled")

    def subscribe(emit: Any) -> Any:
        return lambda: cleanups.append("cleanup")

    app.resource("r", lambda: 1, subscribable=True, subscribe=subscribe)

    with trio.fail_after(10):
        async with serving(app) as host:
            async with gateway(host) as gw:
                sid = gw.request("resources/subscribe", {"name": "r", "subscriptionId": "sub-1"})
                assert (await gw.response(sid))["result"] is None
                gw.invoke("ask", {})
                await gw.expect_method("elicitation/request")
                # ... and the gateway goes away without answering.
            await after_drop.wait()
            await wait_until(lambda: "handler cancelled" in log)
            assert log == [
                ("confirm", -32010),
                ("cancel flag", True),
                ("later", -32010),
                ("later", -32010),
                ("later", -32010),
                "handler cancelled",
            ]
            assert cleanups == ["cleanup"]
            # The next dial is served.
            async with gateway(host) as gw2:
                assert (await gw2.call("missing"))["error"]["code"] == -32003


async def test_drop_during_a_shielded_handler_still_frees_the_slot() -> None:
    """A handler that shields itself cannot be interrupted (Trio cannot kill a task),
    but the connection slot is released at once, so the next dial is served."""
    app = TesseronApp("t", "T")
    release = trio.Event()
    started = trio.Event()

    @app.action("stuck")
    async def stuck(input: Any, ctx: ActionContext) -> Any:
        started.set()
        with trio.CancelScope(shield=True):
            await release.wait()
        return None

    with trio.fail_after(10):
        async with serving(app) as host:
            try:
                async with gateway(host) as gw:
                    gw.invoke("stuck", {})
                    await started.wait()
                await wait_until(lambda: not host.connected)
                async with gateway(host) as gw2:
                    assert (await gw2.call("missing"))["error"]["code"] == -32003
            finally:
                release.set()  # on every path, or serving() would wait for it forever


async def test_listen_exit_cancels_running_handlers() -> None:
    app = TesseronApp("t", "T")
    state: list[str] = []

    @app.action("forever")
    async def forever(input: Any, ctx: ActionContext) -> Any:
        state.append("started")
        try:
            await trio.sleep_forever()
        finally:
            state.append("cancelled")

    with trio.fail_after(10):
        async with serving(app) as host, dial(host) as gw:
            await gw.handshake()
            gw.invoke("forever", {})
            await wait_until(lambda: state)
    # No task outlives listen(): the handler has been cancelled and has finished.
    assert state == ["started", "cancelled"]
