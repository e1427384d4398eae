"""A durable agent tree killed while its sub-agent's tool runs, and another process
that recovers the whole tree.

This script is both processes: it starts itself as the worker (process A), whose
``lead`` agent delegates to a ``payer`` sub-agent with its ``task`` tool; the payer
charges invoice 1, then invoice 2, and process A is killed with SIGKILL inside the
second charge. Process B waits for the tree's lease to run out and recovers it with
``AgentRuntime.recover``: the payer is recovered from its own checkpoint (invoice 1 is
not charged again; the charge of invoice 2 was in flight and ``charge`` is not
idempotent, so the payer's model is told it may or may not have run), then the lead
goes on with the payer's answer.
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
    InProcessResponse,
    InProcessToolCall,
    SqliteConversationStore,
    tool,
)
from toolnexus_trio.agents import AgentDef, open_agent_runtime

LEASE_MS = 300  # short, for the demo; the default is 30 s


async def model(request: Any) -> InProcessResponse:
    """A scripted model for both agents (the payer's prompt is "pay both invoices")."""
    results = [m["content"] for m in request.messages if m["role"] == "tool"]
    first = next(m["content"] for m in request.messages if m["role"] == "user")
    if first == "pay both invoices":  # the payer: invoice 1, invoice 2, then a report
        if len(results) < 2:
            n = len(results) + 1
            return InProcessResponse(tool_calls=(InProcessToolCall(f"c{n}", "charge", {"n": n}),))
        return InProcessResponse(content="; ".join(results))
    if not results:  # the lead delegates
        args = {"agent": "payer", "prompt": "pay both invoices"}
        return InProcessResponse(tool_calls=(InProcessToolCall("t1", "task", args),))
    return InProcessResponse(content=f"the payer reports: {results[0]}")


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


def team(ledger: Path, hang_on: int | None) -> dict[str, AgentDef]:
    return {
        "lead": AgentDef("lead", "runs the job", "", "scripted", task_targets=["payer"]),
        "payer": AgentDef(
            "payer", "pays invoices", "", "scripted", tools=[charge_tool(ledger, hang_on)]
        ),
    }


def runtime(db: str, ledger: Path, hang_on: int | None) -> Any:
    return open_agent_runtime(
        team(ledger, hang_on),
        generate=model,
        store=SqliteConversationStore(db),
        durable=True,  # every agent's turn is checkpointed
        lease_ms=LEASE_MS,
    )


async def worker(db: str, ledger: Path) -> None:  # process A
    async with runtime(db, ledger, hang_on=2) as rt:
        await rt.run("lead", "settle the account", id="job-8")


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
        print(f"process A was killed inside the payer's charge(2); the ledger says:\n  {text}")

        async with runtime(db, Path(ledger), hang_on=None) as rt:
            with trio.fail_after(30):
                while True:  # until A's leases have run out (the store's clock decides)
                    if "job-8" in await rt.orphaned_trees():
                        break
                    await trio.sleep(LEASE_MS / 4000)
            result = await rt.recover("job-8")
        print(f"process B recovered the tree job-8: {result.status}")
        print(f"  the lead says: {result.text}")
        text = (await ledger.read_text()).strip().replace("\n", ", ")
        print(f"  the ledger still says: {text}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        trio.run(worker, sys.argv[2], Path(sys.argv[3]))
    else:
        trio.run(main)
