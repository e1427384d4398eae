"""``python -m toolnexus_trio ask``: a real subprocess against a FakeProvider served here.

stdout must carry the streamed answer text only; tool calls, questions and the summary
go to stderr; errors are one ``error:`` line and exit 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from terminal_helpers import StdinKind, child_command

from toolnexus_trio.builtins import BUILTIN_ORDER
from toolnexus_trio.cli._commands import GOODBYE
from toolnexus_trio.testing import FakeProvider, open_fake_provider

TODO = {"todos": [{"id": "1", "text": "buy milk", "completed": False}]}
KEYS = (
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update(extra)
    return env


def _argv(provider: FakeProvider, style: str, *extra: str, prompt: str = "note milk") -> list[str]:
    return [sys.executable, "-m", "toolnexus_trio", "ask", prompt, "--base-url",
            provider.base_url, "--style", style, "--model", "m", *extra]  # fmt: skip


async def _ask(
    provider: FakeProvider,
    style: str,
    *extra: str,
    stdin: bytes = b"",
    cwd: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        done: subprocess.CompletedProcess[bytes] = await trio.run_process(
            _argv(provider, style, *extra),
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env(**env),
            start_new_session=True,
            cwd=cwd,
        )
    return done


@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_streams_the_answer_to_stdout_and_tool_calls_to_stderr(style: str) -> None:
    script: list[dict[str, Any]] = [
        {"text": "Let me note that.", "tool_calls": [{"name": "todowrite", "arguments": TODO}]},
        {"text": "Noted: buy milk."},
    ]
    async with open_fake_provider(script) as provider:
        done = await _ask(provider, style, "--system", "be brief", OPENAI_API_KEY="sk-env-1",
                          ANTHROPIC_API_KEY="sk-env-1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Let me note that.\nNoted: buy milk.\n"
    assert done.stderr.decode().splitlines() == [
        '-> todowrite {"todos":[{"id":"1","text":"buy milk","completed":false}]}',
        "<- todowrite [ok]: [ ] buy milk",
        "done: 2 turns, 1 tool call, 20 prompt + 10 completion tokens",
    ]
    first = provider.requests[0]
    assert first.json["stream"] is True  # on_text made the model call stream
    assert first.json["model"] == "m"
    names = [t["function"]["name"] if style == "openai" else t["name"] for t in first.json["tools"]]
    assert names == list(BUILTIN_ORDER)  # the builtins toolkit
    # the key came from the environment, as the SPEC says
    if style == "openai":
        assert first.headers["authorization"] == "Bearer sk-env-1"
        assert first.json["messages"][0] == {"role": "system", "content": "be brief"}
    else:
        assert first.headers["x-api-key"] == "sk-env-1"
        assert first.json["system"] == "be brief"


@pytest.mark.parametrize("style", ["responses", "gemini"])
async def test_the_responses_and_gemini_styles(style: str) -> None:
    script: list[dict[str, Any]] = [
        {"text": "Let me note that.", "tool_calls": [{"name": "todowrite", "arguments": TODO}]},
        {"text": "Noted: buy milk."},
    ]
    async with open_fake_provider(script) as provider:
        done = await _ask(provider, style, OPENAI_API_KEY="sk-env-1", GEMINI_API_KEY="sk-env-2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Let me note that.\nNoted: buy milk.\n"
    first = provider.requests[0]
    if style == "responses":
        assert first.path == "/v1/responses"
        assert first.headers["authorization"] == "Bearer sk-env-1"
    else:
        assert first.path == "/v1/models/m:streamGenerateContent?alt=sse"
        assert first.headers["x-goog-api-key"] == "sk-env-2"


async def test_text_arrives_before_the_answer_ends_and_ctrl_c_exits_130() -> None:
    words = " ".join(f"w{i}" for i in range(20))
    # Six events, then the provider stalls: the answer never completes.
    async with open_fake_provider([{"text": words, "stall_after": 6}]) as provider:
        process = await trio.lowlevel.open_process(
            _argv(provider, "openai", "--api-key", "sk-flag"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            start_new_session=True,
        )
        try:
            assert process.stdout is not None and process.stderr is not None
            seen = b""
            with trio.fail_after(60):
                while b"w4" not in seen:
                    chunk = await process.stdout.receive_some()
                    assert chunk, "stdout closed before any text streamed"
                    seen += chunk
                request = await provider.wait_request(0)
                # Streamed: the first words are on the terminal while the answer is open.
                assert not request.closed.is_set()
                assert request.headers["authorization"] == "Bearer sk-flag"
                process.send_signal(signal.SIGINT)
                code = await process.wait()
                # The abort reached the socket: the provider saw the client hang up.
                await request.closed.wait()
                rest = b""
                while chunk := await process.stdout.receive_some():
                    rest += chunk
                err = b""
                while chunk := await process.stderr.receive_some():
                    err += chunk
        finally:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(10, shield=True):
                    await process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()
    assert code == 130
    assert (seen + rest).decode() == "w0 w1 w2 w3 w4 \n"
    assert err.decode().splitlines() == [GOODBYE]


@pytest.mark.parametrize(("stdin", "shown"), [
    (b"blue\n", '<- question [ok]: {"answers":["blue"]}'),
    (b"", "<- question [error]: declined/expired: Which colour? (options: red, blue)"),
])  # fmt: skip
async def test_the_question_builtin_is_answered_from_stdin(stdin: bytes, shown: str) -> None:
    ask = {"questions": [{"question": "Which colour?", "options": ["red", "blue"]}]}
    script = [{"tool_calls": [{"name": "question", "arguments": ask}]}, {"text": "Fine."}]
    async with open_fake_provider(script) as provider:
        done = await _ask(provider, "openai", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Fine.\n"
    lines = done.stderr.decode().splitlines()
    assert lines[1] == "? Which colour? (options: red, blue)"
    assert shown in lines
    tool_message = provider.requests[1].json["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == shown.split(": ", 1)[1]
    assert "authorization" not in provider.requests[0].headers  # no key anywhere: no header


async def test_an_http_error_is_one_line_and_exit_1() -> None:
    body = json.dumps({"error": {"message": "bad key sk-secret-9\nsecond line"}})
    # (a 400: a 401 or 403 body is never quoted at all, tests/test_consumer_decisions.py)
    async with open_fake_provider([{"status": 400, "body": body}]) as provider:
        done = await _ask(provider, "anthropic", "--api-key", "sk-secret-9")
    assert done.returncode == 1
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("error: HTTP 400 from POST http://127.0.0.1:")
    assert "/v1/messages" in line and "bad key" in line
    assert "sk-secret-9" not in line  # the key is redacted from the quoted body
    assert len(provider.requests) == 1  # a 400 is not retried


async def test_max_turns_is_an_error_and_hostile_names_are_escaped() -> None:
    script = [{"text": "\x1b[2Jhi", "tool_calls": [{"name": "\x1b[2Jwipe", "arguments": {}}]}]
    async with open_fake_provider(script) as provider:
        done = await _ask(provider, "openai", "--max-turns", "1")
    assert done.returncode == 1
    # stdout is not a terminal here: the text is passed through as the model sent it
    assert done.stdout.decode() == "\x1b[2Jhi\n"
    assert done.stderr.decode().splitlines() == [
        "-> \\x1b[2Jwipe {}",
        "<- \\x1b[2Jwipe [error]: Unknown tool: \\x1b[2Jwipe",
        "error: the run stopped at --max-turns (1 turns)",
    ]


# -- issue 17 item 19: Ctrl-C while the question builtin waits for its answer --------


@pytest.mark.parametrize("stdin", ["pipe", "terminal", "terminal-stdin"])
async def test_ctrl_c_while_a_question_waits_for_its_answer_is_the_goodbye(
    stdin: StdinKind,
) -> None:
    ask = {"questions": [{"question": "Which colour?", "options": ["red", "blue"]}]}
    script = [{"tool_calls": [{"name": "question", "arguments": ask}]}, {"text": "Fine."}]
    async with open_fake_provider(script) as provider:
        with trio.fail_after(60):
            async with child_command(
                *_argv(provider, "openai")[3:], stdin=stdin, env=_env()
            ) as child:
                await child.wait_for_output(b"? Which colour? (options: red, blue)")
                child.interrupt()
                code, out, err = await child.finish()
    shown = out + err  # on the terminal, everything is on one stream
    assert "Fatal Python error" not in shown
    assert code == 130, shown
    assert "Traceback" not in shown
    assert shown.count(GOODBYE) == 1, shown
    assert shown.splitlines()[-1] == GOODBYE
    assert len(provider.requests) == 1  # the answer never went back to the model


# -- issue 17 item 20: bash, write, edit and apply_patch ask first; files stay in cwd ---


def _bash_touch(marker: Path) -> list[dict[str, Any]]:
    command = {"command": f"touch {marker.name}", "description": "make the marker"}
    return [{"tool_calls": [{"name": "bash", "arguments": command}]}, {"text": "Done."}]


def _tool_reply(provider: FakeProvider) -> str:
    message = provider.requests[1].json["messages"][-1]
    assert message["role"] == "tool"
    content: str = message["content"]
    return content


@pytest.mark.parametrize("stdin", [b"", b"y\n"], ids=["empty", "a-piped-yes"])
async def test_without_a_terminal_bash_does_not_run_and_the_model_is_refused(
    stdin: bytes, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    async with open_fake_provider(_bash_touch(marker)) as provider:
        done = await _ask(provider, "openai", stdin=stdin, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()  # the command never ran
    reply = _tool_reply(provider)
    assert reply == "declined/expired: Allow bash to run this command?"
    err = done.stderr.decode().splitlines()
    assert "  | touch marker" in err  # the command was shown
    assert "? Allow bash to run this command? [y/N]" in err
    assert "(no terminal to ask: declined; --yes allows without asking)" in err


async def test_with_yes_bash_runs_without_a_question(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    async with open_fake_provider(_bash_touch(marker)) as provider:
        done = await _ask(provider, "openai", "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert "[y/N]" not in done.stderr.decode()
    assert "declined" not in _tool_reply(provider)


@pytest.mark.parametrize(("typed", "runs"), [(b"y\n", True), (b"n\n", False), (b"\n", False)])
async def test_on_a_terminal_the_user_answers_before_bash_runs(
    typed: bytes, runs: bool, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    async with open_fake_provider(_bash_touch(marker)) as provider:
        argv = _argv(provider, "openai")[3:]
        with trio.fail_after(60):
            async with child_command(
                *argv, stdin="terminal-stdin", cwd=tmp_path, env=_env()
            ) as child:
                await child.wait_for_output(b"? Allow bash to run this command? [y/N]")
                assert not marker.exists()  # asked first
                await child.type(typed)
                code, out, err = await child.finish()
    assert code == 0, err
    assert out == "Done.\n"
    assert marker.exists() is runs
    declined = _tool_reply(provider) == "declined/expired: Allow bash to run this command?"
    assert declined is not runs


async def test_ctrl_c_while_an_approval_waits_on_the_terminal_runs_nothing(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    async with open_fake_provider(_bash_touch(marker)) as provider:
        argv = _argv(provider, "openai")[3:]
        with trio.fail_after(60):
            async with child_command(*argv, stdin="terminal", cwd=tmp_path, env=_env()) as child:
                await child.wait_for_output(b"? Allow bash to run this command? [y/N]")
                child.interrupt()
                code, out, _ = await child.finish()
    assert code == 130, out
    assert "Fatal Python error" not in out
    assert out.count(GOODBYE) == 1 and out.splitlines()[-1] == GOODBYE, out
    assert not marker.exists()
    assert len(provider.requests) == 1


async def test_each_changing_tool_shows_what_it_will_do_and_waits_for_a_yes(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("old line\n")
    patch = "*** Begin Patch\n*** Add File: added.txt\n+patched\n*** End Patch"
    calls = [
        {"name": "write", "arguments": {"path": "new.txt", "content": "hello\x1b[2J"}},
        {
            "name": "edit",
            "arguments": {"path": "notes.txt", "oldString": "old", "newString": "new"},
        },
        {"name": "apply_patch", "arguments": {"patchText": patch}},
    ]
    script = [{"tool_calls": [call]} for call in calls] + [{"text": "Done."}]
    async with open_fake_provider(script) as provider:
        argv = _argv(provider, "openai")[3:]
        with trio.fail_after(60):
            async with child_command(
                *argv, stdin="terminal-stdin", cwd=tmp_path, env=_env()
            ) as child:
                for prompt in (b"Allow write to new.txt?", b"Allow edit of notes.txt?",
                               b"Allow apply_patch to change added.txt?"):  # fmt: skip
                    await child.wait_for_output(prompt + b" [y/N]")
                    await child.type(b"yes\n")
                code, _, err = await child.finish()
    assert code == 0, err
    lines = err.splitlines()
    # What is approved is shown in full, escape sequences made visible.
    assert "  | write 9 characters to new.txt:" in lines
    assert "  | hello\\x1b[2J" in lines
    assert (
        lines.index("  | in notes.txt, replace:")
        < lines.index("  | old")
        < lines.index("  | with:")
        < lines.index("  | new")
    )
    assert "  | +patched" in lines
    assert (tmp_path / "new.txt").read_text() == "hello\x1b[2J"
    assert (tmp_path / "notes.txt").read_text() == "new line\n"
    assert (tmp_path / "added.txt").read_text() == "patched"


async def test_file_tools_are_confined_to_the_current_directory_even_with_yes(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    calls = [
        {"name": "write", "arguments": {"path": "../outside.txt", "content": "x"}},
        {"name": "write", "arguments": {"path": str(outside), "content": "x"}},
        {"name": "read", "arguments": {"path": "/etc/hostname"}},
    ]
    script = [{"tool_calls": calls}, {"text": "Done."}]
    async with open_fake_provider(script) as provider:
        done = await _ask(provider, "openai", "--yes", cwd=work)
    assert done.returncode == 0, done.stderr
    assert not outside.exists()
    replies = [m["content"] for m in provider.requests[1].json["messages"] if m["role"] == "tool"]
    assert len(replies) == 3
    for reply in replies:
        assert "resolves outside baseDir" in reply, reply
