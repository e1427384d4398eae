"""``python -m toolnexus_trio run`` and ``tools``: real subprocesses, in a real pty, against
a FakeProvider served here (and a real MCP server over stdio)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_helpers import pid_alive, stdio
from terminal_helpers import child_command

from toolnexus_trio.builtins import BUILTIN_ORDER
from toolnexus_trio.cli._commands import GOODBYE
from toolnexus_trio.cli._run import SUMMARY_REQUEST, banner, render_transcript
from toolnexus_trio.testing import FakeProvider, open_fake_provider

KEYS = ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY")
CANCELLED = b"interrupted (Ctrl-C): turn cancelled, nothing of it kept"


@pytest.fixture(autouse=True)
def _state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The prompt's history goes to a folder of the test, never the user's; the terminal
    is an xterm (readline's key bindings and output depend on TERM)."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("TERM", "xterm")
    return state


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update(extra)
    return env


def _run_args(provider: FakeProvider, *extra: str, style: str = "openai") -> list[str]:
    return ["run", "--base-url", provider.base_url, "--style", style, "--model", "m", *extra]


def _roles(request: Any) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in request.json["messages"]]


async def test_tools_lists_mcp_skills_and_builtins_and_exits(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ev": stdio()}}))
    skill = tmp_path / "skills" / "greet"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: greet\ndescription: Greet nicely.\n---\nHi.\n")
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "tools", "--config", str(config),
             "--skills", str(tmp_path / "skills")],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in lines}
    assert rows["ev_add"] == ["mcp", "Add two integers."]
    assert rows["skill"][0] == "skill"
    assert [name for name in rows if rows[name][0] == "builtin"] == list(BUILTIN_ORDER)
    assert next(iter(rows)) == "ev_add"  # the MCP servers' tools come first
    assert all(len(line) <= 120 for line in lines)


async def test_tools_with_a_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[]")
    for config in (tmp_path / "bad.json", tmp_path / "missing.json"):
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "tools", "--config", str(config)],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(),
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.decode().startswith("error: ")
        assert done.stdout == b""


async def test_a_two_line_session_keeps_the_conversation_and_exit_quits() -> None:
    script = [{"text": "Hello Ada, nice to meet you."}, {"text": "Your name is Ada."}]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider, "--system", "be brief"),
                stdin="terminal",
                env=_env(OPENAI_API_KEY="sk-secret-env-77"),
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"my name is Ada\n")
                await child.wait_for_count(b"> ", 2)  # the turn is over: the next prompt
                await child.type(b"what is my name?\n")
                await child.wait_for_count(b"> ", 3)
                await child.type(b"exit\n")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert out.splitlines() == [
        banner("m", len(BUILTIN_ORDER)),
        "> my name is Ada",
        "Hello Ada, nice to meet you.",
        "done: 1 turn, 0 tool calls, 10 prompt + 5 completion tokens",
        "> what is my name?",
        "Your name is Ada.",
        "done: 1 turn, 0 tool calls, 10 prompt + 5 completion tokens",
        "> exit",
    ]
    assert "sk-secret" not in out
    first, second = provider.requests
    assert first.json["stream"] is True  # the answer streams
    assert first.headers["authorization"] == "Bearer sk-secret-env-77"
    assert _roles(second) == [
        ("system", "be brief"),
        ("user", "my name is Ada"),
        ("assistant", "Hello Ada, nice to meet you."),
        ("user", "what is my name?"),
    ]


async def test_ctrl_c_mid_turn_cancels_that_turn_only_and_ctrl_d_quits() -> None:
    words = " ".join(f"w{i}" for i in range(30))
    script = [{"text": words, "stall_after": 4}, {"text": "The second answer."}]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(*_run_args(provider), stdin="terminal", env=_env()) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"first\n")
                await child.wait_for_output(b"w1")
                request = await provider.wait_request(0)
                child.interrupt()
                await child.wait_for_output(CANCELLED)
                await request.closed.wait()  # the model call was aborted
                await child.wait_for_count(b"> ", 2)
                await child.type(b"second\n")
                await child.wait_for_count(b"> ", 3)
                await child.type(b"\x04")  # Ctrl-D at the prompt
                code, out, _ = await child.finish()
    assert code == 0, out
    assert GOODBYE not in out
    # The cancelled turn left nothing in the conversation.
    assert _roles(provider.requests[1]) == [("user", "second")]


async def test_ctrl_c_at_the_prompt_exits_130() -> None:
    async with open_fake_provider([{"text": "One."}]) as provider:
        with trio.fail_after(60):
            async with child_command(*_run_args(provider), stdin="terminal", env=_env()) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"hi\n")
                await child.wait_for_count(b"> ", 2)
                child.interrupt()
                code, out, _ = await child.finish()
    assert code == 130, out
    assert "Fatal Python error" not in out
    assert out.count(GOODBYE) == 1 and out.splitlines()[-1] == GOODBYE


@pytest.mark.parametrize("ending", [b"\x04", b"exit\n"], ids=["ctrl-d", "exit"])
async def test_leaving_the_session_stops_the_mcp_servers(tmp_path: Path, ending: bytes) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ev": stdio("--child")}}))
    script = [{"tool_calls": [{"name": "ev_pids", "arguments": {}}]}, {"text": "Got them."}]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider, "--config", str(config)), stdin="terminal", env=_env()
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"pids?\n")
                await child.wait_for_output(b"done: ")  # the turn is over
                pids = [int(p) for p in _tool_output(child.out, "ev_pids").split()]
                assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)
                await child.type(ending)
                code, out, _ = await child.finish()
    assert code == 0, out
    # The server and its own child were stopped before the command exited.
    assert not any(pid_alive(pid) for pid in pids)


def _tool_output(out: bytes, name: str) -> str:
    marker = f"<- {name} [ok]: ".encode()
    line = out[out.index(marker) + len(marker) :].split(b"\r\n")[0]
    return json.loads(line)["result"] if line.startswith(b"{") else line.decode()


async def test_once_asks_one_prompt_with_the_key_from_the_flag() -> None:
    async with open_fake_provider([{"text": "Just once."}]) as provider:
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "toolnexus_trio",
                 *_run_args(provider, "--once", "hello", "--api-key", "sk-flag-secret-9",
                            style="anthropic")],
                stdin=b"", capture_stdout=True, capture_stderr=True, check=False,
                env=_env(ANTHROPIC_API_KEY="sk-env-other"),
            )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Just once.\n"
    assert b"sk-" not in done.stdout + done.stderr
    (request,) = provider.requests
    assert request.headers["x-api-key"] == "sk-flag-secret-9"
    names = [t["name"] for t in request.json["tools"]]
    assert names == list(BUILTIN_ORDER)


async def test_a_piped_session_and_a_failing_turn_go_on(tmp_path: Path) -> None:
    script = [{"status": 400}, {"text": "Second works."}]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "toolnexus_trio", *_run_args(provider)],
                stdin=b"one\n\ntwo\n", capture_stdout=True, capture_stderr=True, check=False,
                env=_env(),
            )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Second works.\n"  # no prompt: stdin is not a terminal
    err = done.stderr.decode().splitlines()
    assert err[0].startswith("error: ") and err[1].startswith("done: ")
    assert _roles(provider.requests[1]) == [("user", "two")]


async def test_compact_at_summarizes_with_the_same_model_and_no_tools() -> None:
    long = "tell me about trio " * 20
    script = [
        {"text": "First answer " + "x " * 50},
        {"text": "SUMMARY: the user asked about trio."},  # the summarizer's call
        {"text": "Second answer."},
    ]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "toolnexus_trio",
                 *_run_args(provider, "--compact-at", "150", "--system", "S")],
                stdin=f"{long}\nand now?\n".encode(), capture_stdout=True,
                capture_stderr=True, check=False, env=_env(),
            )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().endswith("Second answer.\n")
    first, summary, second = provider.requests
    assert "tools" in first.json
    # The summarizer: the same model, no tools, no system prompt, one user message.
    assert summary.json["model"] == "m" and "tools" not in summary.json
    (asked,) = summary.json["messages"]
    assert asked["role"] == "user" and asked["content"].startswith(SUMMARY_REQUEST)
    assert long.strip() in asked["content"]
    assert _roles(second) == [
        ("system", "S"),
        ("system", "[Summary of earlier conversation]\nSUMMARY: the user asked about trio."),
        ("user", "and now?"),
    ]


def test_render_transcript_shows_calls_results_and_cuts_long_text() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "read", "arguments": '{"p":1}'}}
        ]},
        {"role": "tool", "tool_call_id": "1", "content": "y" * 5000},
        {"role": "user", "content": [{"type": "text", "text": "blocks"}]},
    ]  # fmt: skip
    text = render_transcript(messages).splitlines()
    assert text[0] == "user: hi"
    assert text[1] == 'assistant called read({"p":1})'
    assert text[2].startswith("tool result: yyy") and text[2].endswith("[... 1000 characters cut]")
    assert text[3] == 'user: [{"type": "text", "text": "blocks"}]'


@pytest.mark.parametrize(("typed", "runs"), [(b"y\n", True), (b"n\n", False)], ids=["yes", "no"])
async def test_bash_is_asked_about_first_on_the_terminal(
    tmp_path: Path, typed: bytes, runs: bool
) -> None:
    marker = tmp_path / "marker"
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"touch {marker}"}}]},
        {"text": "Done."},
    ]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_run_args(provider), stdin="terminal", cwd=tmp_path, env=_env()
            ) as child:
                await child.wait_for_output(b"> ")
                await child.type(b"touch it\n")
                await child.wait_for_output(b"? Allow bash to run this command? [y/N]")
                assert not marker.exists()  # asked first
                await child.type(typed)
                await child.wait_for_output(b"done: ")
                await child.type(b"exit\n")
                code, out, _ = await child.finish()
    assert code == 0, out
    assert marker.exists() is runs
    reply = provider.requests[1].json["messages"][-1]["content"]
    assert (reply == "declined/expired: Allow bash to run this command?") is not runs
