"""Size bounds on MCP traffic (docs/mcp.rst, "Limits"), against hostile peers on real
pipes and sockets: one message is at most 16 MiB whatever carries it (a stdio line
either way, a JSON answer or an SSE event over streamable HTTP), and a server's whole
tool listing, all pages together, is held to 1,000 tools and 16 MiB. Going over ends
in an error that names the limit, never in unbounded memory."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
from mcp.server.lowlevel import Server
from mcp_helpers import SERVERS, group_members, http_app

from toolnexus_trio import ToolContext
from toolnexus_trio.mcp import McpStatus, list_mcp_tools, open_mcp
from toolnexus_trio.mcp._stdio import MAX_LINE_BYTES as MAX_MESSAGE_BYTES

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
ROGUE = SERVERS / "rogue.py"
PEAK_RSS = SERVERS / "peak_rss.py"

# ---------------------------------------------------------------------- a raw HTTP peer

Answer = Callable[[Any], tuple[dict[str, str], AsyncIterator[bytes]]]
"""Given a request's id: the answer's headers and its body, chunk by chunk."""


class RawMcp:
    """A hand-written streamable-HTTP MCP server on loopback (the SDK's server would not
    send a hostile answer): it answers ``initialize`` properly and ``tools/list`` with
    whatever :attr:`answer` makes (``tools/call`` with :attr:`call`'s), counting the
    bytes of those answers that the socket took."""

    def __init__(self, answer: Answer, call: Answer | None = None) -> None:
        self.answer = answer
        self.call = call
        self.sent = 0
        self.url = ""

    async def _read_request(
        self, stream: trio.SocketStream, buffer: bytearray
    ) -> tuple[str, dict[str, str], bytes] | None:
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            if not data:
                return None
            buffer += data
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            data = await stream.receive_some(65536)
            if not data:
                return None
            rest += data
        buffer[:] = rest[length:]
        return lines[0].split(" ")[0], headers, rest[:length]

    @staticmethod
    def _head(status: str, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _connection(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async with stream:
                while (request := await self._read_request(stream, buffer)) is not None:
                    method, _, body = request
                    empty = {"content-length": "0"}
                    if method != "POST":  # no GET stream; DELETE ends nothing
                        status = "405 Method Not Allowed" if method == "GET" else "200 OK"
                        await stream.send_all(self._head(status, empty))
                        continue
                    message = json.loads(body)
                    if "id" not in message:
                        await stream.send_all(self._head("202 Accepted", empty))
                    elif message["method"] == "initialize":
                        result = {
                            "protocolVersion": message["params"]["protocolVersion"],
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "raw", "version": "1"},
                        }
                        out = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                        headers = {
                            "content-type": "application/json",
                            "content-length": str(len(out)),
                            "mcp-session-id": "raw-1",
                        }
                        await stream.send_all(self._head("200 OK", headers) + out.encode())
                    else:
                        make = self.call if message["method"] == "tools/call" else self.answer
                        assert make is not None
                        headers, chunks = make(message["id"])
                        await stream.send_all(self._head("200 OK", headers))
                        async with contextlib.aclosing(chunks) as parts:  # type: ignore[type-var]
                            async for chunk in parts:
                                await stream.send_all(chunk)
                                self.sent += len(chunk)

    async def serve(self, *, task_status: trio.TaskStatus[None]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/mcp"
        await trio.serve_listeners(self._connection, listeners, task_status=task_status)


@contextlib.asynccontextmanager
async def raw_mcp(answer: Answer, call: Answer | None = None) -> AsyncIterator[RawMcp]:
    server = RawMcp(answer, call)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


def listing(request_id: Any, description_bytes: int) -> tuple[bytes, bytes, int]:
    """A tools/list answer with one tool whose description is *description_bytes* of
    ``x``: (prefix, suffix, total size); the description goes between them."""
    before = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"tools": [{"name": "t", "description": ""}]},
        }
    )
    at = before.index('"description": "') + len('"description": "')
    prefix, suffix = before[:at].encode(), before[at:].encode()
    suffix = suffix.replace(b'"}]}}', b'", "inputSchema": {"type": "object"}}]}}')
    return prefix, suffix, len(prefix) + description_bytes + len(suffix)


async def body(prefix: bytes, size: int, suffix: bytes) -> AsyncIterator[bytes]:
    yield prefix
    block = b"x" * 65536
    for _ in range(size // len(block)):
        yield block
    yield b"x" * (size % len(block))
    yield suffix


# ---------------------------------------------------------------------- item 7: HTTP answers


async def test_http_json_answer_over_the_message_cap_fails_with_the_limit_named() -> None:
    hundred_mb = 100_000_000

    def answer(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
        prefix, suffix, total = listing(request_id, hundred_mb)
        headers = {"content-type": "application/json", "content-length": str(total)}
        return headers, body(prefix, hundred_mb, suffix)

    def chunked(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
        # No Content-Length: the cap is met while the body streams.
        prefix, suffix, _ = listing(request_id, hundred_mb)

        async def chunks() -> AsyncIterator[bytes]:
            async with contextlib.aclosing(body(prefix, hundred_mb, suffix)) as parts:  # type: ignore[type-var]
                async for part in parts:
                    if part:
                        yield b"%x\r\n%s\r\n" % (len(part), part)
            yield b"0\r\n\r\n"

        return {"content-type": "application/json", "transfer-encoding": "chunked"}, chunks()

    for make in (answer, chunked):
        async with raw_mcp(make) as server:
            inventory = await list_mcp_tools({"big": {"url": server.url}})
        status = inventory["big"].status
        assert status.state == "failed", make
        assert status.error == (
            "tools/list: the server's answer is over the message size limit "
            "of 16 MiB (16777216 bytes)"
        )
        # The client stopped reading near the cap: the socket took far less than 100 MB
        # (the cap, plus what the kernel's buffers hold; 0 when Content-Length said so).
        assert server.sent < 48 * MIB, (make, server.sent)


@pytest.mark.parametrize("relay", [False, True], ids=["plain", "with-requests-desk"])
async def test_http_call_answer_over_the_cap_fails_that_call_only(relay: bool) -> None:
    # With relay_to_client the call runs with its requests desk (a nursery of its own):
    # the error must come out the same.
    def small(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
        prefix, suffix, total = listing(request_id, 5)
        headers = {"content-type": "application/json", "content-length": str(total)}
        return headers, body(prefix, 5, suffix)

    def huge(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
        start = f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": '
        prefix = (start + '{"content": [{"type": "text", "text": "').encode()
        suffix, size = b'"}]}}', 100_000_000
        headers = {"content-type": "application/json"}  # no length: counted as it comes
        return headers, body(prefix, size, suffix)

    async with (
        raw_mcp(small, huge) as server,
        open_mcp({"raw": {"url": server.url}}, relay_to_client=relay) as source,
    ):
        [tool] = source.tools()
        result = await tool.call({}, ToolContext())
        assert (result.output, result.is_error) == (
            "MCP server 'raw': the server's answer is over the message size limit of "
            "16 MiB (16777216 bytes)",
            True,
        )
        assert server.sent < 48 * MIB, server.sent
        # One answer was too large, not the connection: the server stays usable.
        assert source.status()["raw"] == McpStatus("connected", None, 1)


async def test_http_compressed_answer_cannot_inflate_past_the_cap() -> None:
    # 100 MB of description in ~100 KB of gzip: counted as it arrives, it could not be
    # held to the cap, so an encoding we did not ask for is refused before inflating.
    prefix, suffix, _ = listing(1, 0)
    packed = gzip.compress(prefix + b"x" * 100_000_000 + suffix, compresslevel=1)

    def answer(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
        async def chunks() -> AsyncIterator[bytes]:
            yield packed

        headers = {
            "content-type": "application/json",
            "content-encoding": "gzip",
            "content-length": str(len(packed)),
        }
        return headers, chunks()

    tracemalloc.start()
    try:
        async with raw_mcp(answer) as server:
            inventory = await list_mcp_tools({"zip": {"url": server.url}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    status = inventory["zip"].status
    assert status.state == "failed"
    assert "Content-Encoding 'gzip', which was not asked for" in str(status.error)
    assert peak < 48 * MIB, peak


async def test_http_sse_answers_get_the_same_cap_as_any_message() -> None:
    # The SDK bounds one SSE event at 1 MiB unless told: a 2 MiB listing over SSE is
    # fine (as it is over stdio and as JSON), a 100 MB one fails with the limit named.
    def sse(size: int) -> Answer:
        def answer(request_id: Any) -> tuple[dict[str, str], AsyncIterator[bytes]]:
            prefix, suffix, _ = listing(request_id, size)
            return {"content-type": "text/event-stream"}, body(
                b"event: message\ndata: " + prefix, size, suffix + b"\n\n"
            )

        return answer

    async with raw_mcp(sse(2 * MIB)) as server:
        inventory = await list_mcp_tools({"sse": {"url": server.url}})
    assert inventory["sse"].status == McpStatus("connected", None, 1)
    assert len(inventory["sse"].tools[0].description) == 2 * MIB

    async with raw_mcp(sse(100_000_000)) as server:
        inventory = await list_mcp_tools({"sse": {"url": server.url}})
    status = inventory["sse"].status
    assert status.state == "failed"
    assert f"{MAX_MESSAGE_BYTES} byte limit" in str(status.error)
    assert server.sent < 48 * MIB


# ---------------------------------------------------------------------- item 8: pagination


async def test_paginated_listing_is_bounded_in_tools_and_bytes() -> None:
    pages: dict[str | None, tuple[list[types.Tool], str | None]] = {}

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools, cursor = pages[params.cursor if params else None]
        return types.ListToolsResult(tools=tools, next_cursor=cursor)

    def tool(name: str, description: str = "") -> types.Tool:
        return types.Tool(name=name, description=description, input_schema={"type": "object"})

    def paged(count: int, per_page: list[types.Tool]) -> None:
        """*count* pages, each of *per_page* (renamed per page: names stay unique)."""
        pages.clear()
        for i in range(count):
            pages[None if i == 0 else f"c{i}"] = (
                [t.model_copy(update={"name": f"{t.name}_{i}"}) for t in per_page],
                f"c{i + 1}" if i + 1 < count else None,
            )

    server = Server("paged", on_list_tools=list_tools)
    async with http_app(server.streamable_http_app(json_response=True)) as base:
        config = {"paged": {"url": f"{base}/mcp"}}

        # 10 pages of 2 MB: each page is well within the message cap, together not.
        paged(10, [tool("t", "x" * 2_000_000)])
        status = (await list_mcp_tools(config))["paged"].status
        assert status == McpStatus(
            "failed",
            "tools/list: the tools take more than 16 MiB (16777216 bytes) "
            "(the limit per server, all pages)",
        )

        # 3 pages of 400 tools: 1,200 tools.
        paged(3, [tool(f"t{n}") for n in range(400)])
        status = (await list_mcp_tools(config))["paged"].status
        assert status == McpStatus(
            "failed", "tools/list: more than 1000 tools (the limit per server)"
        )

        # Just under both bounds loads, and the source shows the failure the same way.
        paged(2, [tool(f"t{n}") for n in range(500)])
        assert (await list_mcp_tools(config))["paged"].status == McpStatus("connected", None, 1000)
        paged(3, [tool(f"t{n}") for n in range(400)])
        async with open_mcp(config) as source:
            assert source.status()["paged"].error == (
                "tools/list: more than 1000 tools (the limit per server)"
            )
            assert source.tools() == []


# ---------------------------------------------------------------------- item 10: stdio client


async def test_stdio_line_over_the_cap_names_the_limit_in_status_and_call(tmp_path: Path) -> None:
    over = MAX_MESSAGE_BYTES + MIB
    reason = (
        "the server sent a message (one line) over the 16 MiB (16777216 bytes) limit; disconnected"
    )
    # While loading: the status says why (the SDK alone says "Connection closed").
    script = f"echo $$ > {tmp_path}/pid; head -c {over} /dev/zero | tr '\\0' x; sleep 300"
    async with open_mcp({"big": {"command": ["sh", "-c", script], "timeout": 20000}}) as source:
        assert source.status()["big"] == McpStatus("failed", f"initialize: {reason}")
    assert group_members(int((tmp_path / "pid").read_text())) == []

    # During a call: the call's error and then the status name it.
    config = {"rogue": {"command": [sys.executable, str(ROGUE), str(over)], "timeout": 20000}}
    async with open_mcp(config) as source:
        assert source.status()["rogue"] == McpStatus("connected", None, 1)
        [huge] = source.tools()
        result = await huge.call({}, ToolContext())
        assert (result.output, result.is_error) == (f"MCP server 'rogue': {reason}", True)
        with trio.fail_after(15):
            while source.status()["rogue"].state != "failed":
                await source.wait_changed(source.version)
        assert source.status()["rogue"] == McpStatus("failed", reason)


# ---------------------------------------------------------------------- item 9: our stdin


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--stdio", "--no-builtins"],
        ["gateway", "--mcp", "--instances-dir", "{tmp}"],
    ],
    ids=["serve", "gateway"],
)
async def test_stdin_line_over_the_cap_is_refused_with_memory_bounded(
    command: list[str], tmp_path: Path
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    peak_file = tmp_path / "peak"
    proc = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
        [
            sys.executable,
            str(PEAK_RSS),
            str(peak_file),
            sys.executable,
            "-m",
            "toolnexus_trio",
            *args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    written = 0
    try:
        # One line of 300 MB, fed until the server stops taking it.
        block = b"x" * MIB
        with contextlib.suppress(BrokenPipeError):
            while written < 300 * MIB:
                await trio.to_thread.run_sync(proc.stdin.write, block)
                written += len(block)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        with trio.fail_after(60):
            code = await trio.to_thread.run_sync(proc.wait)
        peak = int(peak_file.read_text())
        stderr = proc.stderr.read().decode()
        assert code == 1, stderr
        assert "Traceback" not in stderr, stderr
        assert stderr.splitlines()[-1] == (
            "error: stdin: the client sent a message (one line) over the "
            "16 MiB (16777216 bytes) limit; closing"
        )
        assert proc.stdout.read() == b""
        # It stopped reading near the cap, and held about that much at most (the
        # interpreter with the SDK loaded is ~60-90 MB; 300 MB of line would be >370).
        assert written < 100 * MIB, written
        assert peak < 128 * MIB, peak
    finally:
        if proc.returncode is None:  # the wrapper and the server: their own group
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()


async def test_capped_lines_on_a_pipe_and_on_a_file(tmp_path: Path) -> None:
    from toolnexus_trio.mcp._stdin import CappedLines

    async def read_all(fd: int, limit: int) -> tuple[list[bytes], str | None]:
        lines = CappedLines(fd, limit)
        try:
            got = [line async for line in lines]
        finally:
            await lines.aclose()
        return got, None if lines.error is None else str(lines.error)

    # A pipe (read by Trio): blank lines skipped, a last line without its newline kept.
    r, w = os.pipe()
    os.write(w, b'{"a":1}\n\n  \n{"b":2}\r\n{"c":3}')
    os.close(w)
    assert await read_all(r, 100) == ([b'{"a":1}', b'{"b":2}\r', b'{"c":3}'], None)

    # A regular file (read in a thread): the lines before an over-long one still come,
    # then the input ends, and the error names the limit.
    path = tmp_path / "input"
    path.write_bytes(b"one\ntwo\n" + b"x" * 1000 + b"\nthree\n")
    fd = os.open(path, os.O_RDONLY)
    assert await read_all(fd, 100) == (
        [b"one", b"two"],
        "stdin: the client sent a message (one line) over the 100 bytes limit; closing",
    )
