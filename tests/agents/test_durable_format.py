"""The durable records of an agent tree (toolnexus_trio.agents._durable): written as
versioned JSON through the store protocols only, read back strictly (a store is outside
input), and the take-once mark behaving alike on every store we ship."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    InMemoryConversationStore,
    Request,
    SqliteConversationStore,
)
from toolnexus_trio.agents._durable import (
    FORMAT_VERSION,
    MAX_RECORD_CHARS,
    TABLE_ID,
    DurableFormatError,
    DurableTree,
    PendingEntry,
    pending_id,
    pending_state,
    read_pending,
    read_table,
    table_message,
)
from toolnexus_trio.stores import PendingState, PendingStore

SNAPSHOT: dict[str, Any] = {"handles": [{"id": "root/a.1", "state": "suspended"}]}
ENTRY = PendingEntry("pnd-1", "root/a.1", "k1")


def attrs_dict(entry: PendingEntry) -> dict[str, str]:
    return {"request_id": entry.request_id, "handle": entry.handle, "key": entry.key}


def _table(**changes: Any) -> list[dict[str, Any]]:
    message = table_message(SNAPSHOT, [ENTRY])
    doc = json.loads(message["content"])
    doc.update(changes)
    return [{**message, "content": json.dumps(doc)}]


def test_a_table_round_trips() -> None:
    doc = read_table([table_message(SNAPSHOT, [ENTRY])])
    assert doc is not None
    assert doc.snapshot == SNAPSHOT and doc.pending == [ENTRY] and doc.version == FORMAT_VERSION


def test_no_record_is_no_table() -> None:
    assert read_table(None) is None


@pytest.mark.parametrize(
    ("messages", "why"),
    [
        ([], "not one message"),
        ([{"role": "user", "content": "{}"}], "not a table message"),
        ([{"role": "system", "name": "toolnexus-trio-agents", "content": "{"}], "not JSON"),
        (_table(version=2), "newer toolnexus_trio"),
        (_table(version="1"), "no integer version"),
        (_table(version=0), "invalid version"),
        (_table(format="something-else"), "damaged"),
        (_table(extra=1), "damaged"),
        (_table(pending=[{"request_id": "x", "handle": "h"}]), "damaged"),
        (_table(pending=[{"request_id": 1, "handle": "h", "key": "k"}]), "damaged"),
        (_table(snapshot=[]), "damaged"),
        (_table(pending=[attrs_dict(ENTRY), attrs_dict(ENTRY)]), "twice"),
    ],
)
def test_a_damaged_table_is_refused_with_a_reason(messages: list[Any], why: str) -> None:
    with pytest.raises(DurableFormatError, match=why):
        read_table(messages)


def test_a_huge_or_deep_table_is_refused_before_it_costs_much() -> None:
    huge = [
        {"role": "system", "name": "toolnexus-trio-agents", "content": " " * (MAX_RECORD_CHARS + 1)}
    ]
    with pytest.raises(DurableFormatError, match="characters"):
        read_table(huge)
    deep = _table(snapshot={"x": json.loads("[" * 400 + "]" * 400)})
    with pytest.raises(DurableFormatError, match="nests more than"):
        read_table(deep)


def test_a_snapshot_that_is_not_json_is_refused_on_write() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        table_message({"x": object()}, [])


def test_a_pending_record_round_trips_and_is_read_strictly() -> None:
    request = Request(id="pnd-1", kind="approval", prompt="ok?", data={"path": ["root/a.1"]})
    state = pending_state("root/a.1", request)
    assert state.status == "pending" and len(state.key) == 32
    assert read_pending(state) == ("root/a.1", request)
    # The state a store gives back went through JSON: read it from there too.
    again = PendingState.from_json(json.loads(json.dumps(state.to_json())))
    assert read_pending(again) == ("root/a.1", request)
    assert state.result is not None
    for bad, why in [
        ({**state.result, "version": 9}, "newer"),
        ({**state.result, "handle": 3}, "damaged"),
        ({**state.result, "request": {"id": "x"}}, "request is damaged"),
        ({**state.result, "more": True}, "damaged"),
    ]:
        with pytest.raises(DurableFormatError, match=why):
            read_pending(PendingState(state.key, "pending", bad))
    with pytest.raises(DurableFormatError, match="no result"):
        read_pending(PendingState(state.key, "pending"))


async def _stores(tmp_path: Path) -> list[PendingStore]:
    return [InMemoryConversationStore(), SqliteConversationStore(tmp_path / "t.db")]


async def test_the_records_live_in_every_store_through_its_protocol_only(tmp_path: Path) -> None:
    """The table and the take-once mark on the in-memory and the SQLite store: a second
    take loses, a plain save of the table never touches a pending record."""
    for store in await _stores(tmp_path):
        request = Request(id="pnd-7", kind="approval", prompt="ok?")
        state = pending_state("root/a.1", request)
        await store.save_pending(pending_id(request.id), [], state)
        await store.save(TABLE_ID, [table_message(SNAPSHOT, [ENTRY])])
        await store.save(TABLE_ID, [table_message(SNAPSHOT, [])])
        found = await store.get_pending(pending_id(request.id))
        assert found is not None and read_pending(found) == ("root/a.1", request)
        doc = read_table(await store.get(TABLE_ID))
        assert doc is not None and doc.pending == []
        assert await store.take_pending(pending_id(request.id), state.key, [])
        assert not await store.take_pending(pending_id(request.id), state.key, [])
        taken = await store.get_pending(pending_id(request.id))
        assert taken is not None and taken.status == "taken"
        Answer(request.id, True)  # the answer a resume carries echoes the request id
        if isinstance(store, SqliteConversationStore):
            await store.aclose()


async def test_a_durable_tree_records_takes_once_and_settles_its_approvals(tmp_path: Path) -> None:
    """DurableTree on both stores: a new root-level approval gets a take-once record and
    is listed in the table; a second tree on the same store (another process) loads it;
    one take wins, the next is AlreadyAnswered; the finished resume marks it answered;
    an approval dropped without a take (an interrupt) is superseded."""
    for store in await _stores(tmp_path):
        first = Request(id="pnd-a", kind="approval", prompt="a?")
        second = Request(id="pnd-b", kind="approval", prompt="b?")
        tree = DurableTree(store)
        assert await tree.load() is None
        await tree.persist(SNAPSHOT, [("root/a.1", first), ("root/b.1", second)])
        other = DurableTree(store)  # a fresh runtime on the same store
        assert await other.load() == SNAPSHOT
        assert await other.take("pnd-a") == ("root/a.1", first)
        with pytest.raises(AlreadyAnswered) as replay:
            await tree.take("pnd-a")
        assert replay.value.status == "taken"
        with pytest.raises(LookupError):
            await other.take("pnd-unknown")
        # The resume settled pnd-a; nobody answers pnd-b, an interrupt cancels it.
        await other.persist({"after": True}, [("root/b.1", second)])
        await other.persist({"after": 2}, [])
        a, b = (
            await store.get_pending(pending_id("pnd-a")),
            await store.get_pending(pending_id("pnd-b")),
        )
        assert a is not None and a.status == "answered"
        assert b is not None and b.status == "superseded"
        with pytest.raises(AlreadyAnswered) as late:
            await DurableTree(store).take("pnd-b")
        assert late.value.status == "superseded"
        doc = read_table(await store.get(TABLE_ID))
        assert doc is not None and doc.snapshot == {"after": 2} and doc.pending == []
        if isinstance(store, SqliteConversationStore):
            await store.aclose()


async def test_a_snapshot_that_is_not_json_writes_nothing() -> None:
    store = InMemoryConversationStore()
    request = Request(id="pnd-a", kind="approval", prompt="a?")
    with pytest.raises(ValueError, match="not JSON"):
        await DurableTree(store).persist({"x": {1, 2}}, [("root/a.1", request)])
    assert len(store) == 0
