"""A tree whose leaf asks again after its answer, and a turn with several suspensions:
every request reaches the host (or the nearest ``wait_for``) in turn, each is answered
once, and nothing becomes ``"unresolved"`` on the way (SPEC §7D escalation, §10
first-in-order).

The three-level tree of durable_tree_child.py: ``lead`` → ``deputy`` → ``deployer``, whose
``deploy`` tool asks for approval. ``generate_twice``: the deployer deploys twice;
``generate_pair``: the deputy delegates two deploys in one turn. The two-process
versions are in test_durable_tree_processes.py.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from durable_tree_child import generate_pair, generate_twice, registry

from toolnexus_trio import AlreadyAnswered, Answer, InMemoryConversationStore, Request
from toolnexus_trio.agents import AgentDef, TaskResult, open_agent_runtime
from toolnexus_trio.agents._durable import pending_id
from toolnexus_trio.stores import PendingStore

LEAD, DEPUTY = "root/lead.1", "root/lead.1/deputy.1"
LEAF = f"{DEPUTY}/deployer.1"
LEAF2 = f"{DEPUTY}/deployer.2"


def ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def asked(result: TaskResult) -> Request:
    """The request of a pending root-level result, escalated as the first one is."""
    assert result.status == "pending", result
    assert result.pending is not None
    assert result.pending.kind == "approval"
    assert result.pending.prompt == "Deploy v1?"
    assert result.pending.data == {"path": ["root", "lead.1"]}
    return result.pending


async def test_a_leaf_that_asks_again_leaves_the_tree_pending_on_the_new_request(
    tmp_path: Path,
) -> None:
    book = tmp_path / "ledger"
    async with open_agent_runtime(registry(book), generate=generate_twice) as rt:
        first = asked(await rt.run("lead", "ship it"))
        second = asked(await rt.resume(Answer(first.id, True)))
        assert second.id != first.id
        assert ledger(book) == ["asked", "deployed", "asked"]
        # The whole chain waits on the new request; the leaf is the deepest.
        assert {v.id: v.state for v in rt.list()} == {
            "root": "idle",
            LEAD: "suspended",
            DEPUTY: "suspended",
            LEAF: "suspended",
        }
        leaf = rt.handle(LEAF)
        assert leaf.pending is not None
        assert leaf.pending.id == second.id
        assert leaf.pending.data == {"path": LEAF.split("/")}
        done = await rt.resume(Answer(second.id, True))
        assert done.status == "done"
        assert done.text == "m-lead: m-deputy: m-deployer: v1 is live"
        assert ledger(book) == ["asked", "deployed", "asked", "deployed"]
        assert sorted(v.id for v in rt.list()) == ["root", LEAD, DEPUTY, LEAF]  # no duplicate
        for request in (first, second):
            with pytest.raises(AlreadyAnswered):
                await rt.resume(Answer(request.id, True))
    assert ledger(book) == ["asked", "deployed", "asked", "deployed"]


async def test_the_nearest_wait_for_is_asked_again_too(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    seen: list[Request] = []

    async def approve(request: Request) -> Answer:
        seen.append(request)
        return Answer(request.id, True)

    defs = registry(book)
    defs["lead"] = attrs.evolve(defs["lead"], wait_for=approve)
    async with open_agent_runtime(defs, generate=generate_twice) as rt:
        done = await rt.run("lead", "ship it")
    assert done.status == "done", done
    assert done.text == "m-lead: m-deputy: m-deployer: v1 is live"
    assert len(seen) == 2 and seen[0].id != seen[1].id
    assert [r.data for r in seen] == [{"path": DEPUTY.split("/")}] * 2  # one hop below
    assert ledger(book) == ["asked", "deployed", "asked", "deployed"]


async def pair_in_turn(
    defs: dict[str, AgentDef], book: Path, store: PendingStore | None = None
) -> tuple[Request, Request, TaskResult]:
    """Run the pair tree, answering each request in a fresh runtime when there is a
    store (else in the same one): (first request, second request, final result)."""
    if store is None:
        async with open_agent_runtime(defs, generate=generate_pair) as rt:
            first = asked(await rt.run("lead", "ship it"))
            leaves = [rt.handle(LEAF), rt.handle(LEAF2)]
            assert [leaf.state for leaf in leaves] == ["suspended"] * 2
            # Which call spawned which leaf depends on scheduling; the first in call order
            # (the "v1" call) is the one the host sees first.
            (on_first,) = [leaf for leaf in leaves if leaf.pending and leaf.pending.id == first.id]
            (other,) = [leaf for leaf in leaves if leaf is not on_first]
            assert other.pending is not None
            with pytest.raises(LookupError):  # the host sees one request at a time
                await rt.resume(Answer(other.pending.id, True))
            second = asked(await rt.resume(Answer(first.id, True)))
            assert second.id == other.pending.id
            assert on_first.state == "closed"  # its task call is over
            assert other.state == "suspended"
            done = await rt.resume(Answer(second.id, True))
            for request in (first, second):
                with pytest.raises(AlreadyAnswered):
                    await rt.resume(Answer(request.id, True))
        return first, second, done
    async with open_agent_runtime(defs, generate=generate_pair, store=store) as rt:
        first = asked(await rt.run("lead", "ship it"))
    async with open_agent_runtime(defs, generate=generate_pair, store=store) as rt:
        second = asked(await rt.resume(Answer(first.id, True)))
    async with open_agent_runtime(defs, generate=generate_pair, store=store) as rt:
        done = await rt.resume(Answer(second.id, True))
        for request in (first, second):
            with pytest.raises(AlreadyAnswered):
                await rt.resume(Answer(request.id, True))
    return first, second, done


@pytest.mark.parametrize("durable", [False, True], ids=["in-process", "store"])
async def test_several_suspensions_of_one_turn_reach_the_host_in_turn(
    tmp_path: Path, durable: bool
) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore() if durable else None
    first, second, done = await pair_in_turn(registry(book), book, store)
    assert first.id != second.id
    assert done.status == "done", done
    # The deputy's model saw both deploys' results, not "unresolved: ...".
    assert done.text == "m-lead: m-deputy: m-deployer: v1 is live"
    assert ledger(book) == ["asked", "asked", "deployed", "deployed"]  # each ran once
    if store is not None:
        for request in (first, second):
            state = await store.get_pending(pending_id(request.id))
            assert state is not None
            assert state.status == "answered"


async def test_several_suspensions_under_a_wait_for_are_each_answered_inline(
    tmp_path: Path,
) -> None:
    book = tmp_path / "ledger"
    seen: list[str] = []

    async def approve(request: Request) -> Answer:
        seen.append(request.id)
        return Answer(request.id, True)

    defs = registry(book)
    defs["lead"] = attrs.evolve(defs["lead"], wait_for=approve)
    async with open_agent_runtime(defs, generate=generate_pair) as rt:
        done = await rt.run("lead", "ship it")
    assert done.status == "done", done
    assert len(set(seen)) == 2
    assert ledger(book) == ["asked", "asked", "deployed", "deployed"]
