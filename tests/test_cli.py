"""The command line under failure: refused hellos, Ctrl-C, and end of input.

Ctrl-C tests run the real command in its own process group (stdin from /dev/null),
wait for a line that shows it is running, send SIGINT to the group, and always kill
the group in cleanup.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path

import pytest
import trio

import toolnexus_trio.__main__ as cli
from toolnexus_trio._cli import EXIT_INTERRUPTED, GOODBYE, run_gateway
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed, serve_websocket

HELLO_TIMEOUT_S = 60  # generous: CI machines are shared; nothing here waits it out


class Command:
    """A running ``python -m toolnexus_trio ...`` with line-wise stdout."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.stdout = b""

    async def line(self) -> str:
        """The next stdout line (without its newline); fails at end of output."""
        assert self.proc.stdout is not None
        while b"\n" not in self.stdout:
            chunk = await self.proc.stdout.receive_some()
            assert chunk, f"output ended before a full line: {self.stdout!r}"
            self.stdout += chunk
        line, self.stdout = self.stdout.split(b"\n", 1)
        return line.decode()

    async def finish(self) -> tuple[int, str, str]:
        """Wait for exit; return (code, rest of stdout, stderr)."""

        async def read_all(stream: trio.abc.ReceiveStream | None) -> bytes:
            assert stream is not None
            data = b""
            while chunk := await stream.receive_some():
                data += chunk
            return data

        out: dict[str, bytes] = {}

        async def collect(name: str, stream: trio.abc.ReceiveStream | None) -> None:
            out[name] = await read_all(stream)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, "out", self.proc.stdout)
            nursery.start_soon(collect, "err", self.proc.stderr)
        code = await self.proc.wait()
        return code, (self.stdout + out["out"]).decode(), out["err"].decode()

    def interrupt(self) -> None:
        """Ctrl-C, as a terminal sends it: SIGINT to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)


@asynccontextmanager
async def command(*args: str, home: Path) -> AsyncIterator[Command]:
    """Start the command in its own session; the group is killed on the way out."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "toolnexus_trio", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield Command(proc)
    finally:
        with trio.move_on_after(10, shield=True):
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                await stream.aclose()
    with pytest.raises(ProcessLookupError):  # nothing of the group is left
        os.killpg(proc.pid, 0)


def _assert_goodbye(code: int, err: str) -> None:
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip() == GOODBYE


@asynccontextmanager
async def raw_host(hello: dict[str, object] | None) -> AsyncIterator[tuple[str, trio.Event]]:
    """A hand-driven host on loopback: sends *hello* (or nothing) and reads until closed.

    Yields its URL and an event set once a gateway connected.
    """
    connected = trio.Event()

    async def serve(ws: WebSocket) -> None:
        connected.set()
        if hello is not None:
            message = {"jsonrpc": "2.0", "id": 1, "method": "tesseron/hello", "params": hello}
            ws.send_nowait(json.dumps(message))
        with suppress(WebSocketClosed):
            while True:
                await ws.receive_batch()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_websocket, serve, host="127.0.0.1", port=0))
        try:
            yield f"ws://127.0.0.1:{port}/", connected
        finally:
            nursery.cancel_scope.cancel()  # also when the body fails


def _hello(app_id: str = "fake", version: str = "1.2.0") -> dict[str, object]:
    return {
        "protocolVersion": version,
        "app": {"id": app_id, "name": "Fake"},
        "actions": [],
        "resources": [],
    }


# -- item 12: a refused hello is one line -------------------------------------------


@pytest.mark.parametrize(
    ("hello", "expected"),
    [(_hello(version="9.0.0"), "[-32000]"), (_hello(app_id="Not An Id"), "[-32602]")],
    ids=["protocol-major", "bad-app-id"],
)
async def test_gateway_command_prints_one_line_when_the_hello_is_refused(
    hello: dict[str, object], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with trio.fail_after(HELLO_TIMEOUT_S):
        async with raw_host(hello) as (url, _):
            code = await run_gateway(url)
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err


# -- item 13: Ctrl-C is a goodbye and 130 -------------------------------------------


async def test_ctrl_c_stops_the_host_cleanly_and_removes_its_manifest(tmp_path: Path) -> None:
    instances = tmp_path / ".tesseron" / "instances"
    with trio.fail_after(60):
        async with command("host", home=tmp_path) as host:
            assert (await host.line()).startswith("todo host listening on ws://127.0.0.1:")
            assert len(list(instances.glob("*.json"))) == 1
            host.interrupt()
            code, _, err = await host.finish()
    _assert_goodbye(code, err)
    assert list(instances.glob("*.json")) == []


async def test_ctrl_c_stops_the_gateway_command_while_it_waits_for_a_hello(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with (
            raw_host(None) as (url, connected),
            command("gateway", "--url", url, home=tmp_path) as gateway,
        ):
            await connected.wait()  # it dialled: it is waiting for the hello now
            gateway.interrupt()
            code, out, err = await gateway.finish()
    _assert_goodbye(code, err)
    assert out == ""


async def test_ctrl_c_stops_the_demo_cleanly(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with command("demo", home=tmp_path) as demo:
            assert "user: " in await demo.line()
            demo.interrupt()
            code, _, err = await demo.finish()
    _assert_goodbye(code, err)


# -- item 14: end of input declines -------------------------------------------------


async def test_demo_ask_at_end_of_input_declines_each_question_in_one_line(
    tmp_path: Path,
) -> None:
    with trio.fail_after(120):
        async with command("demo", "--ask", home=tmp_path) as demo:
            code, out, err = await demo.finish()
    assert code == 0, err
    assert err == ""
    declined = [line for line in out.splitlines() if "-> declined (end of input)" in line]
    assert len(declined) == 2, out
    assert '<- todo__delete [ok]: {"deleted":false}' in out
    assert "#1 buy milk" in out  # nothing was deleted
    assert "#2 write report" in out  # nor renamed


# -- the CLI side of item 10 ---------------------------------------------------------


@pytest.mark.parametrize("port", ["70000", "-1"])
async def test_host_refuses_a_port_outside_the_range(port: str, tmp_path: Path) -> None:
    # A subprocess: a host that binds some other port instead would serve forever.
    with trio.fail_after(60):
        async with command("host", "--port", port, home=tmp_path) as host:
            code, out, err = await host.finish()
    assert code == 2, out
    assert f"port {int(port)} is outside 0..65535" in err
    assert "Traceback" not in err


def test_host_refuses_a_port_that_is_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["host", "--port", "http"])
    assert exited.value.code == 2
    assert "not a port number: 'http'" in capsys.readouterr().err
