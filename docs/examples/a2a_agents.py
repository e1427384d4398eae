"""Agents over A2A, in two processes: one agent delegates to another.

1. This script, run with ``--serve``, is the *remote* agent: a toolkit with one skill
   (``translate``), served as an A2A agent on loopback; its model is scripted. It
   prints its card URL and serves until it is stopped.
2. The main process starts it, names it with ``agent(card_url)``, and gets one tool
   per skill (``translator_translate``). Its own model calls that tool; the call sends
   an A2A task and polls it to the end.
3. Then a slow task is cancelled half a second in: the cancel sends ``CancelTask``, and
   the remote task ends ``canceled`` (the remote agent reports it).

Serving needs hypercorn: ``pip install -e '.[a2a]'``. The test suite runs this.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import trio

from toolnexus_trio import (
    CancelToken,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    SkillDef,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, TaskInfo, agent


async def remote_model(request: Any) -> InProcessResponse:
    """The remote agent's model: "translates" to French, or works for a minute."""
    task = str(request.messages[-1]["content"])
    if task.startswith("slow"):
        await trio.sleep(60)
    return InProcessResponse(content={"hello": "bonjour"}.get(task, f"[fr] {task}"))


async def serve() -> None:
    skills = [SkillDef(name="translate", content="Translate.", description="English to French")]
    toolkit = await create_toolkit(ToolkitOptions(skills=skills, builtins=False))
    client = create_in_process_client(InProcessOptions(model="remote", generate=remote_model))

    def on_task(info: TaskInfo) -> None:
        print(f"remote: task {info.task!r} ended {info.state}", flush=True)

    config = A2AServeConfig(name="translator", description="Translates text")
    async with toolkit, toolkit.serve(client=client, a2a=config, on_task=on_task) as served:
        print(served.base_url + "/.well-known/agent-card.json", flush=True)
        await trio.sleep_forever()


async def local_model(request: Any) -> InProcessResponse:
    """The local agent's model: delegate, then report what came back."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"The translator says: {last['content']}")
    return InProcessResponse(
        tool_calls=[InProcessToolCall(name="translator_translate", arguments={"task": "hello"})]
    )


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
            client = create_in_process_client(InProcessOptions(model="local", generate=local_model))
            result = await client.run("Say hello in French", toolkit)
            for call in result.tool_calls:
                print(f"the local model called {call.name}({call.args}): {call.output!r}")
            print("local model:", result.text)

            # A direct call, cancelled half a second in: the remote task is cancelled too.
            token = CancelToken()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_later, token)
                slow = await toolkit.execute(
                    "translator_translate", {"task": "slow work"}, ToolContext(cancel=token)
                )
            print("slow task, cancelled at 0.5 s:", slow.output)
            # The remote agent's own reports: the first task, then the cancelled one.
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
                raise RuntimeError("the remote agent exited")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


if __name__ == "__main__":
    trio.run(serve if sys.argv[1:] == ["--serve"] else main)
