"""``python -m toolnexus_trio gateway --mcp`` driven as an agent drives it: the mcp SDK's
stdio client starts the gateway with a private instances directory, and real Tesseron
hosts run in subprocesses (ours, and one on the PyPI tesseron 0.2.0 host)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_helpers import pid_alive

ROOT = Path(__file__).resolve().parent.parent
HOSTS = Path(__file__).resolve().parent / "gateway_hosts"
CODE = re.compile(r"\(([a-z]+)\) is waiting: claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")


def manifests(directory: Path) -> set[Path]:
    return set(directory.glob("*.json"))


@contextlib.asynccontextmanager
async def running_host(script: str, directory: Path) -> AsyncIterator[trio.Process]:
    """A host subprocess (own process group, stdin /dev/null), killed with its group after."""
    before = manifests(directory)
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(HOSTS / script), str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        with trio.fail_after(20):
            while manifests(directory) == before:  # noqa: ASYNC110 - another process
                await trio.sleep(0.02)
        yield proc
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


class Agent:
    """What the MCP client saw, and how it answers sampling and elicitation."""

    def __init__(self, err: Path) -> None:
        self.err = err
        self.notifications: list[str] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.elicit_action = "accept"
        self.elicited: list[Any] = []
        self.sampled: list[Any] = []
        self.client: Client | None = None
        self.nest_calls = 0

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notifications.append(f"bad line: {message}")
        elif not isinstance(message, types.ServerRequest | types.ServerResult):
            self.notifications.append(type(message).__name__)
        await trio.lowlevel.checkpoint()

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        await trio.lowlevel.checkpoint()

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        self.sampled.append(params)
        text = params.messages[0].content.text  # type: ignore[union-attr]
        if text == "nest again?" and self.client is not None:
            # The agent's model calls the tool again from inside the sampling.
            self.nest_calls += 1
            inner = await self.client.call_tool("ours__nest", {})
            answer = inner.content[0].text  # type: ignore[union-attr]
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(text=answer), model="m"
            )
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="42"), model="m"
        )

    async def elicit(self, ctx: Any, params: Any) -> types.ElicitResult:
        self.elicited.append(params)
        await trio.lowlevel.checkpoint()
        if self.elicit_action != "accept":
            return types.ElicitResult(action=self.elicit_action)  # type: ignore[arg-type]
        props = params.requested_schema.get("properties", {})
        return types.ElicitResult(action="accept", content={"name": "new"} if props else {})

    async def seen(self, kind: str) -> None:
        with trio.fail_after(10):
            while kind not in self.notifications:  # noqa: ASYNC110 - set by the client
                await trio.sleep(0.02)

    def codes(self) -> list[tuple[str, str]]:
        return CODE.findall(self.err.read_text())

    async def code(self, app: str, nth: int = 1) -> str:
        with trio.fail_after(20):
            while True:
                found = [c for a, c in self.codes() if a == app]
                if len(found) >= nth:
                    return found[nth - 1]
                await trio.sleep(0.02)


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path, directory: Path, *extra: str, capable: bool = True
) -> AsyncIterator[tuple[Client, Agent]]:
    err = tmp_path / f"gateway-{trio.current_time()}.err"
    agent = Agent(err)
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "toolnexus_trio",
            "gateway",
            "--mcp",
            "--instances-dir",
            str(directory),
            *extra,
        ],
        env={"PYTHONPATH": str(ROOT)},
    )
    callbacks: dict[str, Any] = (
        {"sampling_callback": agent.sampling, "elicitation_callback": agent.elicit}
        if capable
        else {}
    )
    with err.open("w") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            cache=None,
            message_handler=agent.on_message,
            logging_callback=agent.on_log,
            **callbacks,
        ) as client:
            agent.client = client
            yield client, agent
    assert not [n for n in agent.notifications if n.startswith("bad line")]  # stdout: protocol


def text(result: types.CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def data(result: types.CallToolResult) -> Any:
    assert not result.is_error, text(result)
    return json.loads(text(result))


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def wait_for_tools(client: Client, present: bool, name: str) -> None:
    with trio.fail_after(20):
        while (name in await names(client)) != present:  # noqa: ASYNC110 - another process
            await trio.sleep(0.05)


async def claim(client: Client, agent: Agent, app: str, nth: int = 1) -> None:
    code = await agent.code(app, nth)
    claimed = data(await client.call_tool("tesseron__claim_session", {"code": code.lower()}))
    assert claimed["claimed"] == app


META = [
    "tesseron__claim_session",
    "tesseron__list_actions",
    "tesseron__invoke_action",
    "tesseron__read_resource",
    "tesseron__list_pending_claims",
]


async def test_our_host_through_gateway_mcp(tmp_path: Path) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host("our_host.py", directory),
        gateway(tmp_path, directory) as (client, agent),
    ):
        # Before the claim: only the meta tools; calls are refused with -32009.
        assert await names(client) == META
        await agent.code("ours")
        pending = data(await client.call_tool("tesseron__list_pending_claims", {}))
        assert [p["app_id"] for p in pending] == ["ours"]
        assert "code" not in json.dumps(pending).lower().replace("app", "")
        refused = await client.call_tool(
            "tesseron__invoke_action", {"app_id": "ours", "action": "echo", "args": {}}
        )
        assert refused.is_error and refused.structured_content == {"code": -32009}
        bad = await client.call_tool("tesseron__claim_session", {"code": "AAAA-AA"})
        assert bad.is_error and bad.structured_content == {"code": -32009}

        await claim(client, agent, "ours")
        await agent.seen("ToolListChangedNotification")
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert list(tools)[:5] == META and "ours__echo" in tools
        assert tools["ours__echo"].annotations is not None
        assert tools["ours__echo"].annotations.read_only_hint is True
        assert tools["ours__fail"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert tools["ours__add"].input_schema["required"] == ["a", "b"]
        listed = data(await client.call_tool("tesseron__list_actions", {}))
        assert listed[0]["app_id"] == "ours" and "echo" in [a["name"] for a in listed[0]["actions"]]

        # Invoke: pretty JSON, raw strings, errors with their codes.
        echoed = await client.call_tool("ours__echo", {"x": [1, 2]})
        assert text(echoed) == json.dumps({"x": [1, 2]}, indent=2)
        assert text(await client.call_tool("ours__steps", {})) == "done"
        assert data(await client.call_tool("ours__add", {"a": 2, "b": 40})) == 42
        invalid = await client.call_tool(
            "tesseron__invoke_action", {"app_id": "ours", "action": "add", "args": {"a": "x"}}
        )
        assert invalid.is_error and invalid.structured_content["code"] == -32004  # type: ignore[index]
        failed = await client.call_tool("ours__fail", {})
        assert failed.is_error and text(failed) == "it broke"
        assert failed.structured_content == {"code": -32005, "data": {"why": "on purpose"}}

        # Progress only with a token: monotonic, total 100, with the message; logs as messages.
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))

        result = await client.call_tool("ours__steps", {}, progress_callback=on_progress)
        assert text(result) == "done"
        assert progress == [
            (30.0, 100.0, "at 30"),
            (60.0, 100.0, "at 60"),
            (100.0, 100.0, "at 100"),
        ]
        assert [(e.level, e.logger, e.data) for e in agent.logs][:1] == [
            ("warning", "ours", {"message": "careful", "k": 1})
        ]

        # Sampling through the client; confirm and elicit: accept, decline, cancel.
        assert data(await client.call_tool("ours__ask_model", {})) == {"answer": "42"}
        assert agent.sampled[0].max_tokens == 5
        assert data(await client.call_tool("ours__confirm", {})) == {"yes": True}
        assert agent.elicited[-1].requested_schema["properties"] == {}
        assert data(await client.call_tool("ours__rename", {})) == {"value": {"name": "new"}}
        agent.elicit_action = "decline"
        assert data(await client.call_tool("ours__confirm", {})) == {"yes": False}
        assert data(await client.call_tool("ours__rename", {})) == {"value": None}
        agent.elicit_action = "cancel"
        assert data(await client.call_tool("ours__confirm", {})) == {"yes": False}
        assert data(await client.call_tool("ours__rename", {})) == {"value": None}

        # Cancel: notifications/cancelled reaches the handler; the session goes on.
        with trio.move_on_after(0.5):
            await client.call_tool("ours__slow", {})
        with trio.fail_after(10):
            while data(await client.call_tool("ours__seen", {}))["slow_cancelled"] is not True:  # noqa: ASYNC110
                await trio.sleep(0.02)

        # Resources: list, read (both ways), subscribe.
        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["tesseron://ours/counter"]
        read = await client.read_resource("tesseron://ours/counter")
        assert read.contents[0].text == "0"  # type: ignore[union-attr]
        meta_read = await client.call_tool(
            "tesseron__read_resource", {"app_id": "ours", "name": "counter"}
        )
        assert data(meta_read) == 0
        with warnings.catch_warnings():  # the handshake era's verb, deprecated in 2026-07-28
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.subscribe_resource("tesseron://ours/counter")
        assert data(await client.call_tool("ours__bump", {})) == 1
        await agent.seen("ResourceUpdatedNotification")

        # A dropped connection: the tools go, the gateway redials, the host resumes,
        # and they come back without a new claim.
        assert text(await client.call_tool("ours__drop", {})) == "dropping"
        await wait_for_tools(client, False, "ours__echo")
        await wait_for_tools(client, True, "ours__echo")
        assert data(await client.call_tool("ours__add", {"a": 1, "b": 1})) == 2
        assert len(agent.codes()) == 1  # no second claim code


async def test_killed_host_mid_call(tmp_path: Path) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host("our_host.py", directory) as host,
        gateway(tmp_path, directory) as (client, agent),
    ):
        await claim(client, agent, "ours")
        results: list[types.CallToolResult] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append(await client.call_tool("ours__stubborn", {"seconds": 30}))

            nursery.start_soon(call)
            await trio.sleep(0.5)
            os.killpg(host.pid, signal.SIGKILL)
        assert results[0].is_error and results[0].structured_content["code"] == -32010  # type: ignore[index]
        await wait_for_tools(client, False, "ours__echo")


async def test_gateway_restart_refuses_resume_and_host_says_hello(tmp_path: Path) -> None:
    directory = tmp_path / "instances"
    async with running_host("our_host.py", directory):
        async with gateway(tmp_path, directory) as (client, agent):
            await claim(client, agent, "ours")
            assert data(await client.call_tool("ours__add", {"a": 1, "b": 2})) == 3
        # A new gateway: the host's resume is refused (-32011) and it says hello again,
        # so it needs a new claim.
        async with gateway(tmp_path, directory) as (client, agent):
            await claim(client, agent, "ours")
            assert data(await client.call_tool("ours__add", {"a": 2, "b": 2})) == 4


async def test_client_without_sampling_or_elicitation(tmp_path: Path) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host("our_host.py", directory),
        gateway(tmp_path, directory, capable=False) as (client, agent),
    ):
        await claim(client, agent, "ours")
        sampled = await client.call_tool("ours__ask_model", {})
        assert sampled.is_error and sampled.structured_content["code"] == -32006  # type: ignore[index]
        elicited = await client.call_tool("ours__rename", {})
        assert elicited.is_error and elicited.structured_content["code"] == -32007  # type: ignore[index]
        # confirm without elicitation is "no", as the protocol says
        assert data(await client.call_tool("ours__confirm", {})) == {"yes": False}


async def test_sampling_depth_limit(tmp_path: Path) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host("our_host.py", directory),
        gateway(tmp_path, directory, "--max-sampling-depth", "2") as (client, agent),
    ):
        await claim(client, agent, "ours")
        # nest samples; the model calls nest again; the third level is refused.
        outer = await client.call_tool("ours__nest", {})
        assert agent.nest_calls == 2
        assert "-32008" in text(outer) or "depth" in text(outer), text(outer)


async def test_peer_host_tesseron_020(tmp_path: Path) -> None:
    pytest.importorskip("tesseron")
    directory = tmp_path / "instances"
    async with (
        running_host("peer_host.py", directory),
        gateway(tmp_path, directory) as (client, agent),
    ):
        await claim(client, agent, "peer")
        assert "peer__add" in await names(client)
        assert data(await client.call_tool("peer__add", {"a": 2, "b": 40})) == 42
        # tesseron 0.2.0 does not validate input: its handler's KeyError is -32603.
        invalid = await client.call_tool("peer__add", {"a": "x"})
        assert invalid.is_error and invalid.structured_content["code"] == -32603  # type: ignore[index]
        assert data(await client.call_tool("peer__ask_model", {})) == {"answer": "42"}
        assert data(await client.call_tool("peer__confirm", {})) == {"yes": True}
        assert data(await client.call_tool("peer__rename", {})) == {"value": {"name": "new"}}
        agent.elicit_action = "decline"
        assert data(await client.call_tool("peer__confirm", {})) == {"yes": False}
        with trio.move_on_after(0.5):
            await client.call_tool("peer__slow", {})
        with trio.fail_after(10):
            while data(await client.call_tool("peer__seen", {}))["slow_cancelled"] is not True:  # noqa: ASYNC110
                await trio.sleep(0.02)


def test_gateway_mcp_cli_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolnexus_trio", "gateway"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2 and "--url" in done.stderr and "--mcp" in done.stderr
    assert pid_alive(os.getpid())
