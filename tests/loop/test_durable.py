"""Durable approvals in one process: ``ask`` keeps the pending run, ``Client.answer``
continues it exactly once, and every store (in memory, SQLite, PostgreSQL) keeps the
take-once rule.

Cross-process behaviour (real subprocesses on one SQLite file) is in
test_durable_processes.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from durable_app import client, ledger_lines, open_store, toolkit

import toolnexus_trio.loop._durable as durable
from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    GenerateError,
    InMemoryConversationStore,
    PendingExpired,
    PendingState,
    PendingStore,
    RunResult,
    SqliteConversationStore,
)

PAST = "2001-02-03T04:05:06Z"
FUTURE = "2999-01-01T00:00:00+00:00"


@pytest.fixture
async def store(store_place: str) -> AsyncIterator[Any]:
    """Every test taking ``store`` runs on the in-memory, SQLite and PostgreSQL stores."""
    async with open_store(store_place) as opened:
        yield opened


def tool_contents(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


async def test_a_pending_ask_is_answered_once_and_a_replay_is_refused(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    halted = await c.ask("deploy v1", tk, id="t")
    assert halted.status == "pending"
    state = await store.get_pending("t")
    assert state is not None and state.status == "pending"
    assert RunResult.from_json(state.result) == halted
    assert await store.get("t") == halted.messages

    answer = Answer("req-v1-call-v1", True)
    done = await c.answer("t", [answer], toolkit=tk)
    assert (done.status, done.text) == ("done", "finished: deployed v1")
    assert ledger_lines(ledger) == ["v1"]
    assert await store.get("t") == done.messages
    assert (await store.get_pending("t")) == PendingState(state.key, "answered")

    with pytest.raises(AlreadyAnswered, match="already answered: its outcome is saved") as caught:
        await c.answer("t", [answer], toolkit=tk)
    assert caught.value.status == "answered"
    assert ledger_lines(ledger) == ["v1"]
    # the conversation goes on from the answered transcript
    more = await c.ask("thanks", tk, id="t")
    assert more.text == "re: thanks"
    assert [m["role"] for m in more.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


async def test_concurrent_answers_in_one_process_run_the_tool_once(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    await c.ask("deploy v1", tk, id="t")
    outcomes: list[Any] = []

    async def answer() -> None:
        try:
            outcomes.append(await c.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk))
        except AlreadyAnswered as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(answer)
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyAnswered"] * 4 + ["RunResult"]
    assert ledger_lines(ledger) == ["v1"]


async def test_two_stores_on_one_file_racing_past_the_load_take_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clients, each with its own store object (so no shared in-process lock), both
    load the pending state before either takes it: the conditional update decides."""
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    path = tmp_path / "threads.db"
    async with SqliteConversationStore(path) as first, SqliteConversationStore(path) as second:
        await client(first).ask("deploy v1", tk, id="t")
        loaded = 0
        both_loaded = trio.Event()

        async def pause(point: str) -> None:
            nonlocal loaded
            if point == "loaded":
                loaded += 1
                if loaded == 2:
                    both_loaded.set()
                await both_loaded.wait()

        monkeypatch.setattr(durable, "_pause_hook", pause)
        outcomes: list[Any] = []

        async def answer(store: SqliteConversationStore) -> None:
            try:
                outcomes.append(
                    await client(store).answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
                )
            except AlreadyAnswered as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, first)
            nursery.start_soon(answer, second)
    assert loaded == 2
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyAnswered", "RunResult"]
    loser = next(o for o in outcomes if isinstance(o, AlreadyAnswered))
    assert loser.status == "taken"
    assert ledger_lines(ledger) == ["v1"]


async def test_take_pending_is_a_conditional_update(store: Any) -> None:
    assert isinstance(store, PendingStore)
    assert await store.get_pending("t") is None
    await store.save_pending(
        "t", [{"role": "user", "content": "a"}], PendingState("k1", "pending", {"x": 1})
    )
    assert not await store.take_pending("t", "other-key", [])
    assert not await store.take_pending("nobody", "k1", [])
    interrupted = [
        {"role": "user", "content": "a"},
        {"role": "tool", "tool_call_id": "c", "content": "interrupted"},
    ]
    assert await store.take_pending("t", "k1", interrupted)
    assert not await store.take_pending("t", "k1", [])
    assert await store.get_pending("t") == PendingState("k1", "taken")
    assert await store.get("t") == interrupted
    # a plain save supersedes only a state still pending
    await store.save("t", [])
    assert await store.get_pending("t") == PendingState("k1", "taken")
    await store.save_pending("t", [], PendingState("k2", "pending", {"x": 2}))
    await store.save("t", [{"role": "user", "content": "moved on"}])
    assert await store.get_pending("t") == PendingState("k2", "superseded")
    assert not await store.take_pending("t", "k2", [])


# Behaviour 5: declines, partial answers and expiries follow the resume rules -----------


async def test_declines_and_partial_answers_follow_the_resume_rules(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    halted = await c.ask("deploy a b c", tk, id="t")
    assert [s.request.id for s in halted.suspended] == [
        "req-a-call-a",
        "req-b-call-b",
        "req-c-call-c",
    ]
    answers = [Answer("req-a-call-a", True), Answer("req-b-call-b", False, reason="declined")]
    # what the in-memory resume of the same result gives, on a copy of the ledger
    reference_ledger = tmp_path / "reference"
    reference = await client(InMemoryConversationStore()).resume(
        halted, answers, toolkit=await toolkit(reference_ledger)
    )

    done = await c.answer("t", answers, toolkit=tk)
    assert (
        tool_contents(done.messages)
        == tool_contents(reference.messages)
        == [
            "deployed a",
            "declined/expired: Deploy b?",
            "unresolved: Deploy c?",
        ]
    )
    assert done.text == reference.text
    assert ledger_lines(ledger) == ["a"]
    with pytest.raises(AlreadyAnswered):
        await c.answer("t", [Answer("req-c-call-c", True)], toolkit=tk)
    assert ledger_lines(ledger) == ["a"]


async def test_an_expired_request_refuses_its_answer_and_is_declined(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger, expires_at={"old": PAST, "new": FUTURE})
    c = client(store)
    await c.ask("deploy old new", tk, id="t")
    with pytest.raises(
        PendingExpired, match="expired before it was answered \\('Deploy old\\?'\\)"
    ) as caught:
        await c.answer(
            "t", [Answer("req-old-call-old", True), Answer("req-new-call-new", True)], toolkit=tk
        )
    assert caught.value.request_ids == ["req-old-call-old"]
    result = caught.value.result
    assert tool_contents(result.messages) == ["declined/expired: Deploy old?", "deployed new"]
    assert result.status == "done"
    assert ledger_lines(ledger) == ["new"]  # the expired approval never ran
    assert await store.get("t") == result.messages
    state = await store.get_pending("t")
    assert state is not None and state.status == "answered"
    with pytest.raises(AlreadyAnswered):
        await c.answer("t", [Answer("req-old-call-old", True)], toolkit=tk)


async def test_an_unanswered_expired_request_is_declined_without_an_error(
    store: Any, tmp_path: Path
) -> None:
    tk = await toolkit(tmp_path / "ledger", expires_at={"old": PAST})
    c = client(store)
    await c.ask("deploy old new", tk, id="t")
    done = await c.answer("t", [Answer("req-new-call-new", False)], toolkit=tk)
    assert tool_contents(done.messages) == [
        "declined/expired: Deploy old?",
        "declined/expired: Deploy new?",
    ]


@pytest.mark.parametrize("expires_at", ["tomorrow", "2999-01-01T00:00:00"])
async def test_an_unreadable_expiry_counts_as_expired(expires_at: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger, expires_at={"x": expires_at})
    c = client(InMemoryConversationStore())
    await c.ask("deploy x", tk, id="t")
    with pytest.raises(PendingExpired):
        await c.answer("t", [Answer("req-x-call-x", True)], toolkit=tk)
    assert ledger_lines(ledger) == []


# Bad answers consume nothing; what cannot be answered says why ----------------------


async def test_a_wrong_answer_consumes_nothing(store: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    await c.ask("deploy v1", tk, id="t")
    with pytest.raises(ValueError, match="answer 'req-nope' matches no suspended request of 't'"):
        await c.answer("t", [Answer("req-nope", True)], toolkit=tk)
    with pytest.raises(ValueError, match="matches no suspended request"):
        await c.answer("t", {"req-v1-call-v1": Answer("req-other", True)}, toolkit=tk)
    with pytest.raises(TypeError, match="answers must be Answer objects, not dict"):
        await c.answer("t", [{"id": "req-v1-call-v1", "ok": True}], toolkit=tk)  # type: ignore[list-item]
    state = await store.get_pending("t")
    assert state is not None and state.status == "pending"
    done = await c.answer("t", {"req-v1-call-v1": Answer("req-v1-call-v1", True)}, toolkit=tk)
    assert done.text == "finished: deployed v1"


async def test_nothing_pending_and_stores_without_pending_state(store: Any, tmp_path: Path) -> None:
    tk = await toolkit(tmp_path / "ledger")
    c = client(store)
    with pytest.raises(LookupError, match="no pending run is stored under 'never'"):
        await c.answer("never", [], toolkit=tk)
    await c.ask("hello", tk, id="plain")
    with pytest.raises(LookupError):
        await c.answer("plain", [], toolkit=tk)

    class TwoMethodStore:
        async def get(self, id: str) -> Any:
            return None

        async def save(self, id: str, messages: Any) -> None:
            return None

    with pytest.raises(TypeError, match="TwoMethodStore keeps no pending state"):
        await client(TwoMethodStore()).answer("t", [], toolkit=tk)


async def test_a_later_ask_supersedes_the_pending_run(store: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    await c.ask("deploy v1", tk, id="t")
    moved = await c.ask("never mind", tk, id="t")
    assert moved.text == "re: never mind"
    with pytest.raises(AlreadyAnswered, match="the conversation moved on") as caught:
        await c.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
    assert caught.value.status == "superseded"
    assert ledger_lines(ledger) == []
    assert await store.get("t") == moved.messages


async def test_a_resumed_run_that_suspends_again_is_answerable_again(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    first = await c.ask("chain a b", tk, id="t")
    assert first.pending is not None and first.pending.id == "req-a-call-a"
    key_a = (await store.get_pending("t")).key
    second = await c.answer("t", [Answer("req-a-call-a", True)], toolkit=tk)
    assert second.status == "pending" and second.pending is not None
    assert second.pending.id == "req-b-call-b"
    state = await store.get_pending("t")
    assert state.status == "pending" and state.key != key_a
    # replaying a's answer now matches nothing and consumes nothing
    with pytest.raises(ValueError, match="matches no suspended request"):
        await c.answer("t", [Answer("req-a-call-a", True)], toolkit=tk)
    done = await c.answer("t", [Answer("req-b-call-b", True)], toolkit=tk)
    assert done.text == "finished: deployed b"
    assert tool_contents(done.messages) == ["deployed a", "deployed b"]
    assert ledger_lines(ledger) == ["a", "b"]
    assert [m["role"] for m in done.messages].count("user") == 1


# What an answer that stops half-way leaves behind ----------------------------------


async def test_a_cancelled_answer_leaves_the_interrupted_outcome(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ran = trio.Event()

    async def pause(point: str) -> None:
        ran.set()
        await trio.sleep_forever()

    tk = await toolkit(ledger, pause=pause)
    c = client(store)
    await c.ask("deploy v1", tk, id="t")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(c.answer, "t", [Answer("req-v1-call-v1", True)], toolkit=tk))
        await ran.wait()
        nursery.cancel_scope.cancel()
    state = await store.get_pending("t")
    assert state is not None and state.status == "taken"
    saved = await store.get("t")
    assert saved is not None
    assert tool_contents(saved) == [
        "interrupted: Deploy v1? (answered, but the run stopped before its outcome was saved; "
        "the action may or may not have run)"
    ]
    # The same answer again: its own earlier attempt took it (issue 30 item 14).
    with pytest.raises(AlreadyAnswered, match="an earlier attempt of this same answer") as own:
        await c.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
    assert own.value.in_doubt and own.value.status == "taken"
    # Another answer: a competitor took it first, as before.
    with pytest.raises(AlreadyAnswered, match="another answer took it first") as other:
        await c.answer("t", [Answer("req-v1-call-v1", False)], toolkit=tk)
    assert not other.value.in_doubt
    assert ledger_lines(ledger) == ["v1"]


async def test_a_model_failure_after_the_tools_ran_saves_what_they_did(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    await client(store).ask("deploy v1", tk, id="t")

    from toolnexus_trio import InProcessOptions, create_in_process_client

    async def broken(request: Any) -> Any:
        raise ConnectionError("model down")

    failing = create_in_process_client(InProcessOptions(model="m", generate=broken, store=store))
    with pytest.raises(GenerateError):
        await failing.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
    saved = await store.get("t")
    assert saved is not None and tool_contents(saved) == ["deployed v1"]
    state = await store.get_pending("t")
    assert state is not None and state.status == "answered"


# Behaviour 6 in one process: many tasks, different ids, nothing lost ---------------------


async def test_many_tasks_ask_and_answer_different_ids_and_nothing_is_lost(
    store: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(store)
    ids = [f"thread-{i}" for i in range(40)]

    async def one(thread: str) -> None:
        halted = await c.ask(f"deploy {thread}", tk, id=thread)
        assert halted.status == "pending"
        done = await c.answer(thread, [Answer(f"req-{thread}-call-{thread}", True)], toolkit=tk)
        assert done.text == f"finished: deployed {thread}"

    async with trio.open_nursery() as nursery:
        for thread in ids:
            nursery.start_soon(one, thread)
    assert sorted(ledger_lines(ledger)) == sorted(ids)
    for thread in ids:
        saved = await store.get(thread)
        assert saved is not None and tool_contents(saved) == [f"deployed {thread}"]
        state = await store.get_pending(thread)
        assert state is not None and state.status == "answered"


# The in-memory store forgets a pending run with its thread -------------------------------


async def test_the_in_memory_store_forgets_pending_state_with_the_thread(tmp_path: Path) -> None:
    store = InMemoryConversationStore(max_conversations=1)
    tk = await toolkit(tmp_path / "ledger")
    c = client(store)
    await c.ask("deploy v1", tk, id="old")
    await c.ask("hello", tk, id="new")
    assert await store.get_pending("old") is None
    with pytest.raises(LookupError):
        await c.answer("old", [Answer("req-v1-call-v1", True)], toolkit=tk)


# SqliteConversationStore specifics ------------------------------------------------------


async def test_sqlite_file_is_wal_versioned_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    messages = [{"role": "user", "content": "héllo \U0001f600 \ud800"}]
    async with SqliteConversationStore(path) as store:
        await store.save("t", messages)
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("PRAGMA user_version").fetchone() == (1,)
    finally:
        raw.close()
    async with SqliteConversationStore(path) as again:
        assert await again.get("t") == messages
        assert await again.get("other") is None
        assert await again.get_pending("t") is None


async def test_sqlite_refuses_a_newer_file_and_damaged_rows(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    raw = sqlite3.connect(newer)
    raw.execute("PRAGMA user_version=7")
    raw.close()
    async with SqliteConversationStore(newer) as store:
        with pytest.raises(RuntimeError, match="written by a newer toolnexus_trio \\(schema 7"):
            await store.get("t")
    path = tmp_path / "threads.db"
    async with SqliteConversationStore(path) as store:
        await store.save_pending("t", [], PendingState("k", "pending", {"version": 1}))
        raw = sqlite3.connect(path)
        raw.execute("UPDATE toolnexus_threads SET messages = '{broken', pending_status = 'maybe'")
        raw.commit()
        raw.close()
        with pytest.raises(ValueError, match="the transcript of 't' in the database is damaged"):
            await store.get("t")
        with pytest.raises(ValueError, match="invalid PendingState"):
            await store.get_pending("t")
        with pytest.raises(ValueError, match="the transcript of 'x' is not JSON"):
            await store.save("x", [{"role": "user", "content": object()}])
    with pytest.raises(RuntimeError, match="closed"):
        await store.get("t")


async def test_sqlite_waits_for_another_writer_in_a_thread_not_on_the_event_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    async with SqliteConversationStore(path, timeout=10) as store:
        await store.save("t", [])
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
            saved = trio.Event()

            async def save() -> None:
                await store.save("t", [{"role": "user", "content": "after the lock"}])
                saved.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(save)
                # Were the save on the event loop, this task would not run again until
                # the save gave up; it runs, and it is the one that releases the lock.
                await trio.testing.wait_all_tasks_blocked()
                assert not saved.is_set()
                blocker.execute("COMMIT")
            assert saved.is_set()
        finally:
            blocker.close()
        assert await store.get("t") == [{"role": "user", "content": "after the lock"}]
