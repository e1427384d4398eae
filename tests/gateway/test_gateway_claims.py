"""Wrong claim codes are slowed down; a right one still claims (issue 17, item 14).

A real host on loopback and a real gateway; time is virtual (the socket-safe autojump
clock), so the delays are exact and cost no real time."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from toolnexus_trio.tesseron import ActionError, Gateway, TesseronApp

GATEWAY_LOG = "toolnexus_trio.tesseron.gateway"


def wrong(code: str) -> str:
    """A well-formed code that is not *code*."""
    return ("B" if code[0] == "A" else "A") + code[1:]


async def miss(gw: Gateway, code: str) -> float:
    """Try a wrong code; return how long (virtual seconds) the answer took."""
    start = trio.current_time()
    with pytest.raises(ActionError) as refused:
        await gw.try_claim(wrong(code))
    assert refused.value.code == -32009
    return trio.current_time() - start


async def test_repeated_wrong_codes_wait_longer_and_a_right_code_claims_at_once(
    socket_autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, GATEWAY_LOG)
    app = TesseronApp("found", "Found")
    async with app.listen(manifest_dir=None) as host, Gateway() as gw:
        assert host.url is not None
        session = await gw.connect(host.url)
        code = session.claim_code
        assert code is not None
        waits = [await miss(gw, code) for _ in range(10)]
        # Three free misses; then 1 s before the next check, doubling, at most 60 s.
        assert waits == pytest.approx([0, 0, 0, 1, 2, 4, 8, 16, 32, 60])
        assert len([r for r in caplog.records if "wrong claim code" in r.getMessage()]) == 10
        assert code not in caplog.text and wrong(code) not in caplog.text
        # Once the running delay is over, the right code claims at once, and resets.
        await trio.sleep(60)
        start = trio.current_time()
        claimed = await gw.try_claim(code.lower())
        assert trio.current_time() == start
        assert claimed is session and session.claimed


async def test_guesses_sent_side_by_side_wait_their_turn(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    app = TesseronApp("found", "Found")
    async with app.listen(manifest_dir=None) as host, Gateway() as gw:
        assert host.url is not None
        session = await gw.connect(host.url)
        code = session.claim_code
        assert code is not None
        start = trio.current_time()
        done: list[float] = []

        async def guess() -> None:
            with pytest.raises(ActionError):
                await gw.try_claim(wrong(code))
            done.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(guess)
        # Not six checks at once: each waits for the delay the one before it earned.
        assert sorted(done) == pytest.approx([0, 0, 0, 1, 3, 7])
        # A guess cancelled while it waits is never checked (it learns nothing) and
        # costs no miss; the right code then claims once the delay is over.
        with trio.move_on_after(1):
            await gw.try_claim(wrong(code))
        assert gw._claim_throttle.misses == 6
        await trio.sleep(60)
        start = trio.current_time()
        assert (await gw.try_claim(code)) is session
        assert trio.current_time() == start


async def test_the_count_is_forgotten_after_a_quiet_while(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with Gateway() as gw:  # no host: every code is wrong
        code = "ABCD-EF"
        assert [await miss(gw, code) for _ in range(4)] == pytest.approx([0, 0, 0, 1])
        await trio.sleep(15 * 60 + 1)
        assert [await miss(gw, code) for _ in range(4)] == pytest.approx([0, 0, 0, 1])
