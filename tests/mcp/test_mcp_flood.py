"""A stdio server that floods us with its own requests and never reads its answers
(issue 30): what we hold for it stays within a count, a cancelled call returns at once
and the toolkit closes without waiting on writes to a pipe nobody reads. The server is
a real process (``tests/mcp_servers/flood.py``) on real pipes."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mcp")

import trio
import trio.lowlevel
import trio.testing
from helpers import TaskCensus
from mcp_helpers import SERVERS, group_members

from toolnexus_trio import SamplingRequest, SamplingResult, ToolContext
from toolnexus_trio.mcp import open_mcp
from toolnexus_trio.mcp._stdio import MAX_SERVER_REQUESTS, MAX_WRITE_BACKLOG, StdioTransport

FLOOD = SERVERS / "flood.py"
COUNT = 2000
"""Requests the server sends: the issue saw a 5 s late cancel with this many."""


async def answer(request: SamplingRequest) -> SamplingResult:
    await trio.lowlevel.checkpoint()
    return SamplingResult("ok")


def at_rest(stdio: StdioTransport) -> bool:
    """We stopped reading at the cap, or (as before the fix) senders pile up waiting."""
    owed = getattr(stdio, "owed", None)  # (getattr: the same test ran on the old code)
    return (owed is not None and owed.count >= MAX_SERVER_REQUESTS) or len(
        stdio.write.room
    ) >= MAX_SERVER_REQUESTS


@pytest.mark.parametrize("kind", ["ping", "sampling"])
async def test_a_flooding_server_that_never_reads_stays_bounded_and_cancel_is_prompt(
    kind: str,
) -> None:
    config = {"flood": {"command": [sys.executable, str(FLOOD), kind, str(COUNT)]}}
    with TaskCensus() as census, trio.fail_after(60):
        async with open_mcp(config, sample=answer) as source:
            (conn,) = source._conns  # type: ignore[attr-defined]
            stdio: StdioTransport = conn._stdio
            (tool,) = source.tools()
            call_scope = trio.CancelScope()
            returned = trio.Event()

            async def call() -> None:
                with call_scope:
                    await tool.call({}, ToolContext())
                returned.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                while not at_rest(stdio):  # the flood comes from another process
                    await trio.lowlevel.checkpoint()
                await trio.testing.wait_all_tasks_blocked()
                # Nothing waits to write: the answers are queued, so neither the
                # cancel nor the close below has a write to wait on.
                assert len(stdio.write.room) == 0
                # What we hold is counted, not the flood: at the cap we read no more.
                assert len(census.new_tasks()) <= MAX_SERVER_REQUESTS + 32
                assert len(stdio.write.queue) <= MAX_SERVER_REQUESTS + MAX_WRITE_BACKLOG
                assert stdio.owed.count == MAX_SERVER_REQUESTS
                # The cancel returns without waiting on the pipe: by the time every
                # task is blocked again (the server still reads nothing), it is back.
                call_scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert returned.is_set()
                assert len(stdio.write.room) == 0
            pid = stdio.process.pid
        census.assert_no_new_tasks()
    assert group_members(pid) == []
