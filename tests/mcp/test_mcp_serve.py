"""A toolkit served as an MCP server (SPEC §7C and beyond), driven by the SDK's own client
over streamable HTTP on loopback (both protocol eras) and over stdio (the CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_helpers import pid_alive, stdio

from toolnexus_trio import (
    Request,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_toolkit,
    define_tool,
    empty_schema,
    open_toolkit,
    pending,
)
from toolnexus_trio._runctx import current_run
from toolnexus_trio.mcp import CallInfo, MCPServeConfig, McpServing

ROOT = Path(__file__).resolve().parents[2]
ERAS = ["legacy", "auto"]  # the initialize handshake (2025-11-25) and 2026-07-28


class Probe:
    def __init__(self) -> None:
        self.cancelled: list[tuple[str, bool]] = []
        self.started = trio.Event()
        self.contexts: list[ToolContext] = []


def tools(probe: Probe) -> list[Tool]:
    async def hello(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"hello {args['name']}"

    async def boom(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("kaput")

    async def whoami(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(ctx.call_id)

    async def wait(args: dict[str, Any], ctx: ToolContext) -> str:
        probe.contexts.append(ctx)
        probe.started.set()
        try:
            await trio.sleep_forever()
        finally:
            probe.cancelled.append((args["tag"], True))
        return "never"

    async def progressive(args: dict[str, Any], ctx: ToolContext) -> str:
        services = current_run.get()
        assert services is not None and services.emit is not None
        for percent in (25, 25, 75):  # a repeat is not forwarded: MCP progress increases
            await services.emit(
                {
                    "type": "progress",
                    "id": ctx.call_id,
                    "tool": "progressive",
                    "percent": percent,
                    "message": f"at {percent}",
                }
            )
        await services.emit(
            {
                "type": "log",
                "tool": "progressive",
                "level": "warn",
                "message": "careful",
                "meta": {"k": 1},
            }
        )
        return "done"

    async def suspend(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is not None:
            return ToolResult.ok(f"answered {json.dumps(ctx.answer.data, sort_keys=True)}")
        kind = args["kind"]
        if kind == "authorization":
            return pending(Request(kind=kind, prompt="Log in", url="https://auth.example/go"))
        if kind == "input":
            schema = {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            }
            return pending(Request(kind=kind, prompt="Code?", data={"schema": schema}))
        return pending(Request(kind=kind, prompt=f"Allow {kind}?"))

    def obj(props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(props)}

    return [
        define_tool("hello", "Say hello.", obj({"name": {"type": "string"}}), hello),
        define_tool("boom", "Fails.", None, boom),
        define_tool("whoami", "The call id.", None, whoami),
        define_tool("wait", "Waits until cancelled.", obj({"tag": {"type": "string"}}), wait),
        define_tool("progressive", "Reports progress.", None, progressive),
        Tool("suspend", "Suspends.", obj({"kind": {"type": "string"}}), ToolSource.CUSTOM, suspend),
    ]


async def toolkit_for(probe: Probe) -> Any:
    return await create_toolkit(ToolkitOptions(extra_tools=tools(probe), builtins=False))


async def accept(ctx: Any, params: Any) -> types.ElicitResult:
    content = (
        {"code": "42"}
        if getattr(params, "requested_schema", {}).get("properties", {}).get("code")
        else {}
    )
    return types.ElicitResult(action="accept", content=content)


@pytest.mark.parametrize("era", ERAS)
async def test_list_call_errors_and_on_call(era: str) -> None:
    probe = Probe()
    seen: list[CallInfo] = []
    toolkit = await toolkit_for(probe)
    profile = MCPServeConfig(
        name="trio-kit", version="9.9", tools=["hello", "boom", "whoami", "ghost"]
    )
    async with (
        toolkit.serve(mcp=profile, on_call=seen.append) as served,
        Client(served.url, mode=era) as client,
    ):
        assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/mcp")
        if era == "legacy":
            assert client.server_info is not None and (
                client.server_info.name,
                client.server_info.version,
            ) == ("trio-kit", "9.9")
            assert (
                client.server_capabilities.tools is not None
                and client.server_capabilities.tools.list_changed
            )
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == [
            "hello",
            "boom",
            "whoami",
        ]  # filtered, 'ghost' ignored
        assert listed.tools[0].input_schema["required"] == ["name"]
        result = await client.call_tool("hello", {"name": "Trio"})
        assert (result.content[0].text, result.is_error) == ("hello Trio", False)  # type: ignore[union-attr]
        failed = await client.call_tool("boom", {})
        assert failed.is_error and failed.content[0].text == "kaput"  # type: ignore[union-attr]
        with pytest.raises(MCPError) as info:
            await client.call_tool("wait", {"tag": "x"})  # not exposed by the profile
        assert info.value.error.code == types.INVALID_PARAMS
        bad = await client.call_tool("hello", {"name": 3})
        assert bad.is_error and "Invalid arguments" in bad.content[0].text  # type: ignore[union-attr]
        call_id = (await client.call_tool("whoami", {})).content[0].text  # type: ignore[union-attr]
        assert call_id.isdigit()  # the JSON-RPC request id of that tools/call
    assert [(c.name, c.source, c.is_error) for c in seen] == [
        ("hello", "native", False),
        ("boom", "native", True),
        ("hello", "native", True),
        ("whoami", "native", False),
    ]
    assert all(c.ms >= 0 for c in seen)


@pytest.mark.parametrize("era", ERAS)
async def test_client_cancel_reaches_the_tool_at_once(era: str) -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    async with toolkit.serve() as served, Client(served.url, mode=era) as client:
        with trio.move_on_after(30) as scope:  # a bound, not a measurement
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    await client.call_tool("wait", {"tag": era})

                nursery.start_soon(call)
                await probe.started.wait()
                nursery.cancel_scope.cancel()
            with trio.fail_after(10):
                while not probe.cancelled:  # noqa: ASYNC110 - set by the server side
                    await trio.sleep(0.01)
        assert not scope.cancelled_caught
        assert probe.cancelled == [(era, True)]
        assert probe.contexts[0].cancel.is_cancelled
        # the session is still usable
        assert (await client.call_tool("hello", {"name": "again"})).content[0].text == "hello again"  # type: ignore[union-attr]


async def test_progress_and_logs_reach_the_client() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with (
        toolkit.serve() as served,
        Client(served.url, mode="legacy", logging_callback=on_log) as client,
    ):
        result = await client.call_tool("progressive", {}, progress_callback=on_progress)
        assert result.content[0].text == "done"  # type: ignore[union-attr]
        # without a progressToken nothing is sent, and the call still works
        assert (await client.call_tool("progressive", {})).content[0].text == "done"  # type: ignore[union-attr]
    assert progress == [(25.0, 100.0, "at 25"), (75.0, 100.0, "at 75")]
    assert [(entry.level, entry.logger, entry.data) for entry in logs][:1] == [
        ("warning", "progressive", {"message": "careful", "k": 1})
    ]


async def test_suspension_is_answered_by_elicitation_legacy() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        if params.message == "Allow deny?":
            return types.ElicitResult(action="decline")
        return await accept(ctx, params)

    async with (
        toolkit.serve() as served,
        Client(served.url, mode="legacy", elicitation_callback=elicit) as client,
    ):

        def text(result: Any) -> str:
            return result.content[0].text  # type: ignore[no-any-return]

        assert text(await client.call_tool("suspend", {"kind": "approval"})) == "answered null"
        assert asked[0].mode == "form" and asked[0].requested_schema == {
            "type": "object",
            "properties": {},
        }
        assert (
            text(await client.call_tool("suspend", {"kind": "input"})) == 'answered {"code": "42"}'
        )
        assert text(await client.call_tool("suspend", {"kind": "authorization"})) == "answered null"
        assert (asked[2].mode, asked[2].url) == ("url", "https://auth.example/go")
        declined = await client.call_tool("suspend", {"kind": "deny"})
        assert declined.is_error and text(declined) == "declined/expired: Allow deny?"


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_is_told_what_was_asked(era: str) -> None:
    toolkit = await toolkit_for(Probe())
    async with toolkit.serve() as served, Client(served.url, mode=era) as plain:
        refused = await plain.call_tool("suspend", {"kind": "approval"})
    assert refused.is_error
    assert "waiting for approval: Allow approval?" in refused.content[0].text  # type: ignore[union-attr]
    assert "cannot be answered here" in refused.content[0].text  # type: ignore[union-attr]


async def test_suspension_is_answered_by_input_required_modern() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return await accept(ctx, params)

    async with (
        toolkit.serve() as served,
        Client(served.url, mode="auto", elicitation_callback=elicit) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("suspend", {"kind": "input"})
        assert result.content[0].text == 'answered {"code": "42"}'  # type: ignore[union-attr]
        assert asked[0].message == "Code?"
        # a forged or misdirected request_state is refused
        first = await client.session.call_tool(
            "suspend", {"kind": "input"}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        with pytest.raises(MCPError, match="request_state"):
            await client.session.call_tool(
                "suspend",
                {"kind": "other"},
                request_state=first.request_state,
                allow_input_required=True,
            )
        with pytest.raises(MCPError, match="request_state"):
            await client.session.call_tool(
                "suspend",
                {"kind": "input"},
                request_state=first.request_state[:-4] + "AAA=",
                allow_input_required=True,
            )


async def test_tools_list_changed_reaches_connected_clients() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with (
        toolkit.serve() as served,
        Client(served.url, mode="legacy", message_handler=on_message) as client,
    ):
        assert "late" not in [t.name for t in (await client.list_tools()).tools]

        async def late(args: dict[str, Any], ctx: ToolContext) -> str:
            return "late"

        toolkit.register(define_tool("late", "Late.", empty_schema(), late))
        with trio.fail_after(10):
            await changed.wait()
        assert "late" in [t.name for t in (await client.list_tools()).tools]


async def test_served_in_a_nursery_and_closed() -> None:
    toolkit = await create_toolkit(ToolkitOptions(builtins=False))
    async with trio.open_nursery() as nursery:
        served: McpServing = await nursery.start(toolkit.serve())
        async with Client(served.url, mode="legacy") as client:
            assert (await client.list_tools()).tools == []
        await served.aclose()
    with pytest.raises(RuntimeError):
        McpServing(toolkit).url  # noqa: B018


# ---------------------------------------------------------------------- the CLI, stdio


async def test_cli_serve_stdio_through_both_hops(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"ev": stdio()}, "mcpServer": {"name": "gw"}, "builtins": False})
    )
    bad_lines: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            bad_lines.append(message)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolnexus_trio", "serve", "--stdio", "--mcp-config", str(config)],
        env={"PYTHONPATH": str(ROOT)},
    )
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        assert client.server_info is not None and client.server_info.name == "gw"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[:2] == ["ev_add", "ev_echo"] and "question" not in names
        added = await client.call_tool("ev_add", {"a": 20, "b": 22})
        assert added.content[0].text == '{"result":42}'  # type: ignore[union-attr]
        with trio.move_on_after(1):
            await client.call_tool("ev_slow", {"tag": "two-hops"})
        seen = await client.call_tool("ev_seen_cancels", {})
        assert seen.content[0].text == '{"result":"two-hops"}'  # type: ignore[union-attr]
        inner = int(json.loads((await client.call_tool("ev_pids", {})).content[0].text)["result"])  # type: ignore[union-attr]
        assert pid_alive(inner)
    assert bad_lines == []  # nothing but protocol on stdout
    with trio.fail_after(10):
        while pid_alive(inner):  # noqa: ASYNC110 - another process's state
            await trio.sleep(0.01)


def test_cli_serve_http_prints_its_url_and_sigterm_stops_its_servers(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ev": stdio()}}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolnexus_trio",
            "serve",
            "--no-builtins",
            "--mcp-config",
            str(config),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving MCP on http://127.0.0.1:") and "/mcp" in line
        pids: list[int] = []

        async def check() -> None:
            async with Client(line.split()[3], mode="legacy") as client:
                assert (await client.list_tools()).tools[0].name == "ev_add"
                result = await client.call_tool("ev_pids", {})
                pids.append(int(json.loads(result.content[0].text)["result"]))  # type: ignore[union-attr]

        trio.run(check)
        assert pid_alive(pids[0])
        proc.terminate()  # SIGTERM: the toolkit closes, its MCP server is stopped
        assert proc.wait(timeout=30) == 0
        assert not pid_alive(pids[0])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_cli_serve_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"command": 5}}}')
    done = subprocess.run(
        [sys.executable, "-m", "toolnexus_trio", "serve", "--stdio", "--mcp-config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "command must be a string" in done.stderr
    assert done.stdout == ""


async def test_open_toolkit_serves_an_mcp_union() -> None:
    # Sanity of the composition the docs show: MCP tools + ours, served as one.
    probe = Probe()
    options = ToolkitOptions(mcp={"ev": stdio()}, extra_tools=tools(probe)[:1], builtins=False)
    async with (
        open_toolkit(options) as toolkit,
        toolkit.serve() as served,
        Client(served.url, mode="legacy") as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[0] == "ev_add" and names[-1] == "hello"


# ---------------------------------------------------------------------- suspension (SPEC §10)


@pytest.mark.parametrize("era", ERAS)
async def test_question_builtin_is_asked_through_the_client(era: str) -> None:
    toolkit = await create_toolkit(ToolkitOptions())  # the builtins: question among them
    asked: list[Any] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer_1": "blue", "answer_2": "XL"})

    questions = [
        {"question": "Color?", "options": ["red", "blue"]},
        {"question": "Size?", "header": "Size"},
    ]
    async with (
        toolkit.serve() as served,
        Client(served.url, mode=era, elicitation_callback=elicit) as client,
    ):
        result = await client.call_tool("question", {"questions": questions})
    assert (result.content[0].text, result.is_error) == ('{"answers":["blue","XL"]}', False)  # type: ignore[union-attr]
    schema = asked[0].requested_schema
    assert schema["properties"]["answer_1"]["enum"] == ["red", "blue"]
    assert schema["required"] == ["answer_1", "answer_2"]


async def test_a_suspension_crosses_two_toolkits() -> None:
    # A tool of toolkit A suspends; toolkit B reaches A over MCP and answers it with its
    # own wait_for (the source's elicitation bridge): SPEC §10 across a process boundary.
    probe = Probe()
    inner = await toolkit_for(probe)
    asked: list[Request] = []

    async def wait_for(request: Request) -> Any:
        from toolnexus_trio import Answer

        asked.append(request)
        return Answer(request.id, True, {"code": "7"})

    async with inner.serve() as served:
        options = ToolkitOptions(mcp={"a": {"url": served.url}}, wait_for=wait_for, builtins=False)
        async with open_toolkit(options) as outer:
            result = await outer.execute("a_suspend", {"kind": "input"})
    assert (result.output, result.is_error) == ('answered {"code": "7"}', False)
    assert (asked[0].kind, asked[0].prompt) == ("input", "Code?")
    assert asked[0].data == {
        "schema": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        }
    }
