"""The store contract, one suite over every store: in memory, SQLite and PostgreSQL.

(The durable-approval behaviour over the same three stores is in
tests/loop/test_durable.py, through the same ``store_place`` fixture.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from durable_app import client, ledger_lines, open_store, toolkit

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    ConversationStore,
    InMemoryConversationStore,
    PendingState,
    PendingStore,
)

# Text a store must keep exactly: NUL (PostgreSQL's text and jsonb refuse it), a lone
# surrogate (not encodable as UTF-8), astral and combining characters, JSON's specials.
AWKWARD = 'nul:\x00 lone:\ud800 \udfff astral:\U0001f600 e\u0301 quote:" back:\\ \n\t'


@pytest.fixture
async def store(store_place: str) -> AsyncIterator[Any]:
    async with open_store(store_place) as opened:
        yield opened


async def test_every_store_is_a_pending_store(store: Any) -> None:
    assert isinstance(store, ConversationStore)
    assert isinstance(store, PendingStore)


async def test_get_and_save_replace_whole_transcripts(store: Any) -> None:
    assert await store.get("t") is None
    first = [{"role": "user", "content": "a"}]
    await store.save("t", first)
    assert await store.get("t") == first
    second = [*first, {"role": "assistant", "content": "b", "tool_calls": []}]
    await store.save("t", second)
    assert await store.get("t") == second
    await store.save("t", [])
    assert await store.get("t") == []
    assert await store.get("other") is None


async def test_a_saved_list_and_a_got_list_are_copies(store: Any) -> None:
    messages = [{"role": "user", "content": "a"}]
    await store.save("t", messages)
    messages.append({"role": "user", "content": "later"})
    got = await store.get("t")
    assert got == [{"role": "user", "content": "a"}]
    got.clear()
    assert await store.get("t") == [{"role": "user", "content": "a"}]


async def test_text_is_kept_exactly_nul_and_lone_surrogates_included(store: Any) -> None:
    messages = [
        {"role": "user", "content": AWKWARD},
        {"role": "tool", "tool_call_id": AWKWARD, "content": [{"type": "text", "text": AWKWARD}]},
    ]
    # (Ids and keys are plain text; what must survive is what messages and results hold.)
    await store.save("t", messages)
    assert await store.get("t") == messages
    result = {"version": 1, "text": AWKWARD, "n": 1.5, "nested": {"list": [None, True]}}
    await store.save_pending("p", messages, PendingState("k", "pending", result))
    assert await store.get_pending("p") == PendingState("k", "pending", result)
    assert await store.take_pending("p", "k", messages)
    assert await store.get("p") == messages


async def test_pending_state_round_trips_and_save_supersedes_only_pending(store: Any) -> None:
    assert await store.get_pending("t") is None
    await store.save("t", [])
    assert await store.get_pending("t") is None  # a thread that never halted
    state = PendingState("k1", "pending", {"version": 1})
    await store.save_pending("t", [{"role": "user", "content": "x"}], state)
    assert await store.get_pending("t") == state
    await store.save("t", [])
    assert await store.get_pending("t") == PendingState("k1", "superseded")
    for status in ("taken", "answered", "superseded"):
        await store.save_pending("t", [], PendingState("k2", status))
        await store.save("t", [{"role": "user", "content": "on"}])
        assert await store.get_pending("t") == PendingState("k2", status)


async def test_many_concurrent_takes_of_one_state_have_one_winner(store: Any) -> None:
    await store.save_pending("t", [], PendingState("k", "pending", {"version": 1}))
    wins: list[int] = []

    async def take(i: int) -> None:
        if await store.take_pending("t", "k", [{"role": "user", "content": f"by {i}"}]):
            wins.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(take, i)
    assert len(wins) == 1
    assert await store.get("t") == [{"role": "user", "content": f"by {wins[0]}"}]
    assert await store.get_pending("t") == PendingState("k", "taken")


async def test_a_value_that_is_not_json_is_refused_before_anything_is_written(
    store: Any,
) -> None:
    if isinstance(store, InMemoryConversationStore):
        # It keeps values as they are, JSON or not (nothing is written anywhere).
        await store.save("x", [{"role": "user", "content": object()}])
        return
    with pytest.raises(ValueError, match="the transcript of 'x' is not JSON"):
        await store.save("x", [{"role": "user", "content": object()}])
    with pytest.raises(ValueError, match="is not JSON"):
        await store.save_pending("x", [], PendingState("k", "pending", {"n": float("nan")}))
    assert await store.get("x") is None


@pytest.mark.parametrize(
    "bad",
    ["x" * 12_000, "é" * 1025, "nul\x00inside", "line\nbreak", "del\x7f", "lone\ud800"],
    ids=["12000-chars", "2050-bytes", "nul", "newline", "del", "surrogate"],
)
async def test_one_id_contract_refused_before_the_database(store: Any, bad: str) -> None:
    # Was: PostgreSQL refused a 12 000-character id as a *lost connection* ("index row
    # requires 12016 bytes", so a retry loop never ended) and U+0000 too, while SQLite
    # and memory kept both. Now every store refuses the same ids, permanently, at once.
    state = PendingState("k", "pending", {})
    for call in (
        lambda: store.get(bad),
        lambda: store.save(bad, []),
        lambda: store.get_pending(bad),
        lambda: store.save_pending(bad, [], state),
        lambda: store.take_pending(bad, "k", []),
    ):
        with pytest.raises(ValueError, match="a thread id"):
            await call()
    # The longest id allowed is kept, by every store.
    longest = "é" * 1024  # 2 048 bytes
    await store.save_pending(longest, [{"role": "user", "content": "x"}], state)
    assert await store.get(longest) == [{"role": "user", "content": "x"}]
    assert await store.take_pending(longest, "k", [])


async def test_a_take_keeps_its_token_until_the_state_moves_on(store: Any) -> None:
    await store.save_pending("t", [], PendingState("k", "pending", {"x": 1}))
    assert await store.take_pending("t", "k", [], token="attempt-1")
    taken = PendingState("k", "taken", taken_by="attempt-1")
    assert await store.get_pending("t") == taken
    assert PendingState.from_json(taken.to_json()) == taken
    await store.save("t", [])  # a plain save keeps a taken state as it is
    assert await store.get_pending("t") == taken
    await store.save_pending("t", [], PendingState("k", "answered"))
    assert await store.get_pending("t") == PendingState("k", "answered")
    # Without a token (a caller from before tokens), nothing is recorded.
    await store.save_pending("u", [], PendingState("k", "pending", {}))
    assert await store.take_pending("u", "k", [])
    assert await store.get_pending("u") == PendingState("k", "taken")


class ThreeParameterStore(InMemoryConversationStore):
    """A user's store written before ``take_pending`` had its ``token``."""

    async def take_pending(self, id: str, key: str, messages: Any) -> bool:  # type: ignore[override]
        return await super().take_pending(id, key, messages)


async def test_a_store_without_the_token_parameter_still_answers_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    c = client(ThreeParameterStore())
    await c.ask("deploy v1", tk, id="t")
    done = await c.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
    assert done.status == "done" and ledger_lines(ledger) == ["v1"]
    with pytest.raises(AlreadyAnswered, match="its outcome is saved"):
        await c.answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
