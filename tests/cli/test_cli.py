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
from terminal_helpers import StdinKind, child_command

import toolnexus_trio.__main__ as cli
from toolnexus_trio.cli._commands import EXIT_INTERRUPTED, GOODBYE, run_gateway
from toolnexus_trio.cli._terminal import MAX_LINE_BYTES, TerminalLines
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

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


# -- issue 17 item 19: Ctrl-C while a question waits for the terminal ----------------


@pytest.mark.parametrize("stdin", ["pipe", "terminal", "terminal-stdin"])
async def test_ctrl_c_while_demo_ask_waits_for_an_answer_is_the_goodbye(
    stdin: StdinKind, tmp_path: Path
) -> None:
    # Before: a worker thread sat in sys.stdin.readline() holding the buffered stdin's
    # lock, and shutdown aborted: "Fatal Python error: _enter_buffered_busy", -6.
    env = {**os.environ, "HOME": str(tmp_path)}
    with trio.fail_after(120):
        async with child_command("demo", "--ask", stdin=stdin, env=env) as demo:
            await demo.wait_for_output(b'? Delete "buy milk"? This cannot be undone. [y/N]')
            demo.interrupt()
            code, out, err = await demo.finish()
    shown = out + err  # on the terminal, everything is on one stream
    assert "Fatal Python error" not in shown
    assert code == EXIT_INTERRUPTED, shown
    assert "Traceback" not in shown
    # One goodbye, on a line of its own (not after the question's prompt).
    assert shown.count(GOODBYE) == 1, shown
    assert GOODBYE in shown.splitlines(), shown
    assert "-> yes" not in out and "-> no" not in out  # nothing was answered


async def test_demo_ask_reads_each_answer_from_a_pipe_and_a_terminal_alike(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    for stdin in ("pipe", "terminal"):
        with trio.fail_after(120):
            async with child_command("demo", "--ask", stdin=stdin, env=env) as demo:  # type: ignore[arg-type]
                await demo.wait_for_output(b"[y/N]")
                await demo.type(b"y\n")
                await demo.wait_for_output(b"to?")
                await demo.type("the report, done \u2713\n".encode())
                code, out, err = await demo.finish()
        assert code == 0, err
        assert "Fatal Python error" not in err
        assert 'wait_for: Delete "buy milk"? This cannot be undone. -> yes' in out, out
        assert "#2 the report, done \u2713" in out, out
        assert "#1 buy milk" not in out  # deleted


# -- the terminal reader the questions use (toolnexus_trio.cli._terminal) -----------------


async def test_terminal_lines_survive_a_cancelled_wait_and_end_at_end_of_input() -> None:
    read_end, write_end = os.pipe()
    try:
        lines = TerminalLines(read_end)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lines.readline)
                await trio.testing.wait_all_tasks_blocked()  # waiting on the empty pipe
                scope.cancel()
        os.write(write_end, "one\r\ntwo \xff\n".encode("latin-1") + b"three")
        assert await lines.readline() == "one"
        assert await lines.readline() == "two \ufffd"  # not UTF-8: replaced, not an error
        os.close(write_end)
        write_end = -1
        assert await lines.readline() == "three"  # the last line needs no newline
        assert await lines.readline() is None
        assert await lines.readline() is None
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


async def test_terminal_lines_cut_an_endless_line_and_keep_memory_bounded() -> None:
    read_end, write_end = os.pipe()
    lines = TerminalLines(read_end)
    long_line = b"x" * (MAX_LINE_BYTES * 4)

    async def type_it() -> None:
        stream = trio.lowlevel.FdStream(write_end)  # closes write_end
        async with stream:
            await stream.send_all(long_line + b"\nnext\n")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(type_it)
            assert await lines.readline() == "x" * MAX_LINE_BYTES
            assert await lines.readline() == "next"  # the rest of the long line is gone
            assert len(lines._buffer) <= MAX_LINE_BYTES
        assert await lines.readline() is None
    finally:
        os.close(read_end)


@pytest.mark.parametrize("source", ["/dev/null", "file"])
async def test_terminal_lines_read_files_that_cannot_be_polled(source: str, tmp_path: Path) -> None:
    path = tmp_path / "answers"
    path.write_bytes(b"y\n")
    fd = os.open(os.devnull if source == "/dev/null" else path, os.O_RDONLY)
    try:
        lines = TerminalLines(fd)
        if source == "file":
            assert await lines.readline() == "y"
        assert await lines.readline() is None
    finally:
        os.close(fd)
    assert await TerminalLines(1_000_000).readline() is None  # no such fd: no stdin at all
