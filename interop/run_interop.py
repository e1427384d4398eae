"""Interop: our Trio gateway against the PyPI ``tesseron`` 0.2.0 host (asyncio).

Run with ``nox -s interop`` (or ``python interop/run_interop.py`` in a venv that has
``tesseron==0.2.0``). Starts ``peer_host.py`` in its own process, connects a
:class:`~toolnexus_trio.tesseron.Gateway`, claims the session with its code, then
invokes, cancels, samples, confirms and elicits. Prints one line per check and a
final ``N passed, M failed`` line; the exit status is non-zero on any failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    Answer,
    CancelToken,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.tesseron import ActionError, Gateway, GatewayOptions

PEER = Path(__file__).resolve().parent / "peer_host.py"
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    RESULTS.append((name, ok, str(detail)))
    print(f"{'PASS' if ok else 'FAIL'} {name}{f': {detail}' if detail != '' else ''}", flush=True)


async def read_url(stdout: trio.abc.ReceiveStream) -> str:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stdout.receive_some(4096)
        if not chunk:
            raise RuntimeError("peer host exited before printing its URL")
        line += chunk
    return line.decode().strip().removeprefix("url=")


async def scenarios(url: str) -> None:
    answers = {"Delete the file?": True, "New name?": True}
    requests: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        requests.append(request)
        if not answers.get(request.prompt, False):
            return Answer(id=request.id, ok=False, reason="declined")
        data = {"name": "renamed.txt"} if request.prompt == "New name?" else None
        return Answer(id=request.id, ok=True, data=data)

    async with Gateway(GatewayOptions(wait_for=wait_for)) as gateway:
        session = await gateway.connect(url)
        check(
            "handshake", session.connected, f"app={session.app.id!r} actions={len(session.actions)}"
        )
        code = session.claim_code
        print(f"claim code: {code}", flush=True)
        assert code is not None
        check("claim", gateway.claim(code) is session and session.claimed)
        names = sorted(t.name for t in gateway.tools())
        check("tools", "peer__add" in names and "peer__rename" in names, names)

        output = await gateway.invoke("peer", "add", {"a": 2, "b": 3})
        check("invoke add", output == 5, output)
        try:
            # 0.2.0 does not validate raw JSON against input_schema: the handler's
            # KeyError comes back as its -32603 (cause hidden), with the code kept.
            await gateway.invoke("peer", "add", {"a": 2})
            check("host error keeps its code", False, "no error")
        except ActionError as exc:
            check("host error keeps its code", int(exc.code) == -32603, exc)

        # Cancel: a turn's token cancels the call; the handler must see it.
        token = CancelToken()
        async with trio.open_nursery() as nursery:

            async def fire() -> None:
                await trio.sleep(0.3)
                token.cancel("interop cancel")

            nursery.start_soon(fire)
            try:
                await gateway.invoke("peer", "slow", {}, cancel=token)
                check("cancel slow", False, "not cancelled")
            except ActionError as exc:
                check("cancel slow", int(exc.code) == -32001, exc)
        seen = None
        with trio.move_on_after(5):
            while seen is None:
                seen = (await gateway.invoke("peer", "was_cancelled", {}))["slow_cancelled"]
                await trio.sleep(0.05)
        check("handler saw the cancel", seen is True, seen)

        # Sampling through a client loop: the loop's own model answers.
        sampled: list[GenerateRequest] = []

        async def generate(req: GenerateRequest) -> InProcessResponse:
            if req.tools is None:
                sampled.append(req)
                return InProcessResponse(content="42")
            if req.messages[-1]["role"] == "user":
                call = InProcessToolCall(id="c1", name="peer__ask_model", arguments={})
                return InProcessResponse(tool_calls=[call])
            return InProcessResponse(content=req.messages[-1]["content"])

        toolkit = await create_toolkit(ToolkitOptions(tesseron=gateway, builtins=False))
        client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
        result = await client.run("ask the peer", toolkit)
        check("sample via loop model", json.loads(result.text) == {"answer": "42"}, result.text)
        check(
            "sample prompt and maxTokens",
            bool(sampled)
            and sampled[0].messages[0]["content"] == "What is 6 times 7?"
            and sampled[0].max_tokens == 5,
        )

        output = await gateway.invoke("peer", "confirm_delete", {})
        check("confirm accepted", output == {"deleted": True}, output)
        answers["Delete the file?"] = False
        output = await gateway.invoke("peer", "confirm_delete", {})
        check("confirm declined", output == {"deleted": False}, output)
        output = await gateway.invoke("peer", "rename", {})
        check("elicit accepted", output == {"value": {"name": "renamed.txt"}}, output)
        answers["New name?"] = False
        output = await gateway.invoke("peer", "rename", {})
        check("elicit declined", output == {"value": None}, output)
        kinds = {(r.kind, r.prompt) for r in requests}
        check("elicitation became wait_for(kind=input)", ("input", "New name?") in kinds, kinds)
        await toolkit.aclose()
        check("toolkit close disconnects", not session.connected)


async def main() -> int:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(PEER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        url = await read_url(process.stdout)
        print(f"peer host (tesseron 0.2.0) at {url}", flush=True)
        with trio.fail_after(60):
            await scenarios(url)
    except Exception as exc:
        check("interop run", False, f"{type(exc).__name__}: {exc}")
    finally:
        await process.stdin.aclose()
        with trio.move_on_after(5, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
    passed = sum(ok for _, ok, _ in RESULTS)
    failed = len(RESULTS) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
