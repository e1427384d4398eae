"""A durable run killed in the middle of a tool call, and another process that recovers it.

This script is both processes: it starts itself as the worker (process A), kills the
worker with SIGKILL while its second ``charge`` call runs, then (process B) waits for
A's lease to run out and recovers the run from its last checkpoint. The first charge is
not run again; the second was in flight, and ``charge`` is not idempotent, so the model
is told it may or may not have run (the default in-doubt policy).
"""

import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    SqliteConversationStore,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    tool,
)

LEASE_MS = 300  # short, for the demo; the default is 30 s


async def model(request: Any) -> InProcessResponse:
    """A scripted model: charge invoice 1, then invoice 2, then report what it saw."""
    results = [m["content"] for m in request.messages if m["role"] == "tool"]
    if len(results) < 2:
        n = len(results) + 1
        return InProcessResponse(tool_calls=(InProcessToolCall(f"c{n}", "charge", {"n": n}),))
    return InProcessResponse(content="; ".join(results))


def client(store: SqliteConversationStore) -> Any:
    options = InProcessOptions(
        model="scripted", generate=model, store=store, durable=True, lease_ms=LEASE_MS
    )
    return create_in_process_client(options)


def charge_tool(ledger: Path, hang_on: int | None) -> Any:
    @tool
    def charge(n: int) -> str:
        """Charge invoice n (not idempotent: running it twice charges twice)."""
        with ledger.open("a") as f:  # a plain function runs in a worker thread
            f.write(f"charged {n}\n")
        if n == hang_on:
            print(f"charging {n}", flush=True)  # tells process B where A is
            threading.Event().wait()  # process A is killed here
        return f"invoice {n} charged"

    return charge


async def worker(db: str, ledger: Path) -> None:  # process A
    store = SqliteConversationStore(db)
    tools = ToolkitOptions(extra_tools=[charge_tool(ledger, hang_on=2)], builtins=False)
    async with create_toolkit(tools) as toolkit:
        await client(store).ask("charge both invoices", toolkit, id="job-7")


async def main() -> None:  # process B
    with tempfile.TemporaryDirectory() as tmp:
        db, ledger = os.path.join(tmp, "runs.db"), trio.Path(tmp, "ledger.txt")
        process = await trio.lowlevel.open_process(
            [sys.executable, __file__, "worker", db, str(ledger)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,  # its own process group
        )
        stdout = process.stdout  # a pipe: stdout=PIPE above
        if stdout is None:
            raise RuntimeError("no pipe to the worker")
        try:
            with trio.fail_after(30):
                said = b""
                while b"charging 2" not in said:
                    said += await stdout.receive_some()
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the crash
            await process.wait()
            await stdout.aclose()
        text = (await ledger.read_text()).strip().replace("\n", ", ")
        print(f"process A was killed inside charge(2); the ledger says:\n  {text}")

        agent = client(SqliteConversationStore(db))
        with trio.fail_after(30):
            while True:  # until A's lease has run out (the store's clock decides)
                if "job-7" in await agent.orphaned_runs():
                    break
                await trio.sleep(LEASE_MS / 4000)
        tools = ToolkitOptions(extra_tools=[charge_tool(Path(ledger), None)], builtins=False)
        async with create_toolkit(tools) as toolkit:
            result = await agent.recover("job-7", toolkit)
        print(f"process B recovered job-7: {result.status}")
        print(f"  the model saw: {result.text}")
        text = (await ledger.read_text()).strip().replace("\n", ", ")
        print(f"  the ledger still says: {text}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        trio.run(worker, sys.argv[2], Path(sys.argv[3]))
    else:
        trio.run(main)
