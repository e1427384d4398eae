"""An agent reaching a Tesseron app through ``python -m toolnexus_trio gateway --mcp``.

1. Our todo app (``tesseron_todo_host.py``) runs and publishes its instance manifest in
   a private directory (here: a temporary ``HOME``, so ``~/.tesseron/instances`` is ours).
2. The mcp SDK's stdio client starts ``gateway --mcp --instances-dir <that directory>``,
   as Claude Code or an IDE would from its MCP configuration.
3. The gateway prints the app's claim code on stderr; the agent claims it with
   ``tesseron__claim_session``, sees ``todo__add`` appear and calls it.

Needs the extra: ``pip install -e '.[mcp]'``. The test suite runs this script.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

HERE = Path(__file__).resolve().parent
T = TypeVar("T")
CODE = re.compile(r"claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")


async def wait_until(check: Callable[[], T | None], seconds: float = 20) -> T:
    """What ``check`` returns once it is truthy (another process gets there)."""
    with trio.fail_after(seconds):
        while not (found := check()):  # noqa: ASYNC110 - another process
            await trio.sleep(0.05)
        return found


async def main() -> None:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    with tempfile.TemporaryDirectory() as home:
        instances = Path(home, ".tesseron", "instances")
        # The todo app serves until its stdin closes; its own process group.
        app = await trio.lowlevel.open_process(
            [sys.executable, str(HERE / "tesseron_todo_host.py"), "--publish"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "HOME": home},
        )
        try:
            await wait_until(lambda: list(instances.glob("*.json")))
            params = StdioServerParameters(
                command=sys.executable,
                args=[
                    "-m",
                    "toolnexus_trio",
                    "gateway",
                    "--mcp",
                    "--instances-dir",
                    str(instances),
                ],
                env=dict(os.environ),
            )
            err = Path(home, "gateway.err")  # claim codes and logs: stderr, never stdout
            with err.open("w") as errlog:  # noqa: ASYNC230 - a local temp file, once
                async with Client(stdio_client(params, errlog=errlog), mode="legacy") as agent:
                    found = await wait_until(lambda: CODE.search(err.read_text()))
                    print("the gateway says on stderr:", found.string.strip().splitlines()[-1])
                    # The user reads the code to the agent, which claims the session.
                    print(f"the agent calls tesseron__claim_session with {found.group(1)}")
                    claimed = await agent.call_tool(
                        "tesseron__claim_session", {"code": found.group(1)}
                    )
                    print("it got:", claimed.content[0].text)  # type: ignore[union-attr]
                    tools = [t.name for t in (await agent.list_tools()).tools]
                    print("the agent's tools now:", ", ".join(tools))
                    result = await agent.call_tool("todo__add", {"items": ["write the docs"]})
                    text = result.content[0].text  # type: ignore[union-attr]
                    state = "error" if result.is_error else "ok"
                    print(f"todo__add [{state}]: {text}")
        finally:
            with trio.move_on_after(5, shield=True):
                if app.stdin is not None:
                    await app.stdin.aclose()  # the app's cue to stop
                with trio.move_on_after(2):
                    await app.wait()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(app.pid, signal.SIGKILL)
                await app.wait()


if __name__ == "__main__":
    trio.run(main)
