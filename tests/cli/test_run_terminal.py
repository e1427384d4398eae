"""``run`` as a terminal program (issue 31) and outside text on the terminal (issue 30
item 15): line editing and history in a real pty, the banner, each failed MCP server
reported once and escaped, unknown keys in ``mcp.json`` named."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import sys
import termios
from pathlib import Path

import pytest
import trio
from mcp_helpers import SERVERS
from terminal_helpers import Child, child_command

from toolnexus_trio.builtins import BUILTIN_ORDER
from toolnexus_trio.cli._commands import GOODBYE
from toolnexus_trio.cli._log import MAX_HELD, TerminalLog
from toolnexus_trio.cli._prompt import HISTORY_LENGTH, history_path
from toolnexus_trio.cli._run import banner
from toolnexus_trio.mcp._config import parse_mcp_config
from toolnexus_trio.testing import FakeProvider, open_fake_provider

KEYS = ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY")
UP, LEFT, HOME, END = b"\x1b[A", b"\x1b[D", b"\x1b[H", b"\x1b[F"  # as an xterm sends them
HOSTILE = [sys.executable, str(SERVERS / "hostile_error.py")]
RAW = (b"\x1b", b"\x07", b"\xc2\x9b")  # ESC, BEL, and the C1 CSI as UTF-8
needs_readline = pytest.mark.skipif(
    importlib.util.find_spec("readline") is None, reason="no readline module (Windows)"
)
FAILED = "MCP server 'bad' failed: no thanks \\x1b]0;pwned\\x07 \\x1b[2J \\x1b]52;c;aGFja2Vk\\x07"


def _env(state: Path) -> dict[str, str]:
    """No API keys; the history under *state*; an xterm (readline's bindings and output
    depend on TERM)."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update(XDG_STATE_HOME=str(state), TERM="xterm")
    return env


def _run_args(provider: FakeProvider, *extra: str) -> list[str]:
    return ["run", "--base-url", provider.base_url, "--style", "openai", "--model", "m", *extra]


def _asked(provider: FakeProvider) -> list[str]:
    """The last user line of each request the model got."""
    return [request.json["messages"][-1]["content"] for request in provider.requests]


async def _turn(child: Child, typed: bytes, prompts: int) -> None:
    """Type a line at the prompt and wait for the prompt after its turn (the *prompts*-th;
    a prompt starts a line, unlike the ``-> tool`` notices)."""
    await child.type(typed)
    await child.wait_for_count(b"\n> ", prompts)


@needs_readline
async def test_up_arrow_recalls_the_last_line_and_history_survives_a_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    script = [{"text": f"Answer {i}."} for i in range(4)]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", env=_env(state)
            ) as child:
                await child.wait_for_output(b"> ")
                await _turn(child, b"first line\n", 2)
                await _turn(child, UP + b"\n", 3)  # Up, Enter: the same line again
                await child.type(b"\x04")
                code, out, _ = await child.finish()
        assert code == 0, out
        assert _asked(provider) == ["first line", "first line"]
        assert history_path({"XDG_STATE_HOME": str(state)}).read_text() == "first line\n"
        assert (state / "toolnexus-trio").stat().st_mode & 0o777 == 0o700
        assert (state / "toolnexus-trio" / "history").stat().st_mode & 0o777 == 0o600
        # A new session with the same state folder: Up recalls the last session's line.
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", env=_env(state)
            ) as child:
                await child.wait_for_output(b"> ")
                await _turn(child, UP + b"\n", 2)
                await _turn(child, b"second\n", 3)
                await child.type(b"exit\n")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert _asked(provider) == ["first line", "first line", "first line", "second"]
    assert (state / "toolnexus-trio" / "history").read_text() == "first line\nsecond\nexit\n"


@needs_readline
async def test_the_line_is_edited_with_arrows_home_and_end(tmp_path: Path) -> None:
    async with open_fake_provider([{"text": "Edited."}]) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", env=_env(tmp_path / "state")
            ) as child:
                await child.wait_for_output(b"> ")
                # "world", Home, "hello ", End, "!", Left twice, "X": "hello world!" with
                # an "X" put in before its last character but one.
                await _turn(child, b"world" + HOME + b"hello " + END + b"!" + LEFT * 2 + b"X\n", 2)
                await child.type(b"exit\n")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert _asked(provider) == ["hello worlXd!"]


async def test_the_banner_names_the_model_the_tools_and_how_to_quit(tmp_path: Path) -> None:
    async with open_fake_provider([]) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", env=_env(tmp_path / "state")
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"\x04")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert out.splitlines() == [banner("m", len(BUILTIN_ORDER)), "> "]
    assert banner("m", 10) == (
        "toolnexus-trio run: model 'm', 10 tools; 'exit' or Ctrl-D quits, Ctrl-C cancels a turn"
    )


@needs_readline
async def test_ctrl_c_at_the_prompt_exits_130_and_gives_the_terminal_back(
    tmp_path: Path,
) -> None:
    async with open_fake_provider([{"text": "One."}]) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", env=_env(tmp_path / "state")
            ) as child:
                await child.wait_for_output(b"> ")
                await _turn(child, b"hi\n", 2)
                await child.type(b"half a li")  # readline holds the terminal mid-line
                await child.wait_for_output(b"half a li")
                child.interrupt()
                code, out, _ = await child.finish()
                # The pty's mode, as the shell gets it back: lines and echo, as before.
                flags = termios.tcgetattr(child.stdin.fileno())[3]
    assert code == 130, out
    assert "Fatal Python error" not in out
    assert out.count(GOODBYE) == 1 and out.splitlines()[-1] == GOODBYE
    assert flags & termios.ICANON and flags & termios.ECHO
    assert len(provider.requests) == 1  # the half line was never sent


@needs_readline
async def test_an_answer_is_not_kept_and_a_line_typed_ahead_is(tmp_path: Path) -> None:
    state = tmp_path / "state"
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]},
        {"text": "Ran it."},
        {"text": "Next."},
    ]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", cwd=tmp_path, env=_env(state)
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"run true\n")
                await child.wait_for_output(b"? Allow bash to run this command? [y/N]")
                # The answer, and the next line typed before the prompt is back.
                await _turn(child, b"y\nsecond line\n", 3)
                await child.type(b"\x04")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert "<- bash [ok]" in out
    assert _asked(provider)[-1] == "second line"
    assert history_path({"XDG_STATE_HOME": str(state)}).read_text() == "run true\nsecond line\n"


def test_the_history_lives_in_the_state_folder(tmp_path: Path) -> None:
    assert history_path({"XDG_STATE_HOME": str(tmp_path)}) == (
        tmp_path / "toolnexus-trio" / "history"
    )
    default = Path.home() / ".local" / "state" / "toolnexus-trio" / "history"
    assert history_path({}) == default
    assert history_path({"XDG_STATE_HOME": "relative/dir"}) == default  # XDG: ignored
    assert HISTORY_LENGTH == 1000


# A failed MCP server: reported once, escaped -----------------------------------------------


def _hostile_config(tmp_path: Path) -> Path:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"bad": {"command": HOSTILE}}}))
    return config


async def test_tools_reports_a_hostile_failed_server_once_escaped(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "tools", "--config",
             str(_hostile_config(tmp_path))],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(tmp_path),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for raw in RAW:
        assert raw not in done.stdout + done.stderr
    lines = done.stderr.decode().splitlines()
    assert [line for line in lines if "'bad'" in line] == [FAILED + " \\x9b31m end"]
    assert "bash" in done.stdout.decode()  # the rest of the toolkit is there


async def test_run_reports_a_hostile_failed_server_once_escaped_in_a_terminal(
    tmp_path: Path,
) -> None:
    config = _hostile_config(tmp_path)
    async with open_fake_provider([]) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider, "--config", str(config)),
                stdin="terminal",
                env=_env(tmp_path / "state"),
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"exit\n")
                code, out, _ = await child.finish()
    assert code == 0, out
    for raw in RAW:
        assert raw not in child.out
    lines = out.splitlines()
    assert [line for line in lines if "'bad'" in line] == [FAILED + " \\x9b31m end"]
    assert lines[1] == banner("m", len(BUILTIN_ORDER))  # after the failure, before the prompt


async def test_serve_reports_a_hostile_failed_server_once_escaped(tmp_path: Path) -> None:
    config = _hostile_config(tmp_path)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "serve", "--stdio", "--mcp-config",
             str(config)],
            stdin=b"", capture_stdout=True, capture_stderr=True, check=False, env=_env(tmp_path),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for raw in RAW:
        assert raw not in done.stdout + done.stderr
    lines = done.stderr.decode().splitlines()
    assert [line for line in lines if "'bad'" in line] == [FAILED + " \\x9b31m end"]


# Unknown keys in mcp.json ------------------------------------------------------------------


async def test_a_typo_in_mcp_json_is_named_with_the_closest_key(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"x": {"comand": ["true"]}}}))
    for command in ("tools", "run"):
        extra = ["--base-url", "http://127.0.0.1:9/v1", "--style", "openai", "--model", "m"]
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", command, "--config", str(config),
             *(extra if command == "run" else [])],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(tmp_path),
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.decode() == (
            f"error: {config}: MCP server 'x': unknown key 'comand' (did you mean 'command'?)\n"
        )
        assert done.stdout == b""


@pytest.mark.parametrize(
    ("key", "meant"),
    [("comand", "command"), ("enviroment", "environment"), ("timout", "timeout"),
     ("disabeld", "disabled"), ("header", "headers"), ("arg", "args")],
)  # fmt: skip
def test_a_key_close_to_a_known_one_is_an_error(key: str, meant: str) -> None:
    with pytest.raises(ValueError, match="unknown key") as caught:
        parse_mcp_config({"mcpServers": {"x": {"command": "true", key: 1}}})
    assert str(caught.value) == f"MCP server 'x': unknown key {key!r} (did you mean {meant!r}?)"


def test_another_clients_key_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # Configs are shared between clients: Cline's autoApprove is no typo of ours.
    with caplog.at_level(logging.WARNING, logger="toolnexus_trio.mcp"):
        config = parse_mcp_config({"x": {"command": "true", "autoApprove": []}})
    assert config.servers[0].command == ("true",)
    assert caplog.messages == ["MCP server 'x': unknown key 'autoApprove' ignored"]


# The log lines of the terminal commands ----------------------------------------------------


def test_log_lines_are_escaped_held_and_bounded() -> None:
    out = io.StringIO()
    handler = TerminalLog(out, names=True)
    log = logging.getLogger("toolnexus_trio.test_cli_log")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("said \x1b]0;title\x07 %s", "\x1b[2J")
        try:
            raise ValueError("deep \x1b]52;c;aGk=\x07")
        except ValueError:
            log.exception("with a traceback")
        handler.hold()
        log.warning("MCP server 'a' failed: why")
        log.warning("MCP server 'b': other")
        for i in range(MAX_HELD + 5):
            log.warning("filler %d", i)
        assert "MCP server" not in out.getvalue()  # held
        handler.show_held(skip=lambda message: message.startswith("MCP server 'a'"))
        log.warning("after")
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    lines = text.splitlines()
    assert lines[0] == "toolnexus_trio.test_cli_log: said \\x1b]0;title\\x07 \\x1b[2J"
    assert lines[1] == "toolnexus_trio.test_cli_log: with a traceback"
    assert lines[2] == "Traceback (most recent call last):"
    assert "ValueError: deep \\x1b]52;c;aGk=\\x07" in lines
    assert "MCP server 'a'" not in text and "MCP server 'b': other" in text
    assert f"filler {MAX_HELD - 3}" in text and f"filler {MAX_HELD - 2}" not in text
    assert lines[-2:] == ["(7 more log records not shown)", "toolnexus_trio.test_cli_log: after"]
