"""Backpressure: a gateway that stops reading costs the host bounded memory, then the link.

The peer is the fake gateway over a real loopback socket; "not reading" means it
sends requests and never calls ``recv``, so the host's writes fill the kernel buffers
and then stop. Memory is measured with ``tracemalloc`` (everything Python allocates in
this process, the peer included) and with the transport's own byte counter.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing
from gateway_helpers import gateway, serving, wait_until

from toolnexus_trio.tesseron import (
    ActionContext,
    Disconnected,
    TesseronApp,
    _connection,
    _subscriptions,
    _ws,
)
from toolnexus_trio.tesseron._invocations import MAX_HELD_ANSWER_BYTES
from toolnexus_trio.tesseron._ws import SEND_HIGH_WATER, SEND_STALL_TIMEOUT

BIG = 100_000
"""Size of the resource value: each answer is a ~100 KB frame."""

ANSWER_BOUND = 2 * (SEND_HIGH_WATER + BIG + 1024)
"""The documented bound on unsent outgoing bytes: twice (high-water mark + one frame)."""

SLACK = 6 * 1024 * 1024
"""Everything else alive meanwhile: a few frames being encoded, trio, the peer, and what
worker threads left running by earlier tests of the session allocate in the window
(tracemalloc counts every thread; two full runs went 0.6 MiB past a 3 MiB slack). The
failure this guards against is tens of MB (a held value per read), far above it."""


MARKER = "issue-30-answer"
"""In every value the big resource reads: the answers alive are the dicts holding it."""


def big_app() -> TesseronApp:
    app = TesseronApp("t", "T")

    def read() -> dict[str, Any]:
        # A new value for every read, as a real resource builds it: a read that holds
        # its value while waiting for room costs those bytes (a shared value hid it).
        # (A list inside, so that the garbage collector tracks the dict: answers_alive.)
        return {"marker": MARKER, "data": ["x" * BIG]}

    app.resource("big", read)
    return app


def answers_alive() -> int:
    """Read answers that exist as values (read, not yet encoded into the send queue)."""
    return sum(1 for o in gc.get_objects() if type(o) is dict and o.get("marker") is MARKER)


@contextmanager
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def peak() -> int:
    return tracemalloc.get_traced_memory()[1]


async def test_reads_the_peer_does_not_take_stay_within_the_bound() -> None:
    # 400 reads of a 100 KB resource: 40 MB of answers for a peer that reads none.
    with trio.fail_after(20), traced():
        async with serving(big_app()) as host, gateway(host) as gw:
            ws = host._active._ws  # type: ignore[union-attr]
            tracemalloc.reset_peak()
            for _ in range(400):
                gw.request("resources/read", {"name": "big"})
            await trio.testing.wait_all_tasks_blocked()
            assert ws._out_bytes + getattr(ws, "_sending_bytes", 0) <= ANSWER_BOUND
            # Issue 30: the bytes of answers in flight, not only their count. Reading
            # first and waiting for room after held a value per read of the batch
            # (hundreds of 100 KB values here); now a read waits for room before it
            # reads, so no value waits beside the queue.
            assert answers_alive() <= 1
            assert ws.queued_bytes + answers_alive() * BIG <= ANSWER_BOUND
            assert peak() <= ANSWER_BOUND + SLACK
            assert host.connected  # still within the stall deadline


async def test_answers_of_quick_invocations_the_peer_does_not_take_are_bounded_in_bytes() -> None:
    # The same flood through actions/invoke: handlers that answer at once each held
    # their (fresh) output while waiting for room. Now an answer without room is held
    # as its frame, counted, and past MAX_HELD_ANSWER_BYTES handlers wait to start.
    app = TesseronApp("t", "T")
    started = 0

    @app.action("big")
    async def big(input: Any, ctx: ActionContext) -> Any:
        nonlocal started
        started += 1
        return {"marker": MARKER, "data": ["x" * BIG]}

    with trio.fail_after(20), traced():
        async with serving(app) as host, gateway(host) as gw:
            conn = host._active
            ws = conn._ws  # type: ignore[union-attr]
            tracemalloc.reset_peak()
            for _ in range(400):
                gw.invoke("big", {})
            await trio.testing.wait_all_tasks_blocked()
            held = conn._held_bytes  # type: ignore[union-attr]
            assert answers_alive() <= 1
            assert held <= MAX_HELD_ANSWER_BYTES + BIG + 1024
            assert ws.queued_bytes + held <= ANSWER_BOUND + MAX_HELD_ANSWER_BYTES + BIG
            assert started < 400  # the rest wait to start
            assert peak() <= ANSWER_BOUND + MAX_HELD_ANSWER_BYTES + SLACK
            assert host.connected


async def test_reads_in_flight_are_capped_and_answered_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_connection, "MAX_READS_IN_FLIGHT", 2)
    app = TesseronApp("t", "T")
    release = trio.Event()
    reads: list[int] = []
    invoked = 0

    async def read() -> int:
        reads.append(len(reads))
        await release.wait()
        return len(reads)

    @app.action("ping")
    async def ping(input: Any, ctx: ActionContext) -> Any:
        nonlocal invoked
        invoked += 1
        return "pong"

    app.resource("slow", read)
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            ids = [gw.request("resources/read", {"name": "slow"}) for _ in range(3)]
            ping_id = gw.invoke("ping", {})
            await trio.testing.wait_all_tasks_blocked()
            assert reads == [0]  # one read at a time
            assert invoked == 0  # two reads admitted: the read loop waits for a slot
            release.set()
            frames = [await gw.recv() for _ in range(4)]
            by_id = {f["id"]: f["result"] for f in frames}
            assert sorted(by_id[i]["value"] for i in ids) == [1, 2, 3]  # one at a time
            assert by_id[ping_id]["output"] == "pong"


async def test_a_peer_that_never_reads_is_closed_with_1008(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(SEND_STALL_TIMEOUT + 30), traced():
        async with serving(big_app()) as host:
            events = host.events()
            async with gateway(host) as gw:
                await events.receive()  # the welcome
                tracemalloc.reset_peak()
                for _ in range(400):
                    gw.request("resources/read", {"name": "big"})
                started = trio.current_time()
                gone = await events.receive()
                assert isinstance(gone, Disconnected)
                assert gone.code == 1008
                assert "stopped reading" in gone.reason
                assert trio.current_time() - started >= SEND_STALL_TIMEOUT
                assert peak() <= ANSWER_BOUND + SLACK
                await wait_until(lambda: not host.connected)


async def test_subscription_updates_are_coalesced_while_the_peer_does_not_read() -> None:
    app = TesseronApp("t", "T")
    emits: list[Any] = []

    def subscribe(emit: Any) -> None:
        emits.append(emit)

    app.resource("feed", lambda: "", subscribable=True, subscribe=subscribe)
    with trio.fail_after(20), traced():
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.request("resources/subscribe", {"name": "feed", "subscriptionId": "s"})
            assert (await gw.response(rid))["result"] is None
            (emit,) = emits
            tracemalloc.reset_peak()
            for i in range(300):
                emit(f"{i:03d}" + "x" * BIG)  # 30 MB of updates, none read yet
            await trio.testing.wait_all_tasks_blocked()
            assert peak() <= ANSWER_BOUND + SLACK
            # Now read: every update that went out is in order, and the newest is last.
            seen: list[int] = []
            while not seen or seen[-1] != 299:
                frame = await gw.expect_method("resources/updated")
                seen.append(int(frame["params"]["value"][:3]))
            assert seen == sorted(seen)
            assert len(seen) < 300


async def test_progress_from_a_handler_waits_for_room() -> None:
    app = TesseronApp("t", "T")
    sent = 0

    @app.action("chatty")
    async def chatty(input: Any, ctx: ActionContext) -> Any:
        nonlocal sent
        for _ in range(300):
            await ctx.progress(message="y" * BIG)
            sent += 1
        return "done"

    with trio.fail_after(20), traced():
        async with serving(app) as host, gateway(host) as gw:
            tracemalloc.reset_peak()
            rid = gw.invoke("chatty", {})
            await trio.testing.wait_all_tasks_blocked()
            assert 0 < sent < 300  # the handler waits in progress() instead of queueing
            assert peak() <= ANSWER_BOUND + SLACK
            others: list[Any] = []
            assert (await gw.response(rid, others=others))["result"]["output"] == "done"
            assert len(others) == 300  # nothing dropped


async def test_in_flight_requests_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connection, "MAX_IN_FLIGHT", 4, raising=False)
    app = TesseronApp("t", "T")
    running = 0
    release = trio.Event()

    @app.action("wait")
    async def wait(input: Any, ctx: ActionContext) -> Any:
        nonlocal running
        running += 1
        await release.wait()
        return "ok"

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            ids = [gw.invoke("wait", {}) for _ in range(6)]
            await trio.testing.wait_all_tasks_blocked()
            assert running == 4  # the other two wait unread until a slot frees
            release.set()
            answers = [await gw.recv() for _ in ids]
            assert sorted(a["id"] for a in answers) == sorted(ids)
            assert all(a["result"]["output"] == "ok" for a in answers)
            assert running == 6


async def test_subscriptions_per_connection_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_subscriptions, "MAX_SUBSCRIPTIONS", 2)
    app = TesseronApp("t", "T")
    app.resource("feed", lambda: 0, subscribable=True)
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            for sub in ("a", "b", "a"):  # re-using an id replaces, it does not add
                rid = gw.request("resources/subscribe", {"name": "feed", "subscriptionId": sub})
                assert (await gw.response(rid))["result"] is None
            rid = gw.request("resources/subscribe", {"name": "feed", "subscriptionId": "c"})
            error = (await gw.response(rid))["error"]
            assert error["code"] == -32600
            assert "Too many subscriptions" in error["message"]


async def test_clones_racing_for_room_never_send_a_lower_percent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ceiling has no lock: room is awaited first, then compare-build-queue runs
    without a checkpoint. Clones woken together must still keep the percent rising."""
    monkeypatch.setattr(_ws, "SEND_HIGH_WATER", 4096)  # wait for room often
    app = TesseronApp("t", "T")
    clones, updates = 6, 300

    @app.action("race")
    async def race(input: Any, ctx: ActionContext) -> Any:
        async def report(k: int, c: ActionContext) -> None:
            for i in range(updates):
                # Each clone climbs at its own pace, so values cross between clones.
                await c.progress((i * (k + 1)) % 101, message="z" * 1000)

        async with trio.open_nursery() as nursery:
            for k in range(clones):
                nursery.start_soon(report, k, ctx.clone())
        return "done"

    with trio.fail_after(30):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("race", {})
            others: list[Any] = []
            assert (await gw.response(rid, others=others))["result"]["output"] == "done"
    percents = [f["params"]["percent"] for f in others]
    assert len(percents) == clones * updates
    assert percents == sorted(percents)
