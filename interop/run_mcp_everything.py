"""Interop: the official MCP reference server (``@modelcontextprotocol/server-everything``,
npm) through our MCP source and ``serve``: sampling and elicitation.

Run with ``nox -s interop`` (or ``python interop/run_mcp_everything.py`` in a venv with
``pip install -e '.[mcp]'``). Needs Node.js and npm: the package is installed with
``npm install --prefix`` into ``.nox/npm-everything`` (or set ``MCP_EVERYTHING`` to
the ``mcp-server-everything`` executable). Without node/npm, or when the install
fails (offline), it prints ``SKIP`` and why, and exits 0: CI does not need it.

Checks:

1. ``trigger-sampling-request`` answered by the toolkit's sampler (source, one hop);
2. the same through ``serve``, answered by the outer MCP client's sampling callback
   (the serving toolkit's sampler is not used);
3. ``trigger-elicitation-request`` through ``serve``, answered by the outer client
   (accept with content, then decline);
4. ``trigger-url-elicitation`` through ``serve``: URL mode reaches the outer client.

Prints one line per check and a final ``N passed, M failed``; exits non-zero on a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

PACKAGE = "@modelcontextprotocol/server-everything"
ROOT = Path(__file__).resolve().parents[1]
PREFIX = ROOT / ".nox" / "npm-everything"
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    RESULTS.append((name, ok, str(detail)))
    print(f"{'PASS' if ok else 'FAIL'} {name}{f': {detail}' if detail != '' else ''}", flush=True)


def skip(reason: str) -> None:
    print(f"SKIP MCP reference server interop: {reason}", flush=True)
    sys.exit(0)


def find_server() -> list[str]:
    """The command that starts the reference server over stdio (installing it once)."""
    given = os.environ.get("MCP_EVERYTHING")
    if given:
        return [given, "stdio"]
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip("node/npm are not installed")
    binary = PREFIX / "node_modules" / ".bin" / "mcp-server-everything"
    if not binary.exists():
        print(f"installing {PACKAGE} into {PREFIX} ...", flush=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), PACKAGE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0 or not binary.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            skip(f"npm could not install {PACKAGE}: {tail[0]}")
    return [str(binary), "stdio"]


def _text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def _line(text: str) -> str:
    """The first line of *text* (for the report)."""
    return (text.splitlines() or [""])[0][:160]


async def scenarios(command: list[str]) -> None:
    import mcp_types as types
    from mcp import Client

    from toolnexus_trio import SamplingRequest, ToolkitOptions, open_toolkit

    asked: list[SamplingRequest] = []

    async def sampler(request: SamplingRequest) -> str:
        asked.append(request)
        await trio.lowlevel.checkpoint()
        return "sampled by the toolkit"

    mcp = {"everything": {"command": command}}

    # 1. One hop: the toolkit's sampler answers.
    options = ToolkitOptions(mcp=mcp, sample=sampler, builtins=False)
    async with open_toolkit(options) as toolkit:
        status = toolkit.mcp_status()["everything"]
        check("server connected", status.state == "connected", status)
        result = await toolkit.execute(
            "everything_trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 50}
        )
        check(
            "sampling answered by the toolkit's sampler",
            "sampled by the toolkit" in result.output and not result.is_error,
            _line(result.output),
        )
        check(
            "the sampler saw the prompt and maxTokens",
            bool(asked) and "Say hi" in asked[0].messages[-1].text and asked[0].max_tokens == 50,
            asked[0] if asked else "not asked",
        )

    # 2-4. Two hops: the toolkit served, an SDK client outside.
    asked.clear()
    elicited: list[Any] = []
    outer_sampled: list[Any] = []

    async def outer_sample(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        outer_sampled.append(params)
        await trio.lowlevel.checkpoint()
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled by the outer client"),
            model="outer-model",
        )

    answers = ["accept", "decline", "accept"]

    async def outer_elicit(ctx: Any, params: Any) -> Any:
        elicited.append(params)
        await trio.lowlevel.checkpoint()
        action = answers[min(len(elicited), len(answers)) - 1]
        if action != "accept" or getattr(params, "mode", "form") == "url":
            return types.ElicitResult(action=action)  # type: ignore[arg-type]
        return types.ElicitResult(action="accept", content=_fill(params.requested_schema))

    options = ToolkitOptions(mcp=mcp, sample=sampler, relay_to_client=True, builtins=False)
    async with (
        open_toolkit(options) as toolkit,
        toolkit.serve() as served,
        Client(
            served.url,
            mode="legacy",
            sampling_callback=outer_sample,
            elicitation_callback=outer_elicit,
        ) as client,
    ):
        result = await client.call_tool(
            "everything_trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 40}
        )
        check(
            "through serve: sampling answered by the outer client",
            "sampled by the outer client" in _text(result) and not asked,
            _line(_text(result)),
        )
        check(
            "through serve: the outer client got the server's request",
            bool(outer_sampled) and outer_sampled[0].max_tokens == 40,
            outer_sampled[0].max_tokens if outer_sampled else "not asked",
        )
        accepted = await client.call_tool("everything_trigger-elicitation-request", {})
        check(
            "through serve: elicitation accepted by the outer client",
            bool(elicited) and "accept" in _text(accepted).lower(),
            _line(_text(accepted)),
        )
        declined = await client.call_tool("everything_trigger-elicitation-request", {})
        check(
            "through serve: elicitation declined by the outer client",
            len(elicited) == 2 and "decline" in _text(declined).lower(),
            _line(_text(declined)),
        )
        url = await client.call_tool(
            "everything_trigger-url-elicitation", {"url": "https://example.com/login"}
        )
        last = elicited[-1] if elicited else None
        check(
            "through serve: URL elicitation reaches the outer client",
            last is not None
            and getattr(last, "mode", None) == "url"
            and last.url == "https://example.com/login",
            _line(_text(url)),
        )


def _fill(schema: dict[str, Any]) -> dict[str, Any]:
    """A valid answer for a form schema: each field's default, else a value of its type."""
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if "default" in prop:
            content[name] = prop["default"]
        elif prop.get("enum"):
            content[name] = prop["enum"][0]
        elif prop.get("type") == "boolean":
            content[name] = True
        elif prop.get("type") in ("number", "integer"):
            content[name] = prop.get("minimum", 1)
        elif prop.get("type") == "array":
            items = prop.get("items") or {}
            options = items.get("enum") or [o.get("const") for o in items.get("anyOf", [])]
            content[name] = options[:1]
        else:
            formats = {"email": "ada@example.com", "uri": "https://example.com"}
            formats["date"] = "1815-12-10"
            content[name] = formats.get(prop.get("format", ""), "Ada")
    return content


def main() -> None:
    command = find_server()
    try:
        import mcp  # noqa: F401
    except ImportError:
        skip("the mcp extra is not installed (pip install -e '.[mcp]')")
    trio.run(scenarios, command)
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    print(f"{len(RESULTS) - failed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
