"""The CheckpointStore contract (crash-durable runs), one suite over every store: in
memory, SQLite and PostgreSQL: runs start once, writes are fenced by the owner's
token, an orphaned run is claimed by exactly one of many claimants, and a run ends
together with its thread's save.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from durable_app import open_store
from test_store_contract import AWKWARD

from toolnexus_trio import PendingState
from toolnexus_trio.stores import CheckpointStore

LONG = 60_000  # a lease that does not run out during a test


@pytest.fixture
async def store(store_place: str) -> AsyncIterator[Any]:
    async with open_store(store_place) as opened:
        yield opened


async def test_every_store_is_a_checkpoint_store(store: Any) -> None:
    assert isinstance(store, CheckpointStore)


async def test_a_run_starts_once_and_keeps_its_state_exactly(store: Any) -> None:
    state = {"version": 1, "text": AWKWARD, "n": [1, 2.5, None, True]}
    assert await store.start_run("r", "A", LONG, state)
    assert not await store.start_run("r", "B", LONG, {"other": 1})  # still running
    found = await store.load_checkpoint("r")
    assert found is not None
    assert (found.state, found.status, found.owner, found.expired) == (state, "running", "A", False)
    assert await store.load_checkpoint("none") is None
    assert await store.finish_run("r", "A", "done", None)
    assert await store.start_run("r", "B", LONG, {"again": True})  # a finished id starts anew


async def test_writes_are_fenced_by_the_owner(store: Any) -> None:
    await store.save("r", [{"role": "user", "content": "kept"}])
    assert await store.start_run("r", "A", LONG, {"step": 0})
    assert not await store.save_checkpoint("r", "B", {"step": "stolen"})
    assert not await store.renew_lease("r", "B", LONG)
    assert not await store.finish_run("r", "B", "done", [{"role": "user", "content": "x"}])
    await store.release_run("r", "B")  # not B's: nothing happens
    assert await store.orphaned_runs() == []
    found = await store.load_checkpoint("r")
    assert found is not None and found.state == {"step": 0} and found.owner == "A"
    assert await store.get("r") == [{"role": "user", "content": "kept"}]
    assert await store.save_checkpoint("r", "A", {"step": 1})
    assert await store.renew_lease("r", "A", LONG)


async def test_an_orphaned_run_is_claimed_by_exactly_one_of_many(store: Any) -> None:
    assert await store.start_run("r", "dead", LONG, {"step": 3})
    assert not await store.claim_run("r", "early", LONG)  # the lease is alive
    await store.release_run("r", "dead")  # as a shutdown, or a lease run out
    assert await store.orphaned_runs() == ["r"]
    won: list[str] = []

    async def claim(who: str) -> None:
        if await store.claim_run("r", who, LONG):
            won.append(who)

    async with trio.open_nursery() as nursery:
        for i in range(16):
            nursery.start_soon(claim, f"w{i}")
    assert len(won) == 1
    found = await store.load_checkpoint("r")
    assert found is not None and found.owner == won[0] and found.state == {"step": 3}
    assert await store.orphaned_runs() == []
    assert not await store.save_checkpoint("r", "dead", {"step": "late"})  # fenced off
    assert await store.save_checkpoint("r", won[0], {"step": 4})


async def test_a_run_ends_with_its_thread_in_one_write(store: Any) -> None:
    messages = [{"role": "user", "content": AWKWARD}, {"role": "assistant", "content": "ok"}]
    assert await store.start_run("r", "A", LONG, {})
    assert await store.finish_run("r", "A", "done", messages)
    assert await store.get("r") == messages
    found = await store.load_checkpoint("r")
    assert found is not None and (found.status, found.owner) == ("done", None)
    assert not await store.finish_run("r", "A", "failed", None)  # ended once
    assert not await store.claim_run("r", "B", LONG)  # a finished run is not orphaned

    state = PendingState("k1", "pending", {"anything": 1})
    assert await store.start_run("p", "A", LONG, {})
    assert await store.finish_run("p", "A", "done", messages, state)
    assert await store.get_pending("p") == state

    await store.save("f", [{"role": "user", "content": "before"}])
    assert await store.start_run("f", "A", LONG, {})
    assert await store.finish_run("f", "A", "failed", None)  # a failed run saves nothing
    assert await store.get("f") == [{"role": "user", "content": "before"}]
    assert await store.orphaned_runs() == []


async def test_bad_ids_and_leases_are_refused_before_the_store_is_asked(store: Any) -> None:
    with pytest.raises(ValueError, match="control characters"):
        await store.start_run("a\x00b", "A", LONG, {})
    with pytest.raises(ValueError, match="lease_ms"):
        await store.start_run("r", "A", 0, {})
    with pytest.raises(ValueError, match="not JSON"):
        await store.start_run("r", "A", LONG, {"x": float("nan")})
    assert await store.load_checkpoint("r") is None


async def test_a_run_begins_from_the_thread_it_reads_in_one_step(store: Any) -> None:
    from toolnexus_trio.stores._base import begin_run

    seen: list[Any] = []

    def first(history: Any) -> dict[str, Any]:
        seen.append(history)
        return {"history": history}

    assert await begin_run(store, "new", "A", LONG, first)
    await store.save("t", [{"role": "user", "content": AWKWARD}])
    assert await begin_run(store, "t", "A", LONG, first)
    assert not await begin_run(store, "t", "B", LONG, first)  # still running: refused
    assert seen[:2] == [None, [{"role": "user", "content": AWKWARD}]]
    found = await store.load_checkpoint("t")
    assert found is not None and found.owner == "A"
    assert found.state == {"history": [{"role": "user", "content": AWKWARD}]}
    with pytest.raises(ValueError, match="not JSON"):
        await begin_run(store, "bad", "A", LONG, lambda history: {"x": {1, 2}})
    assert await store.load_checkpoint("bad") is None
