"""Crash-durable runs in one process (loop/_checkpoint.py): what is written at each step
boundary, recovery from a run stopped at each of them, the in-doubt policy, leases.

A "crash" here is the run's scope cancelled from outside at a named checkpoint (the
run then gives its lease up at once, as a shutdown does); test_crash_processes.py
kills real processes with SIGKILL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio
from crash_app import client, ledger_lines, toolkit
from durable_app import open_store

import toolnexus_trio.loop._checkpoint as checkpoint
from toolnexus_trio import InMemoryConversationStore, ToolResult
from toolnexus_trio.loop import InDoubtCall, LeaseLost, RunNotRecoverable
from toolnexus_trio.stores import CheckpointStore

FINISHED = "finished: charged a; found b; charged c"


@pytest.fixture(params=["memory", "sqlite"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory" if request.param == "memory" else str(tmp_path / "runs.db")


@asynccontextmanager
async def stopping_at(point: str, nth: int = 1) -> AsyncIterator[trio.CancelScope]:
    """A scope cancelled at the *nth* checkpoint pause named *point*."""
    seen = 0
    scope = trio.CancelScope()

    async def pause(name: str) -> None:
        nonlocal seen
        if name == point:
            seen += 1
            if seen == nth:
                scope.cancel()
                await trio.sleep_forever()

    checkpoint._pause_hook = pause
    try:
        with scope:
            yield scope
    finally:
        checkpoint._pause_hook = None


async def test_a_durable_run_ends_done_with_its_thread_saved(place: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with open_store(place) as store:
        result = await client(store).ask("job", await toolkit(ledger), id="t")
        assert result.text == FINISHED
        assert isinstance(store, CheckpointStore)
        found = await store.load_checkpoint("t")
        assert found is not None and found.status == "done" and found.owner is None
        saved = await store.get("t")
        assert saved is not None and saved[-1]["content"] == FINISHED
        assert await store.orphaned_runs() == []
    assert sorted(ledger_lines(ledger)) == ["charge a", "charge c", "lookup b"]


async def test_off_by_default_nothing_is_checkpointed(tmp_path: Path) -> None:
    from crash_app import generate

    from toolnexus_trio import InProcessOptions, create_in_process_client

    store = InMemoryConversationStore()
    plain = create_in_process_client(InProcessOptions(model="m", generate=generate, store=store))
    result = await plain.ask("job", await toolkit(tmp_path / "ledger"), id="t")
    assert result.text == FINISHED
    assert await store.load_checkpoint("t") is None


# point, nth -> the ledger once recovered (charge a/c never twice; lookup b at least once)
STOPS = [
    ("start", 1, "finished: charged a; found b; charged c"),
    # The response's write marks its calls started: from there on they are in doubt.
    ("responded", 1, None),
    ("started", 1, None),
    ("result", 1, None),
    ("result", 2, "finished: charged a; found b; charged c"),
    ("step", 1, "finished: charged a; found b; charged c"),
    ("responded", 2, None),
    ("started", 3, None),
    ("result", 3, FINISHED),
    ("step", 2, FINISHED),
    ("responded", 3, FINISHED),
]


@pytest.mark.parametrize(("point", "nth", "text"), STOPS)
async def test_a_run_stopped_at_each_step_boundary_is_recovered(
    place: str, point: str, nth: int, text: str | None, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    async with open_store(place) as store:
        assert isinstance(store, CheckpointStore)
        async with stopping_at(point, nth) as scope:
            await client(store).ask("job", tk, id="t")
        assert scope.cancelled_caught
        assert await store.orphaned_runs() == ["t"]
        before = ledger_lines(ledger)
        result = await client(store).recover("t", tk)
        after = ledger_lines(ledger)
        assert result.status == "done"
        if text is not None:
            assert result.text == text
        # Not idempotent: at most once, even when in doubt; idempotent: at least once.
        assert after.count("charge a") <= 1 and after.count("charge c") <= 1
        assert after.count("lookup b") >= 1
        # What finished before the stop did not run again.
        for line in before:
            if line.startswith("charge"):
                assert after.count(line) == 1
        found = await store.load_checkpoint("t")
        assert found is not None and found.status == "done"
        assert await store.orphaned_runs() == []
        saved = await store.get("t")
        assert saved is not None and saved[-1]["content"] == result.text
        with pytest.raises(RunNotRecoverable) as finished:
            await client(store).recover("t", tk)
        assert finished.value.status == "done"


async def test_a_call_in_flight_is_in_doubt_and_the_policy_decides(
    place: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    async with open_store(place) as store:
        # Stopped inside the second turn's charge c: its line is written, no result.
        async with stopping_at("started", 3):
            await client(store).ask("job", tk, id="t")
        result = await client(store).recover("t", tk)
        assert result.text.startswith(
            "finished: charged a; found b; in doubt: the call of 'charge'"
        )
        assert ledger_lines(ledger).count("charge c") == 0  # never started again

        # The same stop, with a policy that runs every call in doubt again.
        async with stopping_at("started", 3):
            await client(store).ask("job", tk, id="u")
        seen: list[InDoubtCall] = []

        def rerun(call: InDoubtCall) -> ToolResult | None:
            seen.append(call)
            return None

        again = await client(store, on_in_doubt=rerun).recover("u", tk)
        assert again.text == FINISHED
        assert [(c.run_id, c.call_id, c.name, c.args, c.idempotent) for c in seen] == [
            ("u", "c3", "charge", {"v": "c"}, False)
        ]


async def test_an_idempotent_call_in_doubt_runs_again(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    store = InMemoryConversationStore()
    with trio.CancelScope() as scope:

        async def pause(name: str) -> None:
            if name == "tool:lookup b":  # inside the tool, its line written
                scope.cancel()
                await trio.sleep_forever()

        await client(store).ask("job", await toolkit(ledger, pause=pause), id="t")
    assert ledger_lines(ledger).count("lookup b") == 1
    result = await client(store).recover("t", await toolkit(ledger))
    # charge a ran alongside: it may have finished, or be in doubt (then not re-run).
    assert result.text.endswith("found b; charged c")
    assert ledger_lines(ledger).count("lookup b") == 2  # at least once: it ran again
    # charge a was cancelled before or after its line: in doubt either way, not re-run.
    assert ledger_lines(ledger).count("charge a") <= 1


async def test_a_live_owner_keeps_its_run_renewing_its_lease(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    store = InMemoryConversationStore()
    tk = await toolkit(tmp_path / "ledger")
    release = trio.Event()

    async def pause(name: str) -> None:
        if name == "step":
            await release.wait()

    checkpoint._pause_hook = pause
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(client(store, lease_ms=1000).ask, "job", tk, id="t"))
            await trio.sleep(10)  # ten leases long: renewed all along
            assert await store.orphaned_runs() == []
            with pytest.raises(RunNotRecoverable) as alive:
                await client(store).recover("t", tk)
            assert alive.value.status == "running"
            release.set()
    finally:
        checkpoint._pause_hook = None
    with pytest.raises(LookupError):
        await client(store).recover("nothing", tk)


class FrozenRenewals:
    """The store as seen by a process whose lease renewals stop getting through."""

    def __init__(self, store: InMemoryConversationStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def renew_lease(self, id: str, owner: str, lease_ms: int) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_process_whose_lease_was_taken_over_stops_and_saves_nothing(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    store = InMemoryConversationStore()
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    owner = client(FrozenRenewals(store), lease_ms=1000)  # type: ignore[arg-type]
    recovered = trio.Event()

    at_step = trio.Event()

    async def pause(name: str) -> None:
        if name == "step":  # frozen between two turns; its next write is fenced off
            at_step.set()
            await recovered.wait()

    checkpoint._pause_hook = pause
    try:
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                with pytest.raises(LeaseLost):
                    await owner.ask("job", tk, id="t")

            nursery.start_soon(first)
            await at_step.wait()
            await trio.sleep(2)  # two leases: the owner's ran out
            assert await store.orphaned_runs() == ["t"]
            checkpoint._pause_hook = None
            result = await client(store).recover("t", tk)
            assert result.text == FINISHED
            recovered.set()
    finally:
        checkpoint._pause_hook = None
    # The first owner stopped at its next write: the second turn's call ran once.
    assert sorted(ledger_lines(ledger)) == ["charge a", "charge c", "lookup b"]
    saved = await store.get("t")
    assert saved is not None and saved[-1]["content"] == FINISHED


async def test_a_call_waiting_at_the_gate_when_stopped_runs_on_recovery(tmp_path: Path) -> None:
    from crash_app import ledger_tool

    from toolnexus_trio import BuiltinsConfig, ToolkitOptions, create_toolkit

    ledger = tmp_path / "ledger"
    store = InMemoryConversationStore()
    with trio.CancelScope() as scope:

        async def pause(name: str) -> None:
            if name == "tool:charge a":  # the exclusive call runs; lookup b waits for it
                scope.cancel()
                await trio.sleep_forever()

        charge = attrs.evolve(
            ledger_tool("charge", "charged", ledger, idempotent=False, pause=pause),
            concurrency_safe=False,
        )
        lookup = ledger_tool("lookup", "found", ledger, idempotent=True)
        options = ToolkitOptions(extra_tools=[charge, lookup], builtins=BuiltinsConfig.off())
        await client(store).ask("job", await create_toolkit(options), id="t")
    assert ledger_lines(ledger) == ["charge a"]  # lookup b never started
    found = await store.load_checkpoint("t")
    assert found is not None and found.state["results"] == {"0": {"started": True}}
    result = await client(store).recover("t", await toolkit(ledger))
    assert result.text.startswith("finished: in doubt: the call of 'charge'")
    assert result.text.endswith("; found b; charged c")
    assert ledger_lines(ledger) == ["charge a", "lookup b", "charge c"]


async def test_on_text_gets_the_answer_of_a_durable_run(tmp_path: Path) -> None:
    store = InMemoryConversationStore()
    deltas: list[str] = []
    result = await client(store).ask(
        "job", await toolkit(tmp_path / "ledger"), id="t", on_text=deltas.append
    )
    assert "".join(deltas) == result.text == FINISHED


async def test_a_durable_run_that_halts_pending_is_answered_once(
    place: str, tmp_path: Path
) -> None:
    from durable_app import deploy_tool
    from durable_app import generate as deploy_generate

    from toolnexus_trio import (
        Answer,
        BuiltinsConfig,
        InProcessOptions,
        ToolkitOptions,
        create_in_process_client,
        create_toolkit,
    )

    ledger = tmp_path / "ledger"
    options = ToolkitOptions(extra_tools=[deploy_tool(ledger)], builtins=BuiltinsConfig.off())
    tk = await create_toolkit(options)
    async with open_store(place) as store:
        durable = create_in_process_client(
            InProcessOptions(model="m", generate=deploy_generate, store=store, durable=True)
        )
        halted = await durable.ask("deploy v1", tk, id="t")
        assert halted.status == "pending"
        assert isinstance(store, CheckpointStore)
        found = await store.load_checkpoint("t")
        assert found is not None and found.status == "done"  # halted: not a crash
        state = await store.get_pending("t")
        assert state is not None and state.status == "pending"  # saved with the run's end
        done = await durable.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
        assert done.text == "finished: deployed v1"
    assert ledger_lines(ledger) == ["v1"]


async def test_a_durable_run_that_raises_ends_failed_and_saves_nothing(tmp_path: Path) -> None:
    from toolnexus_trio import GenerateError, InProcessOptions, create_in_process_client

    async def broken(req: object) -> object:
        raise RuntimeError("model down")

    store = InMemoryConversationStore()
    await store.save("t", [{"role": "user", "content": "before"}])
    failing = create_in_process_client(
        InProcessOptions(model="m", generate=broken, store=store, durable=True)
    )
    with pytest.raises(GenerateError):
        await failing.ask("job", await toolkit(tmp_path / "ledger"), id="t")
    found = await store.load_checkpoint("t")
    assert found is not None and found.status == "failed"
    assert await store.get("t") == [{"role": "user", "content": "before"}]
    assert await store.orphaned_runs() == []
    again = await client(store).ask("hello", await toolkit(tmp_path / "ledger"), id="t")
    assert again.text == "re: hello"  # a failed run does not block the id
