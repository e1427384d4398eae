"""The load generator of scenarios 4-7: one external process that plays the gateway.

It is the same program for every host (ours, tesseron 0.2.0, and the raw echo limit),
written with asyncio and a minimal WebSocket client (:class:`WebSocketClient`, faster
than the ``websockets`` client, so that it is never the bottleneck; the ``stream``
scenario against the raw echo host measures its ceiling).
It dials with subprotocol ``tesseron-gateway``, answers the host's ``tesseron/hello``
with a welcome (every capability on), runs one scenario and prints one JSON object::

    python -m benchmarks.loadgen invoke URL --pid PID [--echo]
    python -m benchmarks.loadgen stubborn URL --pid PID
    python -m benchmarks.loadgen scale URL --pid PID --n 10000
    python -m benchmarks.loadgen storm URL --pid PID --n 100000
    python -m benchmarks.loadgen stream URL --pid PID --n 100000 --echo

``--pid`` is the host's process id: its memory and CPU time are read from ``/proc``.
Host CPU time per operation is reported beside every rate: on a shared machine it is
steadier than wall time.
Every received frame is JSON-decoded, whatever the host, so the client's cost per
frame is the same on every side.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import json
import os
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

WELCOME = {
    "sessionId": "s_bench",
    "protocolVersion": "1.2.0",
    "capabilities": {
        "streaming": True,
        "subscriptions": True,
        "sampling": True,
        "elicitation": True,
    },
    "agent": {"id": "bench", "name": "Benchmark gateway"},
}
WINDOW = 64
CANCELLED = -32001


class WebSocketClient:
    """A minimal RFC 6455 client on asyncio streams, built for measuring, not for production.

    Every frame in a received chunk is parsed at once, so ``recv`` is usually a deque pop;
    that keeps the load generator well above any host's rate (``stream`` proves it
    against the raw echo host). Client frames use the all-zero masking key, which the
    RFC allows, so sending costs no XOR. Pings are answered; a close ends ``recv``.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._buf = bytearray()
        self._ready: collections.deque[str] = collections.deque()
        self._fragments: list[bytes] = []

    @classmethod
    async def connect(cls, url: str, subprotocol: str | None) -> WebSocketClient:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {parts.path or '/'} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if subprotocol:
            lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"upgrade refused: {head.decode(errors='replace')}")
        return cls(reader, writer)

    @staticmethod
    def frame(text: str, opcode: int = 0x1) -> bytes:
        data = text.encode()
        n = len(data)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        return head + b"\0\0\0\0" + data  # zero masking key: payload unchanged

    async def send(self, text: str) -> None:
        self._writer.write(self.frame(text))
        if self._writer.transport.get_write_buffer_size() > 1 << 20:
            await self._writer.drain()

    def _parse(self) -> None:
        buf = self._buf
        pos, end = 0, len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            n, at = b1 & 0x7F, pos + 2
            if n == 126:
                if end - at < 2:
                    break
                n, at = struct.unpack_from("!H", buf, at)[0], at + 2
            elif n == 127:
                if end - at < 8:
                    break
                n, at = struct.unpack_from("!Q", buf, at)[0], at + 8
            mask = b""
            if b1 & 0x80:
                mask, at = bytes(buf[at : at + 4]), at + 4
            if end - at < n:
                break
            payload = bytes(buf[at : at + n])
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            pos = at + n
            opcode = b0 & 0x0F
            if opcode in (0x0, 0x1, 0x2):
                self._fragments.append(payload)
                if b0 & 0x80:
                    self._ready.append(b"".join(self._fragments).decode("utf-8", "replace"))
                    self._fragments = []
            elif opcode == 0x8:
                raise ConnectionError("the host closed the WebSocket")
            elif opcode == 0x9:
                self._writer.write(self.frame(payload.decode("latin-1"), 0xA))
        del buf[:pos]

    async def recv(self) -> str:
        while not self._ready:
            chunk = await self._reader.read(1 << 20)
            if not chunk:
                raise ConnectionError("the host closed the connection")
            self._buf += chunk
            self._parse()
        return self._ready.popleft()

    async def close(self) -> None:
        self._writer.write(self.frame("", 0x8))
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def proc_status_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (KiB) of process *pid*."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def proc_cpu_s(pid: int) -> float:
    """User plus system CPU seconds used so far by process *pid*."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Gateway:
    """One gateway connection: request ids, frame helpers and the handshake."""

    def __init__(self, ws: WebSocketClient) -> None:
        self.ws = ws
        self.next_id = 0

    async def handshake(self) -> None:
        hello = json.loads(await self.ws.recv())
        if hello.get("method") != "tesseron/hello":
            raise RuntimeError(f"expected tesseron/hello, got {hello}")
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": hello["id"], "result": WELCOME}))

    def invoke_frame(self, name: str, input: Any) -> tuple[int, str]:
        self.next_id += 1
        rid = self.next_id
        frame = {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "actions/invoke",
            "params": {"name": name, "input": input, "invocationId": f"inv_{rid}"},
        }
        return rid, json.dumps(frame)

    async def cancel(self, rid: int) -> None:
        frame = {
            "jsonrpc": "2.0",
            "method": "actions/cancel",
            "params": {"invocationId": f"inv_{rid}"},
        }
        await self.ws.send(json.dumps(frame))

    async def recv(self) -> dict[str, Any]:
        return json.loads(await self.ws.recv())

    async def call(self, name: str, input: Any) -> dict[str, Any]:
        """Invoke and wait for the response, skipping notifications."""
        rid, frame = self.invoke_frame(name, input)
        await self.ws.send(frame)
        while True:
            msg = await self.recv()
            if msg.get("id") == rid:
                return msg


# -- scenario 4 ------------------------------------------------------------------


async def invoke(gw: Gateway, pid: int, echo: bool, sequential: int, total: int) -> dict[str, Any]:
    """Sequential round trips (µs each), then throughput with WINDOW invokes in flight."""
    ws = gw.ws
    payload = {"text": "hello", "n": 1}

    async def one() -> None:
        _, frame = gw.invoke_frame("echo", payload)
        await ws.send(frame)
        msg = await gw.recv()
        if not echo and "result" not in msg:
            raise RuntimeError(f"invoke failed: {msg}")

    for _ in range(min(200, sequential)):  # warm-up
        await one()
    rtts = []
    for _ in range(sequential):
        t0 = time.perf_counter()
        await one()
        rtts.append((time.perf_counter() - t0) * 1e6)

    sent = answered = 0
    cpu0 = proc_cpu_s(pid)
    t0 = time.perf_counter()
    for _ in range(WINDOW):
        await ws.send(gw.invoke_frame("echo", payload)[1])
        sent += 1
    while answered < total:
        msg = await gw.recv()
        if not echo and "result" not in msg:
            raise RuntimeError(f"invoke failed: {msg}")
        answered += 1
        if sent < total:
            await ws.send(gw.invoke_frame("echo", payload)[1])
            sent += 1
    elapsed = time.perf_counter() - t0
    return {
        "rtt_us": rtts,
        "throughput": total / elapsed,
        "answered": answered,
        "host_cpu_us_per_op": (proc_cpu_s(pid) - cpu0) / total * 1e6,
    }


# -- scenario 5 ------------------------------------------------------------------


async def stubborn(gw: Gateway, reps: int) -> dict[str, Any]:
    """actions/cancel -> -32001 time (ms) for a handler that ignores cancellation."""
    latencies, codes = [], []
    for _ in range(reps):
        rid, frame = gw.invoke_frame("stubborn", {})
        await gw.ws.send(frame)
        while True:  # the handler reports progress once it is running
            msg = await gw.recv()
            if msg.get("method") == "actions/progress":
                break
        await asyncio.sleep(0.02)
        t0 = time.perf_counter()
        await gw.cancel(rid)
        while True:
            msg = await gw.recv()
            if msg.get("id") == rid:
                break
        latencies.append((time.perf_counter() - t0) * 1e3)
        codes.append(msg.get("error", {}).get("code"))
    return {"cancel_ms": latencies, "codes": codes}


# -- scenario 6 ------------------------------------------------------------------


async def scale(gw: Gateway, pid: int, n: int) -> dict[str, Any]:
    """n concurrent ``hold`` invocations, each reporting progress; then release them all."""
    ws = gw.ws
    for _ in range(100):  # warm-up, so that baseline memory includes the code paths
        await gw.call("echo", {})
    before = proc_status_kib(pid)
    cpu0 = proc_cpu_s(pid)
    ids = set()
    progressed: set[str] = set()
    answered: dict[int, Any] = {}
    t0 = time.perf_counter()

    async def reader() -> None:
        while len(progressed) < n:
            msg = await gw.recv()
            if msg.get("method") == "actions/progress":
                progressed.add(msg["params"]["invocationId"])
            elif "id" in msg:
                answered[msg["id"]] = msg  # an early answer is a failure, kept for the report

    read = asyncio.create_task(reader())
    for _ in range(n):
        rid, frame = gw.invoke_frame("hold", {})
        ids.add(rid)
        await ws.send(frame)
    await read
    t_inflight = time.perf_counter() - t0
    at_peak = proc_status_kib(pid)
    release_id, frame = gw.invoke_frame("release", {})
    await ws.send(frame)
    while not ids <= answered.keys() or release_id not in answered:
        msg = await gw.recv()
        if "id" in msg:
            answered[msg["id"]] = msg
    elapsed = time.perf_counter() - t0
    after = proc_status_kib(pid)
    ok = sum(
        1 for rid in ids if answered[rid].get("result", {}).get("output") == {"released": True}
    )
    peak_kib = max(after["VmHWM"], at_peak["VmRSS"])
    return {
        "n": n,
        "seconds": elapsed,
        "seconds_to_all_in_flight": t_inflight,
        "answered_ok": ok,
        "lost": n - ok,
        "progress_seen": len(progressed),
        "rss_before_kib": before["VmRSS"],
        "rss_at_peak_kib": at_peak["VmRSS"],
        "hwm_kib": after["VmHWM"],
        "bytes_per_inflight": (peak_kib - before["VmRSS"]) * 1024 / n,
        "host_cpu_us_per_op": (proc_cpu_s(pid) - cpu0) / n * 1e6,
    }


# -- scenario 7 ------------------------------------------------------------------


async def storm(gw: Gateway, pid: int, n: int) -> dict[str, Any]:
    """One invocation sending n progress updates: rate and the never-decreasing check."""
    for _ in range(100):
        await gw.call("echo", {})
    rid, frame = gw.invoke_frame("storm", {"n": n})
    inv = f"inv_{rid}"
    count = violations = out_of_range = 0
    highest = -1
    cpu0 = proc_cpu_s(pid)
    t0 = time.perf_counter()
    await gw.ws.send(frame)
    while True:
        msg = await gw.recv()
        if msg.get("method") == "actions/progress":
            params = msg["params"]
            if params.get("invocationId") != inv:
                continue
            count += 1
            percent = params.get("percent")
            if not isinstance(percent, int) or not 0 <= percent <= 100:
                out_of_range += 1
            elif percent < highest:
                violations += 1
            else:
                highest = percent
        elif msg.get("id") == rid:
            break
    elapsed = time.perf_counter() - t0
    return {
        "n": n,
        "received": count,
        "seconds": elapsed,
        "per_second": count / elapsed,
        "ceiling_violations": violations,
        "out_of_range": out_of_range,
        "highest": highest,
        "answer": msg.get("result", msg.get("error")),
        "host_cpu_us_per_op": (proc_cpu_s(pid) - cpu0) / max(count, 1) * 1e6,
    }


async def stream(gw: Gateway, pid: int, n: int) -> dict[str, Any]:
    """The raw echo host sends n progress-shaped frames: this client's and the stack's ceiling.

    Each frame is JSON-decoded, as in ``storm``.
    """
    count = 0
    cpu0 = proc_cpu_s(pid)
    t0 = time.perf_counter()
    await gw.ws.send(f"stream {n}")
    while (text := await gw.ws.recv()) != "end":
        json.loads(text)
        count += 1
    elapsed = time.perf_counter() - t0
    return {
        "received": count,
        "seconds": elapsed,
        "per_second": count / elapsed,
        "host_cpu_us_per_op": (proc_cpu_s(pid) - cpu0) / max(count, 1) * 1e6,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    ws = await WebSocketClient.connect(args.url, "tesseron-gateway")
    try:
        gw = Gateway(ws)
        cpu0 = time.process_time()
        if not args.echo:
            await gw.handshake()
        if args.scenario == "invoke":
            result = await invoke(gw, args.pid, args.echo, args.sequential, args.total)
        elif args.scenario == "stubborn":
            result = await stubborn(gw, args.reps)
        elif args.scenario == "scale":
            result = await scale(gw, args.pid, args.n)
        elif args.scenario == "stream":
            result = await stream(gw, args.pid, args.n)
        else:
            result = await storm(gw, args.pid, args.n)
        result["loadgen_cpu_s"] = time.process_time() - cpu0
        return result
    finally:
        await ws.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", choices=["invoke", "stubborn", "scale", "storm", "stream"])
    parser.add_argument("url")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--echo", action="store_true", help="raw echo host: no handshake")
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--total", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n", type=int, default=10000)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    if "seconds" in result:
        result["loadgen_cpu_share"] = result["loadgen_cpu_s"] / result["seconds"]
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
