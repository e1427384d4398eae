"""The Tesseron gateway end to end: our host over real loopback sockets, the client loop.

Each test drives a real :class:`TesseronApp` through :class:`Gateway` and the
in-process client loop, so cancellation, sampling, elicitation and progress are
checked across the whole path: model -> tool call -> actions/invoke -> handler.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
from gateway_helpers import serving, wait_until
from gateway_rig import NAME_SCHEMA, Model, Probe, call, client, probe_app, rig

from toolnexus_trio import (
    Answer,
    CancelToken,
    GenerateRequest,
    InProcessResponse,
    Request,
    ToolkitOptions,
    ToolSource,
    create_toolkit,
)
from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    Disconnected,
    Gateway,
    GatewayOptions,
)

# -- cancellation ------------------------------------------------------------------


async def test_turn_cancel_reaches_the_handler_and_the_call_is_cancelled() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rig(probe_app(probe)) as r:
            model = Model(InProcessResponse(tool_calls=[call("shop__slow", id="c1")]))
            result = None
            async with client(model).stream("go", r.toolkit) as events:
                async for event in events:
                    if event["type"] == "tool_call":
                        await probe.started.wait()
                        event["cancel"].cancel("user pressed stop")
                    elif event["type"] == "done":
                        result = event["result"]
            await probe.finished.wait()
    assert probe.cancelled_seen == [True]
    assert result is not None
    assert [(t.id, t.output, t.is_error) for t in result.tool_calls] == [("c1", "cancelled", True)]


async def test_a_cancel_token_on_gateway_invoke_sends_actions_cancel() -> None:
    probe = Probe()
    token = CancelToken()
    with trio.fail_after(10):
        async with rig(probe_app(probe)) as r:

            async def stop() -> None:
                await probe.started.wait()
                token.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop)
                with pytest.raises(ActionError) as caught:
                    await r.gateway.invoke("shop", "slow", {}, cancel=token)
            await probe.finished.wait()
    assert caught.value.code == -32001
    assert probe.cancelled_seen == [True]


# -- sampling ----------------------------------------------------------------------


async def test_a_handlers_sample_is_answered_by_the_loops_model() -> None:
    probe = Probe()

    async def answer(req: GenerateRequest) -> str:
        return "4"

    model = Model(InProcessResponse(tool_calls=[call("shop__ask", id="c1")]), sample=answer)
    with trio.fail_after(10):
        async with rig(probe_app(probe)) as r:
            result = await client(model).run("go", r.toolkit)
    assert result.tool_calls[0].output == "4"
    assert result.tool_calls[0].is_error is False
    assert len(model.sampled) == 1
    seen = model.sampled[0]
    assert list(seen.messages) == [{"role": "user", "content": "What is 2+2?"}]
    assert seen.max_tokens == 7
    assert seen.tools is None


async def test_a_custom_sampler_gets_prompt_max_tokens_and_schema() -> None:
    seen: list[tuple[str, int | None, Any]] = []

    async def sampler(prompt: str, max_tokens: int | None, schema: Any) -> str:
        seen.append((prompt, max_tokens, schema))
        return "four"

    with trio.fail_after(10):
        async with rig(probe_app(Probe()), sampler=sampler) as r:
            assert await r.gateway.invoke("shop", "ask", {}) == "four"
    assert seen == [("What is 2+2?", 7, None)]


async def test_model_sampling_outside_a_loop_is_not_available() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rig(probe_app(probe)) as r:
            with pytest.raises(ActionError) as caught:
                await r.gateway.invoke("shop", "ask", {})
    assert caught.value.code == -32006
    assert probe.errors == [(-32006, None)]


async def test_the_sampling_depth_limit_reaches_the_handler_with_its_data() -> None:
    probe = Probe()
    toolkit_box: list[Any] = []

    async def nested(req: GenerateRequest) -> str:
        # Inside the sampling call: a nested run whose tool samples again.
        inner = await loop.run("nested", toolkit_box[0])
        return inner.text

    model = Model(sample=nested)
    model.replies = []

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.tools is not None and req.messages[-1]["role"] == "user":
            return InProcessResponse(tool_calls=[call("shop__deep")])
        return await model(req)

    loop = client(generate)
    with trio.fail_after(20):
        async with rig(probe_app(probe)) as r:
            toolkit_box.append(r.toolkit)
            result = await loop.run("go", r.toolkit)
    assert probe.errors == [(-32008, {"depth": 4, "max": 3})]
    assert len(model.sampled) == 3  # depths 1, 2 and 3 ran; 4 was refused
    assert result.text == "limit"


# -- elicitation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "value", "confirmed"),
    [
        (Answer(id="", ok=True, data={"name": "Bob"}), {"name": "Bob"}, True),
        (Answer(id="", ok=False, reason="declined"), None, False),
        (Answer(id="", ok=False, reason="expired"), None, False),
        (None, None, False),  # wait_for raises: cancel
    ],
)
async def test_elicit_and_confirm_go_through_wait_for(
    answer: Answer | None, value: Any, confirmed: bool
) -> None:
    requests: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        requests.append(request)
        if answer is None:
            raise RuntimeError("no human around")
        return Answer(id=request.id, ok=answer.ok, data=answer.data, reason=answer.reason)

    model = Model(
        InProcessResponse(tool_calls=[call("shop__rename", id="a"), call("shop__delete", id="b")])
    )
    with trio.fail_after(10):
        async with rig(probe_app(Probe()), wait_for=wait_for) as r:
            result = await client(model).run("go", r.toolkit)
    outputs = {t.id: json.loads(t.output) for t in result.tool_calls}
    assert outputs == {"a": {"value": value}, "b": {"confirmed": confirmed}}
    by_prompt = {req.prompt: req for req in requests}
    assert set(by_prompt) == {"New name?", "Delete everything?"}
    assert all(req.kind == "input" for req in requests)
    assert by_prompt["New name?"].data == {"schema": NAME_SCHEMA}
    assert by_prompt["Delete everything?"].data == {
        "schema": {"type": "object", "properties": {}, "required": []}
    }


# -- progress and log --------------------------------------------------------------


async def test_progress_and_log_become_stream_events_and_metrics_in_order() -> None:
    metrics: list[dict[str, Any]] = []
    model = Model(InProcessResponse(tool_calls=[call("shop__work", id="w1")]))
    seen: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with (
            rig(probe_app(Probe())) as r,
            client(model, on_metric=metrics.append).stream("go", r.toolkit) as events,
        ):
            kinds = ("progress", "log", "tool_result")
            seen.extend([event async for event in events if event["type"] in kinds])
    progress = [e for e in seen if e["type"] == "progress"]
    assert [(e["percent"], e["message"]) for e in progress] == [(55, "first"), (55, "second")]
    assert {(e["id"], e["tool"]) for e in progress} == {("w1", "shop__work")}
    assert progress[0]["invocation_id"].startswith("inv_")
    logs = [e for e in seen if e["type"] == "log"]
    assert [(e["level"], e["message"], e["meta"]) for e in logs] == [
        ("info", "working", {"step": 2})
    ]
    assert [e["type"] for e in seen] == ["progress", "progress", "log", "tool_result"]
    tool_metrics = [m for m in metrics if m["event"] in ("progress", "log")]
    assert tool_metrics == [
        {"event": "progress", "tool": "shop__work", "percent": 55, "message": "first"},
        {"event": "progress", "tool": "shop__work", "percent": 55, "message": "second"},
        {"event": "log", "tool": "shop__work", "level": "info", "message": "working"},
    ]


# -- tools, results, resources -----------------------------------------------------


async def test_actions_become_tools_with_schema_source_hints_and_results() -> None:
    with trio.fail_after(10):
        async with rig(probe_app(Probe())) as r:
            add = r.toolkit.get("shop__add")
            assert add is not None
            assert add.source is ToolSource.TESSERON
            assert add.description == "Add two numbers"
            assert add.input_schema["required"] == ["a", "b"]
            assert add.hints is not None and add.hints.read_only and add.hints.idempotent
            rename = r.toolkit.get("shop__rename")
            assert rename is not None and rename.hints is not None and rename.hints.destructive
            assert r.gateway.tools()[0] is r.gateway.tools()[0]  # cached
            ok = await r.toolkit.execute("shop__add", {"a": 2, "b": 3})
            assert ok.output == "5" and not ok.is_error
            assert ok.metadata is not None
            assert ok.metadata["app"] == "shop" and ok.metadata["action"] == "add"
            bad = await r.gateway.tools()[0].call({"a": "x", "b": 1})
            assert bad.is_error  # refused by the tool's own schema before the wire
            assert await r.toolkit.read_resource("shop", "count") == 42
            with pytest.raises(LookupError):
                await r.toolkit.read_resource("nope", "count")


async def test_host_errors_come_back_as_error_results_with_code_and_data() -> None:
    app = probe_app(Probe())

    @app.action("fail")
    async def fail(input: Any, ctx: ActionContext) -> Any:
        raise ActionError.handler("cart is locked", {"cart": 1})

    with trio.fail_after(10):
        async with rig(app) as r:
            result = await r.toolkit.execute("shop__fail", {})
    assert result.is_error
    assert result.output == "cart is locked"
    assert result.metadata == {"code": -32005, "data": {"cart": 1}}


async def test_actions_added_and_removed_on_the_host_update_the_toolkit() -> None:
    app = probe_app(Probe())
    with trio.fail_after(10):
        async with rig(app) as r:
            before = r.gateway.version

            @app.action("extra")
            async def extra(input: Any, ctx: ActionContext) -> Any:
                return "extra!"

            await wait_until(lambda: r.toolkit.get("shop__extra") is not None)
            assert r.gateway.version > before
            assert (await r.toolkit.execute("shop__extra", {})).output == "extra!"
            app.remove_action("extra")
            await wait_until(lambda: r.toolkit.get("shop__extra") is None)
            assert r.toolkit.get("shop__add") is not None


# -- failures and teardown ---------------------------------------------------------


async def test_a_host_that_disappears_mid_call_gives_an_error_result() -> None:
    probe = Probe()
    app = probe_app(probe)
    model = Model(InProcessResponse(tool_calls=[call("shop__slow", id="c1")]))
    with trio.fail_after(10):
        async with Gateway(GatewayOptions(auto_claim=True)) as gw, trio.open_nursery() as nursery:
            host_scope = trio.CancelScope()

            async def run_host(*, task_status: Any) -> None:
                with host_scope:
                    async with serving(app) as host:
                        task_status.started(host)
                        await trio.sleep_forever()

            host = await nursery.start(run_host)
            await gw.connect(host.url)
            toolkit = await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False))

            async def vanish() -> None:
                await probe.started.wait()
                host_scope.cancel()

            nursery.start_soon(vanish)
            result = await client(model).run("go", toolkit)
    record = result.tool_calls[0]
    assert record.is_error
    assert record.metadata is not None and record.metadata["code"] == -32010


async def test_closing_the_toolkit_closes_the_gateway_connections() -> None:
    with trio.fail_after(10):
        async with rig(probe_app(Probe())) as r:
            events = r.host.events()
            await r.toolkit.aclose()
            while not isinstance(await events.receive(), Disconnected):
                pass
            assert not r.session.connected
            assert r.gateway.sessions() == []
            assert r.gateway.tools() == []
            with pytest.raises(RuntimeError):
                await r.gateway.connect(r.host.url)


async def test_without_sampler_or_wait_for_the_welcome_says_false() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rig(probe_app(probe), sampler=None) as r:
            await wait_until(lambda: r.host.welcome is not None)
            welcome = r.host.welcome
            assert welcome is not None
            assert welcome.capabilities.sampling is False
            assert welcome.capabilities.elicitation is False
            result = await r.toolkit.execute("shop__ask", {})
            declined = await r.toolkit.execute("shop__delete", {})
    assert result.metadata is not None and result.metadata["code"] == -32006
    assert json.loads(declined.output) == {"confirmed": False}


async def test_with_sampler_and_wait_for_the_welcome_says_true() -> None:
    async def wait_for(request: Request) -> Answer:
        return Answer(id=request.id, ok=True)

    with trio.fail_after(10):
        async with rig(probe_app(Probe()), wait_for=wait_for) as r:
            await wait_until(lambda: r.host.welcome is not None)
            welcome = r.host.welcome
            assert welcome is not None
            assert welcome.capabilities.sampling is True
            assert welcome.capabilities.elicitation is True


async def test_a_gateway_change_wakes_the_toolkits_change_signal() -> None:
    # The toolkit waits on the gateway's own wait_changed (no polling): a host removing
    # an action moves the toolkit's version, and a served toolkit can tell its clients.
    app = probe_app(Probe())
    with trio.fail_after(10):
        async with rig(app) as r:
            since = r.toolkit.version
            assert "shop__delete" in [t.name for t in r.toolkit.tools()]
            async with trio.open_nursery() as nursery:
                woke: list[int] = []

                async def wait() -> None:
                    woke.append(await r.toolkit.wait_changed(since))

                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()
                assert woke == []
                app.remove_action("delete")
            assert woke and woke[0] != since
            assert "shop__delete" not in [t.name for t in r.toolkit.tools()]
