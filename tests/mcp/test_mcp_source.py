"""The MCP source (SPEC §2) against real SDK servers: stdio subprocesses and streamable
HTTP on loopback. Cancellation must reach the server (its handler records the cancel),
and no server process may be left behind by a close, a failed load or a cancelled one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from mcp.server.lowlevel import Server
from mcp_helpers import build_everything, collecting_run, group_members, http_app, pid_alive, stdio

from toolnexus_trio import (
    Answer,
    CancelToken,
    Request,
    ToolContext,
    ToolkitOptions,
    ToolSource,
    create_toolkit,
    define_tool,
    open_toolkit,
)
from toolnexus_trio.mcp import McpStatus, _stdio, list_mcp_tools, open_mcp


async def wait_until(predicate: Any) -> None:
    """Poll state owned by another process (no event to wait on); bounded."""
    with trio.fail_after(15):
        while not predicate():  # noqa: ASYNC110 - the state is outside this process
            await trio.sleep(0.01)


async def cancel_mid_call(toolkit: Any, name: str, tag: str) -> Any:
    """Start *name* (a slow tool), cancel its token once the call is in flight."""
    token = CancelToken()
    out: list[Any] = []

    async def call() -> None:
        out.append(await toolkit.execute(name, {"tag": tag}, ToolContext(cancel=token)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        # The server's handler has started (asked on the same session), then cancel.
        seen = f"{name.split('_')[0]}_seen_cancels"
        with trio.fail_after(15):
            while tag not in (await toolkit.execute(seen, {"started_calls": True})).output:  # noqa: ASYNC110 - the state is in the server process
                await trio.sleep(0.01)
        token.cancel()
    return out[0]


async def test_stdio_server_end_to_end() -> None:
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        if "decline" in request.prompt:
            return Answer(request.id, False, reason="declined")
        return Answer(request.id, True, {"name": "Trio"})

    async def mine(args: dict[str, Any], ctx: ToolContext) -> str:
        return "mine"

    options = ToolkitOptions(
        mcp={"mcpServers": {"ev": stdio("--child"), "off": {"command": "x", "disabled": True}}},
        wait_for=wait_for,
        builtins=False,
        extra_tools=[define_tool("mine", "Mine.", None, mine)],
    )
    async with open_toolkit(options) as toolkit:
        assert toolkit.mcp_status() == {
            "ev": McpStatus("connected", None, 11),
            "off": McpStatus("disabled"),
        }
        names = [t.name for t in toolkit.tools()]
        assert names[0] == "ev_add" and names[-1] == "mine"  # MCP first, extras last
        assert toolkit.get("ev_add").source is ToolSource.MCP  # type: ignore[union-attr]

        # results (SPEC §2 mapping)
        add = await toolkit.execute("ev_add", {"a": 2, "b": 3})
        assert (add.output, add.is_error, add.metadata) == ('{"result":5}', False, {"server": "ev"})
        assert (await toolkit.execute("ev_echo", {"text": "hi"})).output == "hi"
        failed = await toolkit.execute("ev_fail", {"message": "kaputt"})
        assert failed.is_error and "kaputt" in failed.output
        # a message larger than the pipe's buffer, while small ones overtake nothing
        big = "x" * 300_000
        sums: list[str] = []

        async def small(i: int) -> None:
            sums.append((await toolkit.execute("ev_add", {"a": i, "b": 1})).output)

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(small, i)
            echoed = await toolkit.execute("ev_echo", {"text": big})
        assert echoed.output == big
        assert sorted(sums) == [f'{{"result":{i + 1}}}' for i in range(5)]
        bad_args = await toolkit.execute("ev_add", {"a": "2"})
        assert bad_args.is_error and "Invalid arguments" in bad_args.output

        # progress -> stream events and metrics
        with collecting_run() as (events, metrics):
            done = await toolkit.execute("ev_progress", {"steps": 3}, ToolContext(call_id="c1"))
        assert done.output == '{"result":"done 3"}'
        assert [(e["id"], e["tool"], e["percent"], e["message"]) for e in events] == [
            ("c1", "ev_progress", 33, "step 1"),
            ("c1", "ev_progress", 67, "step 2"),
            ("c1", "ev_progress", 100, "step 3"),
        ]
        assert [m["percent"] for m in metrics] == [33, 67, 100]

        # elicitation bridge: form -> input, URL -> authorization
        assert (
            await toolkit.execute("ev_ask", {"question": "Name?"})
        ).output == '{"result":"accept:Trio"}'
        assert asked[0].kind == "input" and asked[0].prompt == "Name?"
        assert asked[0].data["schema"]["properties"]["name"]["type"] == "string"  # type: ignore[index]
        assert (
            await toolkit.execute("ev_ask", {"question": "decline?"})
        ).output == '{"result":"decline"}'
        assert (await toolkit.execute("ev_login", {})).output == '{"result":"accept"}'
        assert (asked[2].kind, asked[2].url) == ("authorization", "https://auth.example/login")

        # cancellation and timeout reach the server; the session stays usable
        assert (await cancel_mid_call(toolkit, "ev_slow", "by-cancel")).output == "cancelled"
        timed = await toolkit.execute("ev_slow", {"tag": "by-timeout"}, ToolContext(timeout_ms=300))
        assert (timed.output, timed.is_error) == ("timed out after 300ms", True)
        seen = await toolkit.execute("ev_seen_cancels", {})
        assert seen.output == '{"result":"by-cancel,by-timeout"}'

        # tools/list_changed refreshes the server's tools
        assert toolkit.get("ev_extra") is None
        await toolkit.execute("ev_grow", {})
        await wait_until(lambda: toolkit.get("ev_extra") is not None)
        assert (await toolkit.execute("ev_extra", {})).output == "extra!"

        server_pid, child_pid = map(
            int, (await toolkit.execute("ev_pids", {})).output[11:-2].split()
        )
        assert pid_alive(child_pid)
    # closing stopped the whole process tree, the grandchild included
    assert group_members(server_pid) == []
    assert not pid_alive(server_pid) and not pid_alive(child_pid)


async def test_servers_load_concurrently_and_failures_are_isolated(tmp_path: Path) -> None:
    # The real server answers initialize only once both hanging servers were spawned:
    # a loader that waited for it before starting the others would fail it.
    marks = tmp_path / "marks"
    marks.mkdir()
    barrier = f'while [ "$(ls {marks} | wc -l)" -lt 2 ]; do sleep 0.02; done; exec "$0" "$@"'
    real = stdio()
    real["command"] = ["sh", "-c", barrier, *real["command"]]

    def hanging(name: str) -> dict[str, Any]:
        script = f"echo $$ > {marks}/{name}; sleep 300 & sleep 300"
        return {"command": ["sh", "-c", script], "timeout": 1000}

    config = {
        "servers": {
            "ev": real,
            "hang1": hanging("hang1"),
            "hang2": hanging("hang2"),
            "bad": {"command": ["/nonexistent/mcp-server"]},
            "quits": {"command": ["sh", "-c", "exit 3"]},
            "off": {"command": ["x"], "enabled": False},
        }
    }
    async with open_toolkit(ToolkitOptions(mcp=config, builtins=False)) as toolkit:
        status = toolkit.mcp_status()
        assert status["ev"] == McpStatus("connected", None, 11)
        assert status["hang1"] == McpStatus("failed", "initialize timed out after 1000ms")
        assert status["hang2"].error == "initialize timed out after 1000ms"
        assert status["bad"].state == "failed" and "No such file" in str(status["bad"].error)
        assert status["quits"].state == "failed" and status["quits"].error
        assert status["off"] == McpStatus("disabled")
        assert (await toolkit.execute("ev_add", {"a": 1, "b": 1})).output == '{"result":2}'
        # a failed connect killed its server's whole group at once
        for name in ("hang1", "hang2"):
            assert group_members(int((marks / name).read_text())) == []


async def test_cancelled_load_leaves_no_process(tmp_path: Path) -> None:
    names = [f"h{i}" for i in range(3)]
    config = {
        n: {"command": ["sh", "-c", f"echo $$ > {tmp_path}/{n}; sleep 300 & sleep 300"]}
        for n in names
    }

    async def cancel_when_spawned(scope: trio.CancelScope) -> None:
        await wait_until(lambda: all((tmp_path / n).exists() for n in names))
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_spawned, scope)
            await create_toolkit(ToolkitOptions(mcp=config), nursery=nursery)
            pytest.fail("the load was not cancelled")
    assert scope.cancelled_caught
    for n in names:
        pgid = int((tmp_path / n).read_text())
        assert group_members(pgid) == [], n


async def test_create_toolkit_needs_a_nursery_for_mcp() -> None:
    with pytest.raises(TypeError, match="open_toolkit"):
        await create_toolkit(ToolkitOptions(mcp={"a": {"command": "x"}}))


async def test_an_oversized_line_disconnects_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_stdio, "MAX_LINE_BYTES", 1000)
    script = f"echo $$ > {tmp_path}/pid; head -c 5000 /dev/zero | tr '\\0' x; sleep 300"
    async with open_mcp({"big": {"command": ["sh", "-c", script], "timeout": 20000}}) as source:
        status = source.status()["big"]
    assert status.state == "failed"
    assert group_members(int((tmp_path / "pid").read_text())) == []


# ---------------------------------------------------------------------- streamable HTTP


async def test_http_server_calls_headers_cancel_and_list_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cr3t")
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        return Answer(request.id, True, {"name": "Web"})

    server = build_everything("web")
    async with http_app(server.streamable_http_app()) as base:
        config = {
            "web": {
                "url": f"{base}/mcp",
                "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"},
                "tools": {
                    "header": True,
                    "slow": True,
                    "seen_cancels": True,
                    "grow": True,
                    "ask": True,
                    "progress": True,
                    "extra": True,
                },
            }
        }
        async with open_toolkit(
            ToolkitOptions(mcp=config, wait_for=wait_for, builtins=False)
        ) as toolkit:
            assert [t.name for t in toolkit.tools()] == [
                "web_slow",
                "web_seen_cancels",
                "web_progress",
                "web_ask",
                "web_grow",
                "web_header",
            ]
            auth = await toolkit.execute("web_header", {"name": "authorization"})
            assert auth.output == "Bearer s3cr3t"
            assert (
                await toolkit.execute("web_ask", {"question": "Who?"})
            ).output == '{"result":"accept:Web"}'
            assert asked[0].kind == "input"
            with collecting_run() as (events, _):
                await toolkit.execute("web_progress", {"steps": 2})
            assert [(e["progress"], e["total"], e["message"]) for e in events] == [
                (1.0, 2.0, "step 1"),
                (2.0, 2.0, "step 2"),
            ]
            assert (await cancel_mid_call(toolkit, "web_slow", "http-cancel")).output == "cancelled"
            seen = await toolkit.execute("web_seen_cancels", {})
            assert seen.output == '{"result":"http-cancel"}'
            await toolkit.execute("web_grow", {})
            await wait_until(lambda: toolkit.get("web_extra") is not None)


async def test_http_list_mcp_tools_pagination_and_bad_schemas() -> None:
    pages = {
        None: (["a", "b"], "p2"),
        "p2": (["c"], "p3"),
        "p3": (["bad"], None),
    }

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        names, cursor = pages[params.cursor if params else None]
        tools = [
            types.Tool(
                name=n,
                description=f"tool {n}",
                input_schema={
                    "type": "object",
                    "properties": {"x": {"$ref": "http://evil.example/s"}},
                }
                if n == "bad"
                else {"type": "object", "properties": {}},
            )
            for n in names
        ]
        return types.ListToolsResult(tools=tools, next_cursor=cursor)

    server = Server("paged", on_list_tools=list_tools)
    async with http_app(server.streamable_http_app()) as base:
        inventory = await list_mcp_tools(
            {"paged": {"url": f"{base}/mcp"}, "off": {"url": f"{base}/x", "enabled": False}}
        )
        assert inventory["paged"].status == McpStatus("connected", None, 4)
        assert [t.name for t in inventory["paged"].tools] == ["a", "b", "c", "bad"]
        assert inventory["off"].status.state == "disabled"
        async with open_mcp({"paged": {"url": f"{base}/mcp", "tools": {"b": False}}}) as source:
            tools = {t.name: t for t in source.tools()}
            assert list(tools) == ["paged_a", "paged_c", "paged_bad"]
            assert tools["paged_bad"].input_schema == {"type": "object"}  # did not compile: open

        pages["p3"] = (["d"], "p2")  # a cursor loop
        looped = await list_mcp_tools({"paged": {"url": f"{base}/mcp"}})
        assert looped["paged"].status.state == "failed"
        assert "cursor 'p2' twice" in str(looped["paged"].status.error)


async def test_http_server_that_never_answers_fails_within_its_bound() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    held: list[Any] = []

    async def accept_and_stall() -> None:
        while True:
            held.append(await listener.accept())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_and_stall)
        inventory = await list_mcp_tools(
            {"mute": {"url": f"http://127.0.0.1:{port}/mcp", "timeout": 500}}
        )
        assert inventory["mute"].status == McpStatus("failed", "initialize timed out after 500ms")
        nursery.cancel_scope.cancel()
    for stream in held:
        await stream.aclose()
    await listener.aclose()
