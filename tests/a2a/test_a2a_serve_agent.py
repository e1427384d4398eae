"""A §7D agent served over A2A (``Agent.serve``): its card, tasks run by the agent tree,
``CancelTask`` reaching the tree's running tool (a real process), a pending run as
``input-required`` resumed by the caller's next message, and a2a-sdk 1.3's client
against it.

The lead delegates each task to its ``worker`` with ``task``; the worker runs the real
``bash`` builtin. Real processes and HTTP on loopback, so the real clock (with
``fail_after`` guards).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from builtin_helpers import live_group_members
from helpers import TaskCensus

from toolnexus_trio import (
    CancelToken,
    Request,
    ToolContext,
    ToolkitOptions,
    create_toolkit,
    define_tool,
    pending,
)
from toolnexus_trio.a2a import A2AServeConfig, A2AServing, TaskInfo, agent
from toolnexus_trio.agents import Agent
from toolnexus_trio.agents import agent as make_agent
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

pytest.importorskip("hypercorn")
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")

LEAD_DOES = "Plans a job and has its worker do it"
SERVER_TASKS = ("hypercorn", "trio._highlevel_serve_listeners")


class TeamModel:
    """The lead hands the task to its worker, then reports; the worker runs bash for a
    ``slow`` task (a shell with a long child), asks for approval on ``ask``, else answers."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file
        self.cancelled: list[str] = []

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        tools = [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]
        prompt = [str(m.get("content")) for m in request.messages if m.get("role") == "user"][-1]
        await trio.lowlevel.checkpoint()
        if request.model == "m-lead":
            if not tools:
                call = InProcessToolCall("t1", "task", {"agent": "worker", "prompt": prompt})
                return InProcessResponse(tool_calls=(call,))
            return InProcessResponse(content=f"lead: {tools[-1]}")
        if not tools and prompt.startswith("slow"):
            command = f"echo $$ > {self.pid_file}; sleep 60 & wait"
            call = InProcessToolCall("b1", "bash", {"command": command})
            return InProcessResponse(tool_calls=(call,))
        if not tools and prompt.startswith("ask"):
            return InProcessResponse(tool_calls=(InProcessToolCall("a1", "approve", {}),))
        done = f" ({tools[-1]})" if tools else ""
        return InProcessResponse(content=f"worker did: {prompt}{done}")


async def _approve(args: dict[str, Any], ctx: ToolContext) -> Any:
    if ctx.answer is None:
        return pending(Request(kind="approval", prompt="may I deploy?"))
    return "approved"  # a declined answer never re-runs the tool


def team(tmp_path: Path) -> Agent:
    """A lead with one worker that has the real ``bash`` builtin and an approval tool."""
    bash = [t for t in builtin_tools(BuiltinsConfig(base_dir=str(tmp_path))) if t.name == "bash"]
    approve = define_tool("approve", "asks for approval", None, _approve)
    worker = make_agent("worker", does="Runs commands", uses=[*bash, approve], model="m-worker")
    return make_agent("lead", does=LEAD_DOES, team=[worker], uses=[], model="m-lead")


async def _pid(path: Path) -> int:
    # The shell writes its pid when it starts; poll for it (a file has no event).
    file = trio.Path(path)
    while True:
        text = await file.read_text() if await file.exists() else ""
        if text.strip():
            return int(text)
        await trio.sleep(0.005)


async def _members(pgid: int, count: int) -> None:
    # A process group has no event either: poll until the shell has forked.
    while True:
        if len(live_group_members(pgid)) >= count:
            return
        await trio.sleep(0.005)


async def test_card_send_and_poll_to_completed(tmp_path: Path) -> None:
    model = TeamModel(tmp_path / "pid")
    ended: list[TaskInfo] = []
    with trio.fail_after(30):
        async with team(tmp_path).serve(generate=model, on_task=ended.append) as served:
            assert isinstance(served, A2AServing)
            async with httpx2.AsyncClient() as http:
                card = (await http.get(served.card_url)).json()
            assert card["name"] == "lead" and card["description"] == LEAD_DOES
            assert card["skills"] == [{"id": "lead", "name": "lead", "description": LEAD_DOES}]
            assert card["url"] == served.url
            caller = await create_toolkit(
                ToolkitOptions(builtins=False, agents=[agent(served.card_url, poll_every=10)])
            )
            async with caller:
                tool = caller.get("lead_lead")
                assert tool is not None
                result = await tool.call({"task": "tidy the logs"})
    assert not result.is_error
    assert result.output == "lead: worker did: tidy the logs"
    assert (result.metadata or {})["state"] == "completed"
    [info] = ended
    assert (info.state, info.task) == ("completed", "tidy the logs")
    assert info.result.status == "done" and info.result.turns == 2


async def test_config_overrides_the_card(tmp_path: Path) -> None:
    served_as = team(tmp_path).serve(
        generate=TeamModel(tmp_path / "pid"),
        a2a=A2AServeConfig(name="ops team", description="Ops", version="3.1"),
    )
    with trio.fail_after(30):
        async with served_as as served, httpx2.AsyncClient() as http:
            card = (await http.get(served.card_url)).json()
    assert (card["name"], card["description"], card["version"]) == ("ops team", "Ops", "3.1")
    assert card["skills"] == [{"id": "lead", "name": "lead", "description": LEAD_DOES}]


async def test_cancel_reaches_the_agent_trees_running_tool(tmp_path: Path) -> None:
    model = TeamModel(tmp_path / "pid")
    ended: list[TaskInfo] = []
    results: list[Any] = []
    with trio.fail_after(30):
        async with team(tmp_path).serve(generate=model, on_task=ended.append) as served:
            caller = await create_toolkit(
                ToolkitOptions(builtins=False, agents=[agent(served.card_url, poll_every=10)])
            )
            async with caller:
                tool = caller.get("lead_lead")
                assert tool is not None
                token = CancelToken()
                with TaskCensus() as census:
                    async with trio.open_nursery() as nursery:

                        async def call() -> None:
                            ctx = ToolContext(cancel=token)
                            results.append(await tool.call({"task": "slow build"}, ctx))

                        nursery.start_soon(call)
                        pgid = await _pid(tmp_path / "pid")
                        await _members(pgid, 2)  # the shell and the sleep it forked
                        token.cancel("stop")
                    # The call sent CancelTask and returned after the remote task ended:
                    # by then the worker's bash (its whole process group) is gone and the
                    # runtime that ran the task left no task behind.
                    assert live_group_members(pgid) == []
                    stray = [
                        t.name for t in census.new_tasks() if not t.name.startswith(SERVER_TASKS)
                    ]
                    assert stray == []
    assert results[0].output == f"A2A task {results[0].metadata['taskId']} canceled"
    assert [(i.state, i.task, i.result) for i in ended] == [("canceled", "slow build", None)]


async def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC call on the SPEC's (0.3) wire."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with httpx2.AsyncClient() as http:
        reply: dict[str, Any] = (await http.post(url, json=body)).json()
    return reply


def message(text: str, task_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "user",
        "messageId": "m",
        "parts": [{"kind": "text", "text": text}],
    }
    if task_id is not None:
        out["taskId"] = task_id
    return out


async def settled(url: str, task_id: str, *, until: tuple[str, ...] = ()) -> dict[str, Any]:
    """Poll ``GetTask`` until the task stops running (or waits for input), or until it
    is in one of the states *until*."""
    while True:
        task: dict[str, Any] = (await rpc(url, "GetTask", {"id": task_id}))["result"]
        state = task["status"]["state"]
        if state in until or (not until and state not in ("submitted", "working")):
            return task
        await trio.sleep(0.01)


APPROVED = "lead: worker did: ask first (approved)"
DECLINED = "lead: declined/expired: may I deploy?"


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        ([{"kind": "text", "text": "yes"}], APPROVED),
        # A declined approval runs nothing: the lead's delegation is declined as a whole.
        ([{"kind": "text", "text": "No."}], DECLINED),
        ([{"kind": "data", "data": {"ok": True, "data": {"by": "ops"}}}], APPROVED),
        ([{"data": {"ok": False, "reason": "not today"}}], DECLINED),
    ],
)
async def test_a_pending_run_is_input_required_and_the_next_message_resumes_it(
    tmp_path: Path, reply: list[dict[str, Any]], outcome: str
) -> None:
    ended: list[TaskInfo] = []
    model = TeamModel(tmp_path / "pid")
    with trio.fail_after(30):
        async with team(tmp_path).serve(generate=model, on_task=ended.append) as served:
            sent = await rpc(served.url, "SendMessage", {"message": message("ask first")})
            task_id = sent["result"]["id"]
            waiting = await settled(served.url, task_id)
            assert waiting["status"]["state"] == "input-required"
            asked = waiting["status"]["message"]
            assert asked["parts"] == [{"kind": "text", "text": "may I deploy?"}]
            assert asked["metadata"]["request"]["kind"] == "approval"
            bad = await rpc(served.url, "SendMessage", {"message": message("maybe", task_id)})
            assert bad["error"]["code"] == -32602 and "yes or no" in bad["error"]["message"]
            answer = {"role": "user", "messageId": "m2", "taskId": task_id, "parts": reply}
            resumed = await rpc(served.url, "SendMessage", {"message": answer})
            assert resumed["result"]["id"] == task_id
            done = await settled(served.url, task_id)
            late = await rpc(served.url, "SendMessage", {"message": message("yes", task_id)})
    assert done["status"] == {"state": "completed"}
    [artifact] = done["artifacts"]
    assert artifact["parts"] == [{"kind": "text", "text": outcome}]
    assert late["error"]["message"] == f"task {task_id} is completed, not waiting for input"
    assert [(i.state, i.result.status) for i in ended] == [("completed", "done")]


async def test_our_outbound_call_ends_at_input_required(tmp_path: Path) -> None:
    ended: list[TaskInfo] = []
    model = TeamModel(tmp_path / "pid")
    with trio.fail_after(30):
        async with team(tmp_path).serve(generate=model, on_task=ended.append) as served:
            caller = await create_toolkit(
                ToolkitOptions(builtins=False, agents=[agent(served.card_url, poll_every=10)])
            )
            async with caller:
                tool = caller.get("lead_lead")
                assert tool is not None
                result = await tool.call({"task": "ask first"})
            # A tool cannot answer: the call ends there; the served task still waits.
            task_id = (result.metadata or {})["taskId"]
            cancelled = await rpc(served.url, "CancelTask", {"id": task_id})
    assert result.is_error
    assert result.output == f"A2A task {task_id} input-required: may I deploy?"
    assert cancelled["result"]["status"] == {"state": "canceled"}
    assert [i.state for i in ended] == ["canceled"]


async def test_an_unanswered_request_fails_the_task_after_input_timeout(tmp_path: Path) -> None:
    ended: list[TaskInfo] = []
    model = TeamModel(tmp_path / "pid")
    served_as = team(tmp_path).serve(generate=model, on_task=ended.append, input_timeout_ms=50)
    with trio.fail_after(30):
        async with served_as as served:
            sent = await rpc(served.url, "SendMessage", {"message": message("ask first")})
            task_id = sent["result"]["id"]
            failed = await settled(served.url, task_id, until=("failed", "completed"))
    assert failed["status"]["state"] == "failed"
    why = failed["status"]["message"]["parts"][0]["text"]
    assert why == "no answer to the agent's approval 'may I deploy?' within 50 ms"
    assert [i.state for i in ended] == ["failed"]


def test_serve_checks_its_arguments_at_once(tmp_path: Path) -> None:
    lead, model = team(tmp_path), TeamModel(tmp_path / "pid")
    with pytest.raises(ValueError, match="loopback"):
        lead.serve("0.0.0.0", generate=model)
    with pytest.raises(TypeError, match="generat"):
        lead.serve(generat=model)
    with pytest.raises(ValueError, match="exactly one of generate= or llm="):
        lead.serve()


async def test_sdk_client_sends_polls_and_cancels_on_a_served_agent(tmp_path: Path) -> None:
    pytest.importorskip("a2a")
    from a2a.client import ClientConfig, create_client
    from a2a.types import (
        CancelTaskRequest,
        GetTaskRequest,
        Message,
        Part,
        Role,
        SendMessageConfiguration,
        SendMessageRequest,
        TaskState,
    )

    def request(text: str, message_id: str) -> SendMessageRequest:
        return SendMessageRequest(
            message=Message(role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=text)]),
            configuration=SendMessageConfiguration(return_immediately=True),
        )

    model = TeamModel(tmp_path / "pid")
    ended: list[TaskInfo] = []
    running = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    with trio.fail_after(30):
        async with team(tmp_path).serve(generate=model, on_task=ended.append) as served:
            client = await create_client(served.base_url, ClientConfig(streaming=False))
            try:
                events = [ev async for ev in client.send_message(request("sdk job", "m1"))]
                task = events[-1].task
                while True:
                    got = await client.get_task(GetTaskRequest(id=task.id))
                    if got.status.state not in running:
                        break
                    await trio.sleep(0.01)
                assert got.status.state == TaskState.TASK_STATE_COMPLETED
                texts = [p.text for a in got.artifacts for p in a.parts]
                assert texts == ["lead: worker did: sdk job"]

                events = [ev async for ev in client.send_message(request("ask sdk", "m3"))]
                asking = events[-1].task
                while True:
                    got = await client.get_task(GetTaskRequest(id=asking.id))
                    if got.status.state not in running:
                        break
                    await trio.sleep(0.01)
                assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
                assert [p.text for p in got.status.message.parts] == ["may I deploy?"]
                yes = Message(
                    role=Role.ROLE_USER,
                    message_id="m4",
                    task_id=asking.id,
                    parts=[Part(text="yes")],
                )
                sent = SendMessageRequest(
                    message=yes, configuration=SendMessageConfiguration(return_immediately=True)
                )
                [ev async for ev in client.send_message(sent)]
                while True:
                    got = await client.get_task(GetTaskRequest(id=asking.id))
                    if got.status.state not in running:
                        break
                    await trio.sleep(0.01)
                assert got.status.state == TaskState.TASK_STATE_COMPLETED
                texts = [p.text for a in got.artifacts for p in a.parts]
                assert texts == ["lead: worker did: ask sdk (approved)"]

                events = [ev async for ev in client.send_message(request("slow sdk", "m2"))]
                slow = events[-1].task
                pgid = await _pid(tmp_path / "pid")
                await _members(pgid, 2)
                cancelled = await client.cancel_task(CancelTaskRequest(id=slow.id))
                assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
                assert live_group_members(pgid) == []
            finally:
                await client.close()
    assert [i.state for i in ended] == ["completed", "completed", "canceled"]
