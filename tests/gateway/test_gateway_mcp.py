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

import attrs
import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated, ToolsListChanged
from mcp_helpers import pid_alive

ROOT = Path(__file__).resolve().parents[2]
HOSTS = Path(__file__).resolve().parents[1] / "gateway_hosts"
CODE = re.compile(r"\(([a-z]+)\) is waiting: claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")


def manifests(directory: Path) -> set[Path]:
    return set(directory.glob("*.json"))


@attrs.frozen
class Host:
    """One of the two hosts every behaviour runs against."""

    app: str
    script: str


OURS = Host("ours", "our_host.py")
PEER = Host("peer", "peer_host.py")  # PyPI tesseron 0.2.0 (asyncio), a black box


@pytest.fixture(params=[OURS, PEER], ids=["ours", "peer"])
def host(request: pytest.FixtureRequest) -> Host:
    if request.param is PEER:
        pytest.importorskip("tesseron")
    kind: Host = request.param
    return kind


MODERN = "2026-07-28"


@pytest.fixture(params=["legacy", MODERN], ids=["handshake", "2026-07-28"])
def revision(request: pytest.FixtureRequest) -> str:
    """The MCP revision the agent speaks: the initialize handshake (``legacy``), or
    2026-07-28 (no initialize, no server-to-client requests: input_required rounds)."""
    mode: str = request.param
    return mode


@attrs.define
class Running:
    proc: trio.Process
    err: Path

    def log(self) -> str:
        return self.err.read_text()


@contextlib.asynccontextmanager
async def running_host(script: str, directory: Path) -> AsyncIterator[Running]:
    """A host subprocess (own process group, stdin /dev/null, stderr to a file), killed
    with its group after."""
    directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a local temp dir
    before = manifests(directory)
    err = directory.parent / f"{script}.err"
    with err.open("w") as errfile:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(HOSTS / script), str(directory)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errfile,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        with trio.fail_after(20):
            while manifests(directory) == before:  # noqa: ASYNC110 - another process
                await trio.sleep(0.02)
        yield Running(proc, err)
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        assert not pid_alive(proc.pid)


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
        self.app = "ours"
        self.nest_calls = 0
        self.nested: list[types.CallToolResult] = []
        self.sampling_error: int | None = None  # answer createMessage with this error code

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
        if self.sampling_error is not None:
            return types.ErrorData(code=self.sampling_error, message="Method not found")
        text = params.messages[0].content.text  # type: ignore[union-attr]
        if text == "nest again?" and self.client is not None:
            # The agent's model calls the tool again from inside the sampling.
            self.nest_calls += 1
            inner = await self.client.call_tool(f"{self.app}__nest", {})
            self.nested.append(inner)
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

    async def listen(
        self,
        client: Client,
        uris: tuple[str, ...],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """A 2026-07-28 ``subscriptions/listen`` stream; its events are recorded under
        the names the handshake era's notifications have."""
        names = {
            ToolsListChanged: "ToolListChangedNotification",
            ResourcesListChanged: "ResourceListChangedNotification",
            ResourceUpdated: "ResourceUpdatedNotification",
        }
        async with client.listen(
            tools_list_changed=True, resources_list_changed=True, resource_subscriptions=uris
        ) as sub:
            task_status.started()
            async for event in sub:
                self.notifications.append(names[type(event)])

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


# ``python -c LIMITED BYTES gateway ...``: the gateway under an address-space limit, so a
# regression that reads without bound ends in MemoryError instead of taking the machine.
LIMITED = (
    "import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); sys.argv[0] = 'toolnexus_trio'; "
    "runpy.run_module('toolnexus_trio', run_name='__main__', alter_sys=True)"
)


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path,
    directory: Path,
    *extra: str,
    capable: bool = True,
    mem_limit: int | None = None,
    mode: str = "legacy",
) -> AsyncIterator[tuple[Client, Agent]]:
    err = tmp_path / f"gateway-{trio.current_time()}.err"
    agent = Agent(err)
    start = ["-m", "toolnexus_trio"] if mem_limit is None else ["-c", LIMITED, str(mem_limit)]
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *start,
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
        async with (
            Client(
                stdio_client(params, errlog=errlog),
                mode=mode,
                cache=None,
                client_info=types.Implementation(name=CLIENT_NAME, version="1"),
                message_handler=agent.on_message,
                logging_callback=agent.on_log,
                log_level="debug" if mode == MODERN else None,  # 2026-07-28: opt in per request
                **callbacks,
            ) as client,
            trio.open_nursery() as nursery,
        ):
            agent.client = client
            if mode == MODERN:  # list changes reach it on a subscriptions/listen stream
                await nursery.start(agent.listen, client, ())
            yield client, agent
            nursery.cancel_scope.cancel()
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


async def slow_started(client: Client, app: str) -> int:
    return int(data(await client.call_tool(f"{app}__seen", {}))["slow_started"])


async def wait_slow_started(client: Client, app: str, before: int) -> None:
    """Until the host's ``slow`` handler has started once more than *before*."""
    with trio.fail_after(20):
        while await slow_started(client, app) <= before:  # noqa: ASYNC110 - another process
            await trio.sleep(0.02)


async def claim(client: Client, agent: Agent, app: str, nth: int = 1) -> None:
    code = await agent.code(app, nth)
    claimed = data(await client.call_tool("tesseron__claim_session", {"code": code.lower()}))
    assert claimed["claimed"] == app


CLIENT_NAME = "test-agent"
META = [
    "tesseron__claim_session",
    "tesseron__list_actions",
    "tesseron__invoke_action",
    "tesseron__read_resource",
    "tesseron__list_pending_claims",
]


async def test_host_through_gateway_mcp(tmp_path: Path, host: Host, revision: str) -> None:
    """Every per-call behaviour, against our host and the tesseron 0.2.0 host alike, with
    a client on either MCP revision."""
    app = host.app
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory),
        gateway(tmp_path, directory, mode=revision) as (client, agent),
    ):
        # Before the claim: only the meta tools; calls are refused with -32009.
        assert await names(client) == META
        await agent.code(app)
        pending = data(await client.call_tool("tesseron__list_pending_claims", {}))
        assert [p["app_id"] for p in pending] == [app]
        assert "code" not in json.dumps(pending).lower().replace("app", "")
        refused = await client.call_tool(
            "tesseron__invoke_action", {"app_id": app, "action": "echo", "args": {}}
        )
        assert refused.is_error and refused.structured_content == {"code": -32009}
        bad = await client.call_tool("tesseron__claim_session", {"code": "AAAA-AA"})
        assert bad.is_error and bad.structured_content == {"code": -32009}

        await claim(client, agent, app)
        await agent.seen("ToolListChangedNotification")
        if host is OURS:  # tesseron/claimed carried the agent's name and capabilities
            told = {"agent": CLIENT_NAME, "sampling": True, "elicitation": True}
            assert data(await client.call_tool("ours__whoami", {})) == told
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert list(tools)[:5] == META and f"{app}__echo" in tools
        if host is OURS:  # tesseron 0.2.0 has no action annotations
            assert tools["ours__echo"].annotations is not None
            assert tools["ours__echo"].annotations.read_only_hint is True
            assert tools["ours__fail"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert sorted(tools[f"{app}__add"].input_schema["required"]) == ["a", "b"]
        listed = data(await client.call_tool("tesseron__list_actions", {}))
        assert listed[0]["app_id"] == app and "echo" in [a["name"] for a in listed[0]["actions"]]

        # Invoke: pretty JSON, raw strings, errors with their codes.
        echoed = await client.call_tool(f"{app}__echo", {"x": [1, 2]})
        assert text(echoed) == json.dumps({"x": [1, 2]}, indent=2)
        assert data(await client.call_tool(f"{app}__add", {"a": 2, "b": 40})) == 42
        invalid = await client.call_tool(
            "tesseron__invoke_action", {"app_id": app, "action": "add", "args": {"a": "x"}}
        )
        assert invalid.is_error and invalid.structured_content["code"] == -32004  # type: ignore[index]
        failed = await client.call_tool(f"{app}__fail", {})
        assert failed.is_error and text(failed) == "it broke"
        assert failed.structured_content == {"code": -32005, "data": {"why": "on purpose"}}

        # Progress only with a token: monotonic, total 100, with the message; logs as
        # messages (warn -> warning, logger = the app id).
        assert text(await client.call_tool(f"{app}__steps", {})) == "done"
        assert "ProgressNotification" not in agent.notifications
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))

        result = await client.call_tool(f"{app}__steps", {}, progress_callback=on_progress)
        assert text(result) == "done"
        assert progress == [
            (0.0, 100.0, "at 0"),  # round 3: the first update goes, whatever its percent
            (30.0, 100.0, "at 30"),
            (60.0, 100.0, "at 60"),
            (100.0, 100.0, "at 100"),
        ]
        assert "ProgressNotification" in agent.notifications  # the check above can see one
        assert [(e.level, e.logger, e.data) for e in agent.logs][:2] == 2 * [
            ("warning", app, {"message": "careful", "k": 1})
        ]

        # Sampling through the client; confirm and elicit: accept, decline, cancel.
        assert data(await client.call_tool(f"{app}__ask_model", {})) == {"answer": "42"}
        assert agent.sampled[0].max_tokens == 5
        assert data(await client.call_tool(f"{app}__confirm", {})) == {"yes": True}
        assert agent.elicited[-1].requested_schema["properties"] == {}
        assert data(await client.call_tool(f"{app}__rename", {})) == {"value": {"name": "new"}}
        agent.elicit_action = "decline"
        assert data(await client.call_tool(f"{app}__confirm", {})) == {"yes": False}
        assert data(await client.call_tool(f"{app}__rename", {})) == {"value": None}
        agent.elicit_action = "cancel"
        assert data(await client.call_tool(f"{app}__confirm", {})) == {"yes": False}
        assert data(await client.call_tool(f"{app}__rename", {})) == {"value": None}

        # Cancel: notifications/cancelled reaches the handler; the session goes on.
        before = await slow_started(client, app)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.call_tool, f"{app}__slow", {})
            await wait_slow_started(client, app, before)  # in the handler: now cancel
            nursery.cancel_scope.cancel()
        with trio.fail_after(10):
            while data(await client.call_tool(f"{app}__seen", {}))["slow_cancelled"] is not True:  # noqa: ASYNC110
                await trio.sleep(0.02)

        # A host's actions/list_changed: tools/list_changed, and the new tool is there.
        agent.notifications.clear()
        assert text(await client.call_tool(f"{app}__grow", {})) == "grown"
        await agent.seen("ToolListChangedNotification")
        await wait_for_tools(client, True, f"{app}__extra")
        assert text(await client.call_tool(f"{app}__extra", {})) == "extra"

        # Resources: list, read (both ways), subscribe.
        uri = f"tesseron://{app}/counter"
        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == [uri]
        read = await client.read_resource(uri)
        assert read.contents[0].text == "0"  # type: ignore[union-attr]
        meta_read = await client.call_tool(
            "tesseron__read_resource", {"app_id": app, "name": "counter"}
        )
        assert data(meta_read) == 0
        async with trio.open_nursery() as listening:
            if revision == MODERN:  # 2026-07-28: a listen stream naming the resource
                await listening.start(agent.listen, client, (uri,))
            else:
                with warnings.catch_warnings():  # the handshake era's verb
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.subscribe_resource(uri)
            assert data(await client.call_tool(f"{app}__bump", {})) == 1
            await agent.seen("ResourceUpdatedNotification")
            await drop_and_resume(client, agent, app)
            listening.cancel_scope.cancel()


async def drop_and_resume(client: Client, agent: Agent, app: str) -> None:
    """A dropped connection: the tools go, the gateway redials, the host resumes, and
    they come back without a new claim; the subscription is made again."""
    assert text(await client.call_tool(f"{app}__drop", {})) == "dropping"
    await wait_for_tools(client, False, f"{app}__echo")
    await wait_for_tools(client, True, f"{app}__echo")
    assert data(await client.call_tool(f"{app}__add", {"a": 1, "b": 1})) == 2
    assert len(agent.codes()) == 1  # no second claim code
    agent.notifications.clear()
    assert data(await client.call_tool(f"{app}__bump", {})) == 2
    await agent.seen("ResourceUpdatedNotification")


async def test_input_required_rounds_are_bound_to_their_call(tmp_path: Path) -> None:
    """2026-07-28, driven by hand: the question comes back as InputRequiredResult; a
    retry must name the same tool and arguments; a retry without the answer is a
    cancelled elicitation (confirm: no), and the request_state is then spent."""
    directory = tmp_path / "instances"
    async with (
        running_host(OURS.script, directory),
        gateway(tmp_path, directory, mode=MODERN) as (client, agent),
    ):
        await claim(client, agent, "ours")
        first = await client.session.call_tool("ours__confirm", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.request_state is not None and first.input_requests is not None
        (asked,) = first.input_requests.values()
        assert isinstance(asked, types.ElicitRequest) and asked.params.message == "Really?"
        state = first.request_state
        for name, args in (("ours__echo", {}), ("ours__confirm", {"x": 1})):
            with pytest.raises(MCPError, match="request_state"):
                await client.session.call_tool(
                    name, args, request_state=state, allow_input_required=True
                )
        with pytest.raises(MCPError, match="request_state"):
            await client.session.call_tool(
                "ours__confirm", {}, request_state="forged", allow_input_required=True
            )
        last = await client.session.call_tool(
            "ours__confirm", {}, request_state=state, input_responses={}, allow_input_required=True
        )
        assert isinstance(last, types.CallToolResult) and data(last) == {"yes": False}
        with pytest.raises(MCPError, match="request_state"):  # spent with its call
            await client.session.call_tool(
                "ours__confirm", {}, request_state=state, allow_input_required=True
            )
        assert agent.elicited == []  # answered by hand above, never by the callback


async def test_killed_host_mid_call(tmp_path: Path, host: Host) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory) as running,
        gateway(tmp_path, directory) as (client, agent),
    ):
        await claim(client, agent, host.app)
        results: list[types.CallToolResult] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append(await client.call_tool(f"{host.app}__slow", {}))

            before = await slow_started(client, host.app)
            nursery.start_soon(call)
            await wait_slow_started(client, host.app, before)  # in the handler: now kill
            os.killpg(running.proc.pid, signal.SIGKILL)
            # A liveness bound, not a speed test (the benchmark measures): without the
            # transport error the call would wait out the 60 s handler.
            with trio.fail_after(10):
                while not results:  # noqa: ASYNC110 - set by the call
                    await trio.sleep(0.01)
        assert results[0].is_error and results[0].structured_content["code"] == -32010  # type: ignore[index]
        await wait_for_tools(client, False, f"{host.app}__echo")


async def test_gateway_restart_refuses_resume_and_host_says_hello(
    tmp_path: Path, host: Host
) -> None:
    directory = tmp_path / "instances"
    async with running_host(host.script, directory) as running:
        async with gateway(tmp_path, directory) as (client, agent):
            await claim(client, agent, host.app)
            assert data(await client.call_tool(f"{host.app}__add", {"a": 1, "b": 2})) == 3
        assert "-32011" not in running.log()
        # A new gateway: the host's resume is refused (-32011, in the host's own log)
        # and it says hello again, so it needs a new claim.
        async with gateway(tmp_path, directory) as (client, agent):
            await claim(client, agent, host.app)
            assert data(await client.call_tool(f"{host.app}__add", {"a": 2, "b": 2})) == 4
        assert re.search(r"resume refused.*-32011", running.log()), running.log()


async def test_client_without_sampling_or_elicitation(
    tmp_path: Path, host: Host, revision: str
) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory),
        gateway(tmp_path, directory, capable=False, mode=revision) as (client, agent),
    ):
        await claim(client, agent, host.app)
        if host is OURS:
            told = {"agent": CLIENT_NAME, "sampling": False, "elicitation": False}
            assert data(await client.call_tool("ours__whoami", {})) == told
        # The gateway told the host (tesseron/claimed) that the agent can do neither,
        # so a conforming host refuses on its own side.
        sampled = await client.call_tool(f"{host.app}__ask_model", {})
        assert sampled.is_error and sampled.structured_content["code"] == -32006  # type: ignore[index]
        elicited = await client.call_tool(f"{host.app}__rename", {})
        assert elicited.is_error and elicited.structured_content["code"] == -32007  # type: ignore[index]
        # confirm without elicitation is "no", as the protocol says
        assert data(await client.call_tool(f"{host.app}__confirm", {})) == {"yes": False}
        if host is OURS:
            # A host that asks anyway gets the gateway's own refusals. (Not with the
            # black-box peer: its public API always checks the capabilities first.)
            anyway = await client.call_tool("ours__ask_anyway", {"what": "sample"})
            assert anyway.is_error and anyway.structured_content == {
                "code": -32006,
                "data": {"clientName": CLIENT_NAME},
            }
            anyway = await client.call_tool("ours__ask_anyway", {"what": "elicit"})
            assert anyway.is_error and anyway.structured_content == {"code": -32007}


async def test_sampling_rejected_as_method_not_found_is_not_available(
    tmp_path: Path, host: Host
) -> None:
    """A client that says it samples but answers createMessage with -32601: the host's
    sample fails with SamplingNotAvailable (-32006 {clientName}), as the reference does."""
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory),
        gateway(tmp_path, directory) as (client, agent),
    ):
        agent.sampling_error = types.METHOD_NOT_FOUND
        await claim(client, agent, host.app)
        sampled = await client.call_tool(f"{host.app}__ask_model", {})
        assert sampled.is_error and sampled.structured_content is not None
        assert sampled.structured_content["code"] == -32006
        if host is OURS:  # ours keeps the gateway's data (tesseron 0.2.0 drops it)
            assert sampled.structured_content["data"] == {"clientName": CLIENT_NAME}
        assert agent.sampled  # it was asked, and said no
        # Any other error from the client is still a failed sampling (-32005).
        agent.sampling_error = types.INTERNAL_ERROR
        failed = await client.call_tool(f"{host.app}__ask_model", {})
        assert failed.is_error and failed.structured_content is not None
        assert failed.structured_content["code"] == -32005


async def test_an_unlisted_action_goes_to_the_host(tmp_path: Path, host: Host) -> None:
    """``<app>__<action>`` of a claimed app whose action is not in the gateway's list is
    forwarded: the agent gets the host's ActionNotFound (-32003) as a tool error."""
    app = host.app
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory),
        gateway(tmp_path, directory) as (client, agent),
    ):
        await agent.code(app)
        unclaimed = await client.call_tool(f"{app}__echo", {})
        assert unclaimed.is_error and unclaimed.structured_content == {"code": -32009}
        await claim(client, agent, app)
        missing = await client.call_tool(f"{app}__nope", {"x": 1})
        assert missing.is_error and missing.structured_content is not None
        assert missing.structured_content["code"] == -32003
        assert "nope" in text(missing)
        # Not yet listed: the host learns the action, the call already reaches it.
        assert (await client.call_tool(f"{app}__extra", {})).is_error
        assert text(await client.call_tool(f"{app}__grow", {})) == "grown"
        assert text(await client.call_tool(f"{app}__extra", {})) == "extra"
        # No app of that name at all: still the protocol's unknown tool.
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.call_tool("nosuchapp__echo", {})


async def test_wrong_claim_codes_are_logged_and_a_right_one_claims(tmp_path: Path) -> None:
    """Over stdio, every wrong code is logged (the delays are tested on virtual time in
    tests/tesseron/test_gateway_claims.py); the right code still claims."""
    directory = tmp_path / "instances"
    async with (
        running_host(OURS.script, directory),
        gateway(tmp_path, directory) as (client, agent),
    ):
        code = await agent.code("ours")
        other = ("B" if code[0] == "A" else "A") + code[1:]
        for _ in range(4):  # three free misses, then 1 s before the next check
            bad = await client.call_tool("tesseron__claim_session", {"code": other})
            assert bad.is_error and bad.structured_content == {"code": -32009}
        log = agent.err.read_text()
        assert log.count("wrong claim code") == 4 and code not in log.replace(
            f"claim code {code}", ""
        )
        await claim(client, agent, "ours")


async def test_sampling_depth_limit(tmp_path: Path, host: Host, revision: str) -> None:
    directory = tmp_path / "instances"
    async with (
        running_host(host.script, directory),
        gateway(tmp_path, directory, "--max-sampling-depth", "2", mode=revision) as (
            client,
            agent,
        ),
    ):
        agent.app = host.app
        await claim(client, agent, host.app)
        # nest samples; the model calls nest again; the third level is refused.
        outer = await client.call_tool(f"{host.app}__nest", {})
        assert agent.nest_calls == 2
        innermost = agent.nested[0]  # the first to finish is the deepest
        assert innermost.is_error and innermost.structured_content == {
            "code": -32008,
            "data": {"depth": 3, "max": 2},
        }
        assert not agent.nested[1].is_error and not outer.is_error


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


async def test_hostile_manifests_leave_discovery_working(tmp_path: Path) -> None:
    """A FIFO, a deeply nested file, a sparse 600 MB file and a symlink to /dev/zero sit
    beside a live host: the host is found, and the gateway stays small and answering."""
    directory = tmp_path / "instances"
    directory.mkdir()
    os.mkfifo(directory / "a-fifo.json")  # sorted first: read before the live host
    (directory / "nested.json").write_text("[" * 60_000)
    with (directory / "sparse.json").open("wb") as f:
        f.truncate(600 * 1024 * 1024)
    (directory / "zero.json").symlink_to("/dev/zero")
    async with (
        running_host(OURS.script, directory),
        gateway(tmp_path, directory, mem_limit=2 << 30) as (client, agent),
    ):
        await claim(client, agent, "ours")
        assert data(await client.call_tool("ours__add", {"a": 1, "b": 2})) == 3
        log = agent.err.read_text()
        for name in ("a-fifo.json", "nested.json", "sparse.json", "zero.json"):
            assert f"skipping manifest {name}:" in log, log


async def test_the_gateway_exits_when_stdin_closes_beside_a_fifo(tmp_path: Path) -> None:
    """Discovery beside a FIFO named *.json stays cancellable: closing stdin ends the
    gateway (status 0), and the live host beside the FIFO is found."""
    directory = tmp_path / "instances"
    directory.mkdir()
    os.mkfifo(directory / "a.json")
    err = tmp_path / "gateway.err"
    command = [sys.executable, "-m", "toolnexus_trio", "gateway", "--mcp"]
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": CLIENT_NAME, "version": "1"}},
    }  # fmt: skip
    async with running_host(OURS.script, directory):
        with err.open("w") as errfile:
            proc = await trio.lowlevel.open_process(
                [*command, "--instances-dir", str(directory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errfile,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send_all(json.dumps(initialize).encode() + b"\n")
            answer = b""
            with trio.fail_after(20):
                while b"\n" not in answer:
                    answer += await proc.stdout.receive_some()
                while not CODE.search(err.read_text()):  # noqa: ASYNC110 - another process
                    await trio.sleep(0.02)
            assert json.loads(answer.split(b"\n")[0])["id"] == 1
            await proc.stdin.aclose()
            with trio.fail_after(20):  # a hang guard: without the fix it never exits
                assert await proc.wait() == 0
        finally:
            with trio.move_on_after(5, shield=True):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()


async def test_fastmcp_client_on_either_revision(tmp_path: Path, host: Host, revision: str) -> None:
    """fastmcp's client (4.x, asyncio, so in a process of its own) as the agent: the host
    is told its name and capabilities, and confirm, elicit and sample reach it."""
    pytest.importorskip("fastmcp")
    directory = tmp_path / "instances"
    log = tmp_path / "gateway.err"
    agent = [sys.executable, str(HOSTS / "fastmcp_agent.py")]
    async with running_host(host.script, directory):
        with trio.fail_after(60):
            done = await trio.run_process(
                [*agent, str(directory), revision, host.app, str(log)],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    seen = json.loads(done.stdout)
    assert seen["protocol"] == (MODERN if revision == MODERN else "2025-11-25")
    assert not seen["claim"]["error"], seen["claim"]
    if host is OURS:
        told = {"agent": "fastmcp-agent", "sampling": True, "elicitation": True}
        assert json.loads(seen["whoami"]["text"]) == told
    assert json.loads(seen["confirm"]["text"]) == {"yes": True}
    assert json.loads(seen["rename"]["text"]) == {"value": {"name": "new"}}
    assert json.loads(seen["ask_model"]["text"]) == {"answer": "42"}
    assert seen["elicited"] == ["Really?", "New name?"]
    assert seen["sampled"] == ["What is 6 times 7?"]
    assert seen["nope"]["error"] and seen["nope"]["structured"]["code"] == -32003
