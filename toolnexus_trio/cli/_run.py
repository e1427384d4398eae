"""``python -m toolnexus_trio run`` (an interactive agent) and ``tools`` (SPEC §9).

``run`` builds one toolkit (the MCP servers of ``--config``, the skills of ``--skills``,
the builtins) and a client for ``--base-url``/``--style``/``--model``, then reads lines:
each line is one :meth:`Client.ask <toolnexus_trio.Client.ask>` on one conversation, so
the model keeps the context, its answer streamed as it arrives. ``--once PROMPT`` asks
once and exits instead.

The streams are ``ask``'s: the answer on stdout, everything else (tool calls, questions,
the ``done: ...`` line of each turn, errors, the start-up banner) on stderr. On a
terminal the ``> `` prompt is read with line editing and history (:mod:`._prompt`);
each MCP server that failed to start is reported once, and every log line is escaped
(:mod:`._log`).
So are the tool rules (:mod:`._ask_guard`): file tools confined to the current directory,
a question before each ``bash``, ``write``, ``edit`` and ``apply_patch`` (``--yes``: none).

Ending it: ``exit`` or end of input (Ctrl-D) closes the toolkit (its MCP servers are
stopped) and exits 0. Ctrl-C during a turn cancels that turn only (nothing of it is kept
in the conversation) and returns to the prompt; Ctrl-C at the prompt exits 130. A turn
that fails (the model call, after its retries) prints ``error: ...`` and the prompt comes
back; with ``--once`` it exits 1.

``--compact-at TOKENS`` keeps a long session under the model's window: a
:func:`~toolnexus_trio.compactor` summarizes the older conversation with the same model,
called with no tools (see :doc:`compaction`).

``tools`` builds the same toolkit, prints one line per tool (name, source, the first
line of its description) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._toolkit import Toolkit, ToolkitOptions, open_toolkit
from ._ask import (
    TurnPrinter,
    _describe,
    _finish,
    _one_line,
    _positive,
    add_model_options,
    run_guarded,
    stdin_wait_for,
)
from ._ask_guard import ask_tools
from ._commands import stopped_by_signal
from ._log import TerminalLog, terminal_logging
from ._mcp import read_config_file, report_failed_servers
from ._prompt import PromptLines
from ._terminal import TerminalLines, is_terminal

if TYPE_CHECKING:
    # The model client (and the HTTP stack under it) is imported by the commands that
    # talk to a model, not by ``serve --stdio``'s start-up (issue 39); the loop too.
    from ..loop import Client
    from ..loop._results import Message
    from ..models import ClientOptions

CONVERSATION_ID: Final = "run"
"""The one conversation of a ``run`` session (kept in the client's in-memory store)."""

SUMMARY_REQUEST: Final = (
    "Summarize the conversation below for your own later use. Keep the facts, decisions, "
    "names, numbers, open tasks and the user's preferences; drop small talk. Answer with "
    "the summary only.\n\n"
)
"""What the ``--compact-at`` summarizer asks the model, followed by the older messages."""

_SHOWN_CHARS: Final = 4000
"""A tool result or argument text is cut here in the summary request: the summarizer's
own request must stay far under the window it is there to protect."""


def add_run_commands(commands: Any) -> None:
    """Register ``run`` and ``tools`` on the CLI's subparsers (*commands*)."""
    run = commands.add_parser(
        "run",
        help="an interactive agent: MCP servers, skills and builtins with a real model",
        description=(
            "Build a toolkit (--config MCP servers, --skills, the builtins), then read "
            "lines: each is one turn of one conversation with the model, its answer "
            "streamed to stdout; tool calls and the rest go to stderr. File tools are "
            "confined to the current directory; bash, write, edit and apply_patch ask "
            "first (--yes: no). 'exit' or Ctrl-D quits; Ctrl-C cancels the turn in "
            "flight, and at the prompt exits 130."
        ),
    )
    _add_toolkit_options(run)
    add_model_options(run)
    run.add_argument("--once", metavar="PROMPT", help="ask this once and exit (no prompt)")
    run.add_argument(
        "--compact-at",
        metavar="TOKENS",
        type=_positive,
        help="summarize the older conversation (same model, no tools) when the estimate "
        "of the transcript passes TOKENS",
    )
    tools = commands.add_parser(
        "tools",
        help="list the tools that run would give the model, and exit",
        description="Build the toolkit of run and print each tool: name, source, description.",
    )
    _add_toolkit_options(tools)


def _add_toolkit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="MCP servers (an mcp.json file)")
    parser.add_argument(
        "--skills",
        metavar="DIR",
        action="append",
        default=[],
        help="a skills folder (searched for */SKILL.md); repeatable",
    )


def _toolkit_options(args: argparse.Namespace, *, confirm: bool) -> ToolkitOptions:
    """What the toolkit holds; a bad ``--config`` is a :class:`ValueError`."""
    from ..mcp._config import parse_mcp_config

    servers = None
    if args.config:
        raw = read_config_file(args.config)
        try:
            servers = parse_mcp_config(raw)
        except ValueError as exc:  # which file: the message names the server and the key
            raise ValueError(f"{args.config}: {exc}") from None
    # The builtins as ask gives them (confined, asking first), plus --config and --skills.
    return ToolkitOptions(
        extra_tools=ask_tools(os.getcwd(), confirm=confirm),
        builtins=False,
        mcp=servers,
        skills_dir=list(args.skills) or None,
    )


def _checked_options(args: argparse.Namespace, *, confirm: bool) -> ToolkitOptions | None:
    try:
        return _toolkit_options(args, confirm=confirm)
    except ValueError as exc:  # a bad --config: a usage error, said before anything starts
        print(f"error: {_one_line(str(exc), 2000)}", file=sys.stderr, flush=True)
        return None


@asynccontextmanager
async def _toolkit(options: ToolkitOptions, log: TerminalLog) -> AsyncIterator[Toolkit]:
    """The toolkit, each MCP server that failed to start reported once (escaped)."""
    log.hold()  # the library logs each failure too: one report is enough
    try:
        async with open_toolkit(options) as toolkit:
            report_failed_servers(toolkit, log)
            yield toolkit
    finally:
        log.show_held()


# tools ------------------------------------------------------------------------------------


def main_tools(args: argparse.Namespace) -> int:
    """Run the ``tools`` command; returns the exit code."""
    with terminal_logging() as log:
        options = _checked_options(args, confirm=True)
        if options is None:
            return 2
        return _main_tools(options, log)


def _main_tools(options: ToolkitOptions, log: TerminalLog) -> int:
    async def tools() -> int:
        async with _toolkit(options, log) as toolkit:
            listed = toolkit.tools()
        width = max((len(tool.name) for tool in listed), default=0)
        for tool in listed:
            first = (tool.description.strip().splitlines() or [""])[0]
            line = f"{tool.name:<{width}}  {tool.source.value:<8}  {first}"
            print(_one_line(line.rstrip(), 120))
        return 0

    return run_guarded(tools)


# run --------------------------------------------------------------------------------------


def main_run(args: argparse.Namespace) -> int:
    """Run the ``run`` command; returns the exit code (see the module doc)."""
    with terminal_logging() as log:
        options = _checked_options(args, confirm=not args.yes)
        if options is None:
            return 2
        printer = TurnPrinter(sys.stdout, sys.stderr)

        async def session() -> int:
            try:
                return await _session(args, options, printer, log)
            finally:
                printer.end_text()  # an answer cut by Ctrl-C still ends its line

        return run_guarded(session, printer)


def _client_options(args: argparse.Namespace, **more: Any) -> ClientOptions:
    from ..models import ClientOptions

    return ClientOptions(
        base_url=args.base_url,
        style=args.style,
        model=args.model,
        api_key=args.api_key,
        **more,
    )


async def _session(
    args: argparse.Namespace,
    toolkit_options: ToolkitOptions,
    printer: TurnPrinter,
    log: TerminalLog,
) -> int:
    from ..loop import compactor
    from ..models import create_client

    lines = TerminalLines()  # one reader for the prompt and the tools' questions
    hooks = printer.hooks()
    async with _maybe_summarizer(args) as summarize:
        if summarize is not None:
            hook = compactor(max_tokens=args.compact_at, summarize=summarize)
            hooks = attrs.evolve(hooks, before_llm=hook)
        options = _client_options(
            args,
            system_prompt=args.system,
            max_turns=args.max_turns,
            hooks=hooks,
            wait_for=stdin_wait_for(printer, lines),
        )
        async with (
            create_client(options) as client,
            _toolkit(toolkit_options, log) as toolkit,
        ):
            if args.once is not None:
                result = await client.ask(
                    args.once, toolkit, id=CONVERSATION_ID, on_text=printer.text
                )
                printer.end_text()
                return _finish(result, printer)
            on_terminal = is_terminal()
            prompt = PromptLines(lines)
            if on_terminal:
                printer.info(banner(args.model, len(toolkit.tools())), width=2000)
            while True:
                line = None
                try:
                    line = await prompt.readline()
                finally:
                    if line is None and on_terminal:
                        # Ctrl-D or Ctrl-C left the prompt's line open: end it.
                        print(file=sys.stderr, flush=True)
                if line is None or line.strip() == "exit":
                    return 0
                if line.strip():
                    await _turn(client, toolkit, line, printer)


def banner(model: str, tools: int) -> str:
    """The line ``run`` starts with on a terminal: the model, the tools, how to quit."""
    return (
        f"toolnexus-trio run: model {model!r}, {tools} tool{'s' * (tools != 1)}; "
        "'exit' or Ctrl-D quits, Ctrl-C cancels a turn"
    )


async def _turn(client: Client, toolkit: Toolkit, line: str, printer: TurnPrinter) -> None:
    """One line of the session: Ctrl-C cancels it (and only it); a failure is one line."""
    try:
        async with stopped_by_signal(signal.SIGINT) as turn:
            result = await client.ask(line, toolkit, id=CONVERSATION_ID, on_text=printer.text)
    except Exception as exc:
        printer.info(f"error: {_describe(exc)}", width=2000)
        return
    finally:
        printer.end_text()
    if turn.cancelled_caught:
        printer.info("interrupted (Ctrl-C): turn cancelled, nothing of it kept")
        return
    _finish(result, printer)


@asynccontextmanager
async def _maybe_summarizer(args: argparse.Namespace) -> AsyncIterator[Any]:
    """With ``--compact-at``: a summarizer on its own client (same model, no hooks, run
    without a toolkit, so no tools: a model offered tools may answer with a call)."""
    from ..models import create_client

    if getattr(args, "compact_at", None) is None:
        yield None
        return
    async with create_client(_client_options(args, max_turns=1)) as summarizer:

        async def summarize(older: list[Message]) -> str:
            result = await summarizer.run(SUMMARY_REQUEST + render_transcript(older))
            return result.text

        yield summarize


def render_transcript(messages: list[Message]) -> str:
    """*messages* as plain text for a summary request, one ``role: text`` block each.

    Tool calls show as ``assistant called name(arguments)``, tool results as ``tool
    result: ...``; long texts are cut (:data:`_SHOWN_CHARS`).
    """
    out: list[str] = []
    for message in messages:
        role = str(message.get("role", "?"))
        content = message.get("content")
        if isinstance(content, str) and content:
            who = "tool result" if role == "tool" else role
            out.append(f"{who}: {_cut(content)}")
        elif isinstance(content, list):  # content blocks (either dialect)
            out.append(f"{role}: {_cut(json.dumps(content, ensure_ascii=False))}")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = _cut(str(function.get("arguments", "")))
            out.append(f"{role} called {function.get('name', '?')}({arguments})")
    return "\n".join(out)


def _cut(text: str) -> str:
    if len(text) <= _SHOWN_CHARS:
        return text
    return text[:_SHOWN_CHARS] + f" [... {len(text) - _SHOWN_CHARS} characters cut]"
