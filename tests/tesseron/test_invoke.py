"""Invocations over a real loopback socket: results, errors, cancel, timeout."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
from gateway_helpers import gateway, serving, wait_until

from toolnexus_trio.tesseron import ActionContext, ActionError, TesseronApp


def make_app() -> TesseronApp:
    return TesseronApp("calc", "Calculator")


async def test_success_echoes_ids_and_wraps_output() -> None:
    app = make_app()

    @app.action("add", input_schema={"type": "object", "required": ["a", "b"]})
    async def add(input: Any, ctx: ActionContext) -> Any:
        return {"sum": input["a"] + input["b"]}

    @app.action("nothing")
    async def nothing(input: Any, ctx: ActionContext) -> None:
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            for rid in ("inv-1", 17, None):
                resp = await gw.call("add", {"a": 1, "b": 2}, id=rid, invocation_id="i-1")
                assert resp == {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {"invocationId": "i-1", "output": {"sum": 3}},
                }
            resp = await gw.call("nothing", {}, invocation_id="i-2")
            assert resp["result"] == {"invocationId": "i-2", "output": None}


async def test_unknown_action_and_invalid_input() -> None:
    app = make_app()
    calls: list[Any] = []

    @app.action("add", input_schema={"type": "object", "properties": {"a": {"type": "integer"}}})
    async def add(input: Any, ctx: ActionContext) -> Any:
        calls.append(input)
        return 1

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            resp = await gw.call("nope", {})
            assert resp["error"] == {"code": -32003, "message": "Action not found: nope"}
            resp = await gw.call("add", {"a": "x"})
            assert resp["error"]["code"] == -32004
            assert resp["error"]["data"] == [
                {"message": "$.a must be integer", "path": ["a"], "rule": "type"}
            ]
    assert calls == []


@attrs.frozen
class AddInput:
    a: int
    b: int = 0


@attrs.frozen
class AddOutput:
    total: int


async def test_attrs_input_is_published_structured_and_output_unstructured() -> None:
    app = make_app()
    seen: list[AddInput] = []

    @app.action("add")
    async def add(input: AddInput, ctx: ActionContext) -> AddOutput:
        seen.append(input)
        return AddOutput(input.a + input.b)

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            assert gw.hello is not None
            (manifest,) = gw.hello["params"]["actions"]
            assert manifest["inputSchema"]["properties"] == {
                "a": {"type": "integer"},
                "b": {"type": "integer"},
            }
            assert manifest["inputSchema"]["required"] == ["a"]
            resp = await gw.call("add", {"a": 2, "b": 3})
            assert resp["result"]["output"] == {"total": 5}
            resp = await gw.call("add", {"b": 3})
            assert resp["error"]["code"] == -32004
    assert seen == [AddInput(2, 3)]


async def test_error_mapping() -> None:
    app = make_app()

    @app.action("domain")
    async def domain(input: Any, ctx: ActionContext) -> Any:
        raise ActionError.handler("Cart is locked", {"cart": 7})

    @app.action("typed")
    async def typed(input: Any, ctx: ActionContext) -> Any:
        raise ActionError.protocol(-32009, "nope", [1])

    @app.action("boom")
    async def boom(input: Any, ctx: ActionContext) -> Any:
        raise RuntimeError("secret database password")

    @app.action("unserialisable")
    async def unserialisable(input: Any, ctx: ActionContext) -> Any:
        return object()

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            assert (await gw.call("domain"))["error"] == {
                "code": -32005,
                "message": "Cart is locked",
                "data": {"cart": 7},
            }
            assert (await gw.call("typed"))["error"] == {
                "code": -32009,
                "message": "nope",
                "data": [1],
            }
            assert (await gw.call("boom"))["error"] == {"code": -32603, "message": "Internal error"}
            assert (await gw.call("unserialisable"))["error"]["code"] == -32603


@pytest.mark.parametrize("style", ["shield", "thread", "shield-then-raise"])
async def test_cancel_is_answered_before_a_stubborn_handler_finishes(style: str) -> None:
    """The -32001 goes out while a handler that shields itself (or sits in an
    uncancellable thread call) is still running; its late result is dropped."""
    app = make_app()
    release = trio.Event()
    thread_release = threading.Event()
    started = trio.Event()
    finished: list[str] = []
    flags: list[bool] = []

    @app.action("stubborn")
    async def stubborn(input: Any, ctx: ActionContext) -> Any:
        started.set()
        if style == "thread":
            # Not cancellable: Trio waits for the thread to return.
            await trio.to_thread.run_sync(thread_release.wait)
        else:
            with trio.CancelScope(shield=True):
                await release.wait()
        flags.append(ctx.is_cancelled())
        finished.append("done")
        if style == "shield-then-raise":
            raise ValueError("a late failure must not become a second answer")
        return "late result"

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            try:
                rid = gw.invoke("stubborn", {}, invocation_id="i-1")
                await started.wait()
                gw.cancel("i-1")
                resp = await gw.response(rid)
                assert resp["error"] == {"code": -32001, "message": "Invocation cancelled"}
                assert finished == []  # answered while the handler still runs
            finally:
                # Released on every path: a shielded handler would otherwise hold
                # serving() open and turn a failed assertion into a hang.
                release.set()
                thread_release.set()
            await wait_until(lambda: finished)
            # The late result is dropped: the next frame answers the next request.
            assert (await gw.call("missing"))["error"]["code"] == -32003
    assert flags == [True]


async def test_timeout_is_answered_first_and_the_handler_sees_the_flag(
    socket_autojump_clock: trio.abc.Clock,
) -> None:
    app = make_app()
    release = trio.Event()
    flags: list[bool] = []

    @app.action("slow", timeout_ms=1000)
    async def slow(input: Any, ctx: ActionContext) -> Any:
        with trio.CancelScope(shield=True):
            await ctx.cancelled()
            flags.append(ctx.is_cancelled())
            await release.wait()
        return "late"

    with trio.fail_after(100):
        async with serving(app) as host, gateway(host) as gw:
            try:
                start = trio.current_time()
                resp = await gw.call("slow", {}, invocation_id="i-9")
                assert resp["error"]["code"] == -32002
                assert trio.current_time() - start >= 1.0  # not before the deadline
                await wait_until(lambda: flags)
            finally:
                release.set()  # the handler is shielded: release it on every path
            assert (await gw.call("missing"))["error"]["code"] == -32003
    assert flags == [True]


async def test_one_timer_serves_many_deadlines(socket_autojump_clock: trio.abc.Clock) -> None:
    app = make_app()

    @app.action("slow", timeout_ms=3000)
    async def slow(input: Any, ctx: ActionContext) -> Any:
        await trio.sleep(float(input["sleep"]))
        return input["sleep"]

    @app.action("fast", timeout_ms=1000)
    async def fast(input: Any, ctx: ActionContext) -> Any:
        await trio.sleep_forever()

    with trio.fail_after(100):
        async with serving(app) as host, gateway(host) as gw:
            r1 = gw.invoke("slow", {"sleep": 10})
            r2 = gw.invoke("fast", {})
            r3 = gw.invoke("slow", {"sleep": 2})
            got: dict[Any, Any] = {}
            for _ in range(3):
                frame = await gw.recv()
                got[frame["id"]] = frame
            assert got[r1]["error"]["code"] == -32002
            assert got[r2]["error"]["code"] == -32002
            assert got[r3]["result"]["output"] == 2


async def test_a_deadline_survives_many_finished_invocations(
    socket_autojump_clock: trio.abc.Clock,
) -> None:
    """Finished invocations are dropped from the timer's queues in bulk; a pending one
    in the same queue and in another one still times out."""
    app = make_app()

    @app.action("stuck", timeout_ms=1000)
    async def stuck(input: Any, ctx: ActionContext) -> Any:
        await trio.sleep_forever()

    @app.action("quick", timeout_ms=1000)
    async def quick(input: Any, ctx: ActionContext) -> Any:
        return input

    @app.action("echo")  # the default timeout: another queue
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    with trio.fail_after(100):
        async with serving(app) as host, gateway(host) as gw:
            first = gw.invoke("stuck", {})
            done = [gw.invoke("quick", n) for n in range(150)]
            middle = gw.invoke("stuck", {})
            done += [gw.invoke("echo", {"n": n}) for n in range(150)]  # another timeout
            got: dict[Any, Any] = {}
            while len(got) < 302:
                frame = await gw.recv()
                got[frame["id"]] = frame
    assert all("result" in got[rid] for rid in done)
    assert got[first]["error"]["code"] == got[middle]["error"]["code"] == -32002


async def test_concurrent_invocations_are_independent() -> None:
    app = make_app()
    release = trio.Event()

    @app.action("wait")
    async def wait(input: Any, ctx: ActionContext) -> Any:
        await release.wait()
        return input["n"]

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            ids = [gw.invoke("wait", {"n": n}, invocation_id=f"i-{n}") for n in range(3)]
            await trio.testing.wait_all_tasks_blocked()
            gw.cancel("i-1")
            assert (await gw.recv())["id"] == ids[1]
            release.set()
            results = {}
            for _ in range(2):
                frame = await gw.recv()
                results[frame["id"]] = frame["result"]["output"]
            assert results == {ids[0]: 0, ids[2]: 2}


async def test_ten_thousand_concurrent_invocations_all_answered() -> None:
    app = make_app()
    n = 10_000
    gate = trio.Event()
    running = 0

    @app.action("hold")
    async def hold(input: Any, ctx: ActionContext) -> Any:
        nonlocal running
        running += 1
        if running == n:
            gate.set()
        await gate.wait()
        return input

    with trio.fail_after(60):
        async with serving(app) as host, gateway(host) as gw:
            ids = {gw.invoke("hold", i) for i in range(n)}
            answered: set[Any] = set()
            while len(answered) < n:
                frame = await gw.recv()
                assert "result" in frame, frame
                answered.add(frame["id"])
            assert answered == ids


async def test_duplicate_invocation_id_is_refused() -> None:
    app = make_app()
    release = trio.Event()

    @app.action("wait")
    async def wait(input: Any, ctx: ActionContext) -> Any:
        await release.wait()
        return 1

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            r1 = gw.invoke("wait", {}, invocation_id="same")
            r2 = gw.invoke("wait", {}, invocation_id="same")
            assert (await gw.response(r2))["error"]["code"] == -32600
            release.set()
            assert (await gw.response(r1))["result"]["output"] == 1
