"""Durable approvals on the AG-UI endpoint: two endpoint instances (two servers on
loopback) share one store, a real SQLite file or the real PostgreSQL the tests start.
The run halts on an approval at one; the ``resume`` answers it at the other (take-once:
a second answer is a ``RUN_ERROR``) and streams the continuation. Every event is
checked against the ``ag-ui-protocol`` models."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from agui_helpers import run_input, run_to_end

from toolnexus_trio import Request, ToolContext, ToolResult, pending, tool
from toolnexus_trio.agents._durable import pending_id
from toolnexus_trio.builtins._guard import ask_tools
from toolnexus_trio.models import ClientOptions
from toolnexus_trio.stores import PendingStore
from toolnexus_trio.testing import open_fake_provider
from toolnexus_trio.ui import AguiAgent, UiServing
from toolnexus_trio.ui._scoped import scoped


@asynccontextmanager
async def _store(where: str) -> AsyncIterator[PendingStore]:
    if where.startswith("postgres"):
        from toolnexus_trio.stores import PostgresConversationStore

        async with PostgresConversationStore(where) as pg:
            yield pg
    else:
        from toolnexus_trio.stores import SqliteConversationStore

        async with SqliteConversationStore(where) as sqlite:
            yield sqlite


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "threads.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


async def test_an_approval_answered_at_another_worker_over_the_store(place: str) -> None:
    ran: list[str] = []

    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(
                Request(kind="approval", prompt=f"launch at {target}?", data={"show": target})
            )
        ran.append(target)
        return ToolResult.ok(f"launched {target}")

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}, "id": "c1"}]},
        {"text": "launched"},
    ]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(place) as store_a,
            _store(place) as store_b,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            worker_a = AguiAgent(options, [launch], store=store_a)
            worker_b = AguiAgent(options, [launch], store=store_b)
            async with UiServing(worker_a) as a, UiServing(worker_b) as b:
                first = await run_to_end(a.url + "agui", run_input("d1", "r1", "go"))
                outcome = first[-1]["outcome"]
                assert first[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt"
                (interrupt,) = outcome["interrupts"]
                assert interrupt["message"] == "launch at moon?"
                assert interrupt["metadata"] == {"agent": "root", "show": "moon"}
                # Nothing waits in worker A: the pending run is in the store only.
                assert ran == [] and worker_a.live_runs() == 0
                resume = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                second = await run_to_end(b.url + "agui", run_input("d1", "r2", resume=resume))
                assert ran == ["moon"]
                results = [f for f in second if f["type"] == "TOOL_CALL_RESULT"]
                assert [(f["toolCallId"], f["content"]) for f in results] == [
                    ("c1", "launched moon")
                ]
                text = [f["delta"] for f in second if f["type"] == "TEXT_MESSAGE_CONTENT"]
                assert "".join(text) == "launched"
                assert second[-1]["type"] == "RUN_FINISHED"
                assert second[-1]["result"] == {"status": "done", "text": "launched"}
                # The same answer again, at either worker: taken once, nothing runs.
                for url in (a.url, b.url):
                    again = await run_to_end(url + "agui", run_input("d1", "r3", resume=resume))
                    assert again[-1]["type"] == "RUN_ERROR"
                    assert "already answered" in again[-1]["message"]
                assert ran == ["moon"]
                # The conversation goes on at A, with the transcript B saved.
                state = await store_a.get_pending("d1")
                assert state is not None and state.status == "answered"
                transcript = await store_a.get("d1")
                assert transcript is not None and transcript[-1]["content"] == "launched"


async def test_a_sub_agents_approval_answered_at_another_worker(place: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo ran >> out.txt; echo ok"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "run it"}, "id": "d1"}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}, "id": "b1"}]},
        {"text": "helper: it ran"},
        {"text": "the helper ran it"},
    ]
    # bash as the ui command has it: each call asks first (the approval shows the command).
    bash = [t for t in ask_tools(str(work), confirm=True) if t.name == "bash"]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(place) as store_a,
            _store(place) as store_b,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            worker_a = AguiAgent(options, bash, store=store_a)
            worker_b = AguiAgent(options, bash, store=store_b)
            async with UiServing(worker_a) as a, UiServing(worker_b) as b:
                first = await run_to_end(a.url + "agui", run_input("t1", "r1", "go"))
                outcome = first[-1]["outcome"]
                assert first[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt"
                (interrupt,) = outcome["interrupts"]
                # The interrupt is the sub-agent's own request, named by its agent id.
                assert interrupt["metadata"] == {"agent": "root/helper.1", "show": command}
                states = [
                    op["value"]
                    for f in first
                    if f["type"] == "STATE_DELTA"
                    for op in f["delta"]
                    if op["path"] == "/agents/root~1helper.1/state"
                ]
                assert states[-1] == "suspended"
                # Nothing of the tree waits in worker A: it is in the store only.
                assert worker_a.live_runs() == 0
                assert not (work / "out.txt").exists()
                resume = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                second = await run_to_end(b.url + "agui", run_input("t1", "r2", resume=resume))
                assert (work / "out.txt").read_text() == "ran\n"
                results = {
                    f["toolCallId"]: f["content"] for f in second if f["type"] == "TOOL_CALL_RESULT"
                }
                assert results == {"root/helper.1:b1": "ok\n", "d1": "helper: it ran"}
                assert second[-1]["result"] == {"status": "done", "text": "the helper ran it"}
                # The same answer again, at either worker: taken once, nothing runs.
                for url in (a.url, b.url):
                    again = await run_to_end(url + "agui", run_input("t1", "r3", resume=resume))
                    assert again[-1]["type"] == "RUN_ERROR"
                    assert "already answered" in again[-1]["message"]
                assert worker_a.live_runs() == worker_b.live_runs() == 0
    assert (work / "out.txt").read_text() == "ran\n"  # once


async def test_two_sub_agents_approvals_answered_together_at_another_worker(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    call = {"name": "bash", "arguments": {"command": "echo ran >> out.txt"}, "id": "b1"}
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "one"}, "id": "d1"},
                        {"name": "delegate", "arguments": {"prompt": "two"}, "id": "d2"}]},
        {"tool_calls": [call]},
        {"tool_calls": [call]},
        {"text": "a helper is done"},
        {"text": "a helper is done"},
        {"text": "both are done"},
    ]  # fmt: skip
    bash = [t for t in ask_tools(str(work), confirm=True) if t.name == "bash"]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(str(tmp_path / "t.db")) as store_a,
            _store(str(tmp_path / "t.db")) as store_b,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            async with (
                UiServing(AguiAgent(options, bash, store=store_a)) as a,
                UiServing(AguiAgent(options, bash, store=store_b)) as b,
            ):
                first = await run_to_end(a.url + "agui", run_input("p1", "r1", "go"))
                interrupts = first[-1]["outcome"]["interrupts"]
                agents = sorted(i["metadata"]["agent"] for i in interrupts)
                assert agents == ["root/helper.1", "root/helper.2"]
                resume = [
                    {"interruptId": i["id"], "status": "resolved", "payload": {"approved": True}}
                    for i in interrupts
                ]
                second = await run_to_end(b.url + "agui", run_input("p1", "r2", resume=resume))
    # Each helper's call ran once, each result told under its own helper (resumed
    # together, in one process that restored both).
    assert (work / "out.txt").read_text() == "ran\nran\n"
    results = sorted(f["toolCallId"] for f in second if f["type"] == "TOOL_CALL_RESULT")
    assert results == ["d1", "d2", "root/helper.1:b1", "root/helper.2:b1"]
    assert second[-1]["result"] == {"status": "done", "text": "both are done"}


async def _halted_on_a_helper(url: str, thread: str) -> dict[str, Any]:
    first = await run_to_end(url, run_input(thread, "r1", "go"))
    (interrupt,) = first[-1]["outcome"]["interrupts"]
    assert interrupt["metadata"]["agent"] == "root/helper.1"
    return dict(interrupt)


async def _helper_record(store: PendingStore, thread: str, request_id: str) -> str:
    state = await store.get_pending(scoped(thread, pending_id(request_id)))
    assert state is not None
    return state.status


async def test_a_declined_sub_agent_approval_and_a_thread_that_moves_on(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    call = {"name": "bash", "arguments": {"command": "echo ran >> out.txt"}, "id": "b1"}
    delegate = {"name": "delegate", "arguments": {"prompt": "run it"}, "id": "d1"}
    script: list[dict[str, Any]] = [
        {"tool_calls": [delegate]},
        {"tool_calls": [call]},
        {"text": "it was declined"},  # the root, told the helper's call was declined
        {"tool_calls": [delegate]},
        {"tool_calls": [call]},
        {"text": "something else then"},  # the root, on the thread's next prompt
    ]
    bash = [t for t in ask_tools(str(work), confirm=True) if t.name == "bash"]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(str(tmp_path / "t.db")) as store,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            async with UiServing(AguiAgent(options, bash, store=store)) as served:
                url = served.url + "agui"
                # Declined: the helper's call never runs; the tree lets the helper go.
                asked = await _halted_on_a_helper(url, "n1")
                denied = [{"interruptId": asked["id"], "status": "cancelled"}]
                second = await run_to_end(url, run_input("n1", "r2", resume=denied))
                assert second[-1]["result"] == {"status": "done", "text": "it was declined"}
                assert await _helper_record(store, "n1", asked["id"]) == "superseded"
                # A new prompt instead of an answer: the old approval is superseded.
                asked = await _halted_on_a_helper(url, "n2")
                moved = await run_to_end(url, run_input("n2", "r2", "something else"))
                assert moved[-1]["result"] == {"status": "done", "text": "something else then"}
                assert await _helper_record(store, "n2", asked["id"]) == "superseded"
                resume = [
                    {
                        "interruptId": asked["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                late = await run_to_end(url, run_input("n2", "r3", resume=resume))
                assert late[-1]["type"] == "RUN_ERROR"
                reserved = await run_to_end(url, run_input("agui-tree:1:n:x", "r1", "go"))
                assert reserved[-1]["type"] == "RUN_ERROR" and "reserved" in reserved[-1]["message"]
    assert not (work / "out.txt").exists()


async def test_a_durable_continuation_streams_as_a_live_run(tmp_path: Path) -> None:
    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt=f"launch at {target}?"))
        return ToolResult.ok(f"launched {target}")

    @tool
    async def track(target: str) -> str:
        """Track what went to *target*."""
        return f"tracking {target}"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}, "id": "c1"}]},
        {"tool_calls": [{"name": "track", "arguments": {"target": "moon"}, "id": "c2"}]},
        {"text": "the rocket is on its way"},
    ]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(str(tmp_path / "t.db")) as store_a,
            _store(str(tmp_path / "t.db")) as store_b,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            worker_a = AguiAgent(options, [launch, track], store=store_a)
            worker_b = AguiAgent(options, [launch, track], store=store_b)
            async with UiServing(worker_a) as a, UiServing(worker_b) as b:
                first = await run_to_end(a.url + "agui", run_input("s1", "r1", "go"))
                (interrupt,) = first[-1]["outcome"]["interrupts"]
                resume = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                second = await run_to_end(b.url + "agui", run_input("s1", "r2", resume=resume))
    kinds = [f["type"] for f in second]
    # The answered call's result first, then the next turns as the provider streamed them.
    calls = [k for k in kinds if k.startswith("TOOL_CALL")]
    assert calls == ["TOOL_CALL_RESULT", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS",
                     "TOOL_CALL_END", "TOOL_CALL_RESULT"]  # fmt: skip
    fragments = [f["delta"] for f in second if f["type"] == "TOOL_CALL_ARGS"]
    assert "".join(fragments) == '{"target":"moon"}'
    text = [f["delta"] for f in second if f["type"] == "TEXT_MESSAGE_CONTENT"]
    assert text == ["the ", "rocket ", "is ", "on ", "its ", "way"]  # one per provider delta
    assert kinds.index("TEXT_MESSAGE_START") > kinds.index("TOOL_CALL_RESULT")
    assert second[-1]["result"] == {"status": "done", "text": "the rocket is on its way"}


async def test_a_declined_durable_approval_runs_nothing(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt=f"launch at {target}?"))
        ran.append(target)
        return ToolResult.ok(f"launched {target}")

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "launch", "arguments": {"target": "mars"}, "id": "c1"}]},
        {"text": "not launched"},
    ]
    with trio.fail_after(60):
        async with (
            open_fake_provider(script) as provider,
            _store(str(tmp_path / "t.db")) as store,
        ):
            options = ClientOptions(
                base_url=provider.base_url, style="openai", model="m", api_key="k"
            )
            async with UiServing(AguiAgent(options, [launch], store=store)) as served:
                url = served.url + "agui"
                first = await run_to_end(url, run_input("d2", "r1", "go"))
                (interrupt,) = first[-1]["outcome"]["interrupts"]
                denied = [{"interruptId": interrupt["id"], "status": "cancelled"}]
                second = await run_to_end(url, run_input("d2", "r2", resume=denied))
                assert second[-1]["result"] == {"status": "done", "text": "not launched"}
                missing = [{"interruptId": "nope", "status": "resolved"}]
                third = await run_to_end(url, run_input("nothread", "r3", resume=missing))
                assert third[-1]["type"] == "RUN_ERROR"
    assert ran == []


async def _ui_process(base_url: str, store: Path, work: Path) -> tuple[trio.Process, str]:
    command = [sys.executable, "-m", "toolnexus_trio", "ui", "--base-url", base_url,
               "--style", "openai", "--model", "m", "--api-key", "k", "--store", str(store)]  # fmt: skip
    ui = await trio.lowlevel.open_process(
        command, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    assert ui.stdout is not None
    first = b""
    while not first.endswith(b"\n"):
        chunk = await ui.stdout.receive_some(1)
        assert chunk, "the ui command exited before printing its URL"
        first += chunk
    return ui, first.decode().strip()


@pytest.mark.parametrize("asker", ["root", "root/helper.1"])
async def test_two_ui_processes_share_a_store_file(tmp_path: Path, asker: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    store = tmp_path / "approvals.db"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ran >> out.txt"}}]},
        {"text": "bash done"},
    ]
    if asker != "root":  # the root delegates; its helper asks, and answers the root
        delegate = {"name": "delegate", "arguments": {"prompt": "run it"}}
        script = [{"tool_calls": [delegate]}, *script, {"text": "bash done"}]
    processes: list[trio.Process] = []
    try:
        with trio.fail_after(60):
            async with open_fake_provider(script) as provider:
                ui_a, url_a = await _ui_process(provider.base_url, store, work)
                processes.append(ui_a)
                ui_b, url_b = await _ui_process(provider.base_url, store, work)
                processes.append(ui_b)
                first = await run_to_end(url_a + "agui", run_input("p1", "r1", "run it"))
                (interrupt,) = first[-1]["outcome"]["interrupts"]
                assert interrupt["metadata"] == {"agent": asker, "show": "echo ran >> out.txt"}
                assert not (work / "out.txt").exists()
                resume = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                second = await run_to_end(url_b + "agui", run_input("p1", "r2", resume=resume))
                assert second[-1]["result"] == {"status": "done", "text": "bash done"}
                again = await run_to_end(url_a + "agui", run_input("p1", "r3", resume=resume))
                assert again[-1]["type"] == "RUN_ERROR"
        assert (work / "out.txt").read_text() == "ran\n"  # once
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()
