"""Interop: our A2A (SPEC §7A/§7B) against toolnexus 0.21 (PyPI, asyncio), both ways,
on the SPEC's wire (0.3 card, ``SendMessage``/``GetTask``).

Run with ``nox -s interop`` (which makes the peer's own virtualenv: toolnexus 0.21 pins
``mcp<2``, ours needs ``mcp>=2.3``), or by hand with ``TOOLNEXUS_PEER_PYTHON`` set to a
Python that has ``toolnexus==0.21.0``. Prints one line per check and ``N passed, M
failed``; the exit status is non-zero on any failure.

1. Our outbound tool calls the peer's served agent (completed, metadata); a cancelled
   call sends ``CancelTask``, which the peer does not implement (``-32601``): its
   remote task runs on, as the peer's own outbound would leave it.
2. The peer's outbound tool calls our served agent (completed, metadata).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    CancelToken,
    InProcessOptions,
    InProcessResponse,
    SkillDef,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, agent

PEER = Path(__file__).resolve().parent / "a2a_peer.py"
CARD = "/.well-known/agent-card.json"
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    RESULTS.append((name, ok, str(detail)))
    print(f"{'PASS' if ok else 'FAIL'} {name}{f': {detail}' if detail != '' else ''}", flush=True)


def peer_python() -> str:
    found = os.environ.get("TOOLNEXUS_PEER_PYTHON")
    if not found:
        sys.exit(
            "set TOOLNEXUS_PEER_PYTHON to a Python with toolnexus==0.21.0 (nox -s interop does)"
        )
    return found


@contextlib.asynccontextmanager
async def peer_server() -> AsyncIterator[str]:
    """The peer's served agent (own process group, stdin /dev/null); its base URL."""
    proc = await trio.lowlevel.open_process(
        [peer_python(), str(PEER), "serve"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        data = b""
        with trio.fail_after(30):
            while b"\n" not in data:
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    raise RuntimeError("the peer server exited before printing its URL")
                data += chunk
        yield data.split(b"\n")[0].decode().split()[1]
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def generate(request: Any) -> InProcessResponse:
    text = str(request.messages[-1]["content"])
    if text.startswith("slow"):
        await trio.sleep(30)
    return InProcessResponse(content=f"echo: {text}")


@contextlib.asynccontextmanager
async def our_server() -> AsyncIterator[Any]:
    client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
    skills = [SkillDef(name="echo", content="Echo.", description="Echoes a task")]
    toolkit = await create_toolkit(ToolkitOptions(skills=skills, builtins=False))
    serving = toolkit.serve(client=client, a2a=A2AServeConfig(name="our agent"))
    async with toolkit, serving as served:
        yield served


async def ours_to_peer() -> None:
    async with peer_server() as base:
        toolkit = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(base + CARD, poll_every=50)])
        )
        async with toolkit:
            names = [t.name for t in toolkit.tools()]
            check("ours -> peer: one tool per skill", names == ["peer_agent_echo"], names)
            tool = toolkit.get("peer_agent_echo")
            assert tool is not None
            result = await tool.call({"task": "hello peer"})
            meta = result.metadata or {}
            check(
                "ours -> peer: completed",
                not result.is_error and result.output == "echo: hello peer",
                result.output,
            )
            check(
                "ours -> peer: metadata",
                meta.get("agent") == "peer agent" and meta.get("state") == "completed",
                meta,
            )
            token = CancelToken()
            with trio.move_on_after(10):
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        out.append(await tool.call({"task": "slow one"}, ToolContext(cancel=token)))

                    out: list[Any] = []
                    nursery.start_soon(call)
                    await trio.sleep(0.3)
                    token.cancel("stop")
            check(
                "ours -> peer: a cancelled call returns", out and out[0].output == "cancelled", out
            )


async def peer_to_ours() -> None:
    async with our_server() as served:
        done = await trio.run_process(
            [peer_python(), str(PEER), "call", served.base_url + CARD, "hello ours", "50"],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            check=False,
        )
    try:
        reply = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        check("peer -> ours: a reply", False, done.stdout[-500:])
        return
    check("peer -> ours: its tool name", reply["name"] == "our_agent_echo", reply["name"])
    check(
        "peer -> ours: completed",
        reply["isError"] is False and reply["output"] == "echo: hello ours",
        reply["output"],
    )
    meta = reply.get("metadata") or {}
    check(
        "peer -> ours: metadata",
        meta.get("agent") == "our agent" and meta.get("state") == "completed",
        meta,
    )


async def main() -> int:
    await ours_to_peer()
    await peer_to_ours()
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    print(f"{len(RESULTS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
