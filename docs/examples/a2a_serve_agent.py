"""A §7D agent tree served over A2A, in two processes: a remote agent delegates to it.

1. This script, run with ``--serve``, is the *served* side: a ``lead`` agent whose team
   has a ``worker`` with the real ``bash`` builtin, served with ``lead.serve(...)``.
   Its models are scripted. It prints its card URL and serves until it is stopped.
2. The main process names it with ``agent(card_url)``: the card has one skill, the lead
   itself, so the caller gets one tool (``lead_lead``). A task goes to the lead, which
   hands it to its worker with ``task``; the answer comes back as the task's artifact.
3. Then a slow task (the worker runs ``sleep 60`` in bash) is cancelled half a second
   in: ``CancelTask`` cancels the served run's scope, which cancels the lead's turn,
   the worker's turn and its shell (its whole process group). The served side reports
   the task ``canceled``.

Serving needs hypercorn: ``pip install -e '.[a2a]'``. The test suite runs this.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

import trio

from toolnexus_trio import CancelToken, ToolContext, ToolkitOptions, create_toolkit
from toolnexus_trio.a2a import TaskInfo, agent
from toolnexus_trio.agents import agent as make_agent
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall


async def team_model(request: GenerateRequest) -> InProcessResponse:
    """Both agents' model: the lead delegates, the worker runs bash or answers."""
    tools = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
    prompt = [str(m["content"]) for m in request.messages if m.get("role") == "user"][-1]
    if request.model == "lead":
        if not tools:
            call = InProcessToolCall("t1", "task", {"agent": "worker", "prompt": prompt})
            return InProcessResponse(tool_calls=[call])
        return InProcessResponse(content=f"Done. The worker reports: {tools[-1]}")
    if prompt.startswith("slow") and not tools:
        call = InProcessToolCall("b1", "bash", {"command": "sleep 60"})
        return InProcessResponse(tool_calls=[call])
    return InProcessResponse(content=f"checked {prompt!r}: all green")


async def serve() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        bash = [t for t in builtin_tools(BuiltinsConfig(base_dir=workdir)) if t.name == "bash"]
        worker = make_agent("worker", does="Runs shell commands", uses=bash, model="worker")
        does = "Plans ops jobs and has them done"
        lead = make_agent("lead", does=does, team=[worker], model="lead")

        def on_task(info: TaskInfo) -> None:
            print(f"served: task {info.task!r} ended {info.state}", flush=True)

        async with lead.serve(generate=team_model, on_task=on_task) as served:
            print(served.card_url, flush=True)
            await trio.sleep_forever()


async def main() -> None:
    remote = await trio.lowlevel.open_process(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,  # its own process group: stopped as a whole below
    )
    try:
        lines = LineReader(remote.stdout)
        card = await lines.next()
        options = ToolkitOptions(builtins=False, agents=[agent(card, poll_every=50)])
        async with await create_toolkit(options) as toolkit:
            print("tools:", [t.name for t in toolkit.tools()])
            result = await toolkit.execute("lead_lead", {"task": "the nightly backups"})
            print("lead_lead('the nightly backups'):", result.output)

            token = CancelToken()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_later, token)
                slow = await toolkit.execute(
                    "lead_lead", {"task": "slow rebuild"}, ToolContext(cancel=token)
                )
            print("slow task, cancelled at 0.5 s:", slow.output)
            # The served side's own reports: the first task, then the cancelled one.
            print(await lines.next())
            print(await lines.next())
    finally:
        with trio.move_on_after(5, shield=True):
            os.killpg(remote.pid, signal.SIGTERM)
            await remote.wait()


async def cancel_later(token: CancelToken) -> None:
    await trio.sleep(0.5)
    token.cancel("the user changed their mind")


class LineReader:
    """Lines of a child's stdout."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> str:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(4096)
            if not chunk:
                raise RuntimeError("the served agent exited")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


if __name__ == "__main__":
    trio.run(serve if sys.argv[1:] == ["--serve"] else main)
