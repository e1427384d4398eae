"""fastmcp's client (asyncio) as the agent of ``gateway --mcp``, for the gateway tests.

``python fastmcp_agent.py INSTANCES_DIR MODE APP GATEWAY_LOG`` starts the gateway over
stdio with fastmcp's ``StdioTransport`` (its stderr to GATEWAY_LOG), waits for APP's
claim code there, claims it, makes the calls below and prints one JSON object (what it
saw) on stdout. MODE is fastmcp's ``mode``: ``legacy`` (the initialize handshake) or
``2026-07-28``. fastmcp runs only on asyncio, hence a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StdioTransport

CODE = re.compile(r"\(([a-z]+)\) is waiting: claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")
ROOT = Path(__file__).resolve().parent.parent.parent


def codes_of(app: str, log: str) -> list[str]:
    """The claim codes the gateway printed for *app* so far."""
    return [c for a, c in CODE.findall(Path(log).read_text()) if a == app]


def outcome(result: Any) -> dict[str, Any]:
    text = result.content[0].text if result.content else ""
    return {"error": result.is_error, "text": text, "structured": result.structured_content}


async def main(directory: str, mode: str, app: str, log: str) -> None:
    seen: dict[str, Any] = {"elicited": [], "sampled": []}

    async def sampling(messages: Any, params: Any, ctx: Any) -> str:
        seen["sampled"].append(messages[0].content.text)
        return "42"

    async def elicit(message: str, response_type: Any, params: Any, ctx: Any) -> ElicitResult[Any]:
        seen["elicited"].append(message)
        fields = params.requested_schema.get("properties") or {}
        return ElicitResult(action="accept", content={"name": "new"} if fields else {})

    with open(log, "w") as errlog:  # noqa: ASYNC230 - before any task runs
        transport = StdioTransport(
            command=sys.executable,
            args=["-m", "toolnexus_trio", "gateway", "--mcp", "--instances-dir", directory],
            env={"PYTHONPATH": str(ROOT)},
            log_file=errlog,
        )
        async with Client(
            transport,
            mode=mode,
            client_info=types.Implementation(name="fastmcp-agent", version="1"),
            sampling_handler=sampling,
            elicitation_handler=elicit,
        ) as client:
            seen["protocol"] = client.protocol_version
            async with asyncio.timeout(20):
                while not (codes := codes_of(app, log)):  # noqa: ASYNC110 - another process
                    await asyncio.sleep(0.02)
            claimed = await client.call_tool("tesseron__claim_session", {"code": codes[0]})
            seen["claim"] = outcome(claimed)
            for name in ("whoami", "confirm", "rename", "ask_model", "nope"):
                try:
                    result = await client.call_tool(f"{app}__{name}", {}, raise_on_error=False)
                except Exception as exc:  # a protocol error: recorded, the next call goes on
                    seen[name] = {"exception": f"{type(exc).__name__}: {exc}"}
                else:
                    seen[name] = outcome(result)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
