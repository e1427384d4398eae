"""``python -m toolnexus_trio ask "<prompt>" --base-url URL --style STYLE --model M``.

One :meth:`Client.ask <toolnexus_trio.Client.ask>` with the builtins toolkit, against any
OpenAI- or Anthropic-style endpoint: a hosted one, or a local llama.cpp, Ollama or vLLM
server (``--base-url http://127.0.0.1:8080/v1 --style openai``).

What goes where, so the answer can be piped:

- **stdout** carries the answer text only, streamed as it arrives; each model turn's
  text ends with a newline.
- **stderr** carries everything else, one line each: ``-> name {args}`` when a tool
  call starts, ``<- name [ok]: output`` (or ``[error]``) when it ends, the questions of
  the ``question`` builtin (``? ...``, answered from stdin, one line per question; end
  of input declines), a ``done: ...`` summary, and ``error: ...`` on failure.

What the model may do: the builtins, with the file tools confined to the current
directory (a path outside it is refused), and each ``bash``, ``write``, ``edit`` and
``apply_patch`` call shown on stderr (the command, the path, the patch) and asked
about first (``? ... [y/N]``, answered on the terminal; ``y`` or ``yes`` runs it). With
no terminal on stdin the answer is no. A declined call does not run and the model is
told so. ``--yes`` runs them without asking (still confined).

Exit codes: 0 done; 1 ``error: ...`` (the model call failed after its retries, the run
hit ``--max-turns``, ...); 2 bad arguments; 130 interrupted (Ctrl-C).

The API key is ``--api-key``, else the environment (``OPENAI_API_KEY`` /
``OPENROUTER_API_KEY`` for the openai and responses styles, ``ANTHROPIC_API_KEY`` for
anthropic, ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` for gemini); with none, no auth
header is sent (local servers). ``STYLE`` is ``openai``, ``anthropic``, ``responses`` or
``gemini``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import trio

from .._groups import leaf_exceptions
from .._wire import Answer, Request
from ..builtins import render_questions
from ._ask_guard import ask_tools
from ._commands import run_command
from ._terminal import TerminalLines, is_terminal

if TYPE_CHECKING:
    # The loop is imported by the commands that run one, not by ``serve --stdio``'s
    # start-up (issue 39).
    from ..loop._results import Hooks, RunResult

_INFO_WIDTH = 300
"""Tool-call lines are cut to this many characters: a terminal is not a log file."""

# C0 and C1 controls (an escape sequence from a hostile model must not drive the
# terminal). Text keeps newlines and tabs; one-line notices keep nothing.
_TEXT_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def _one_line(text: str, width: int = _INFO_WIDTH) -> str:
    text = _LINE_CONTROLS.sub(_escape, text)
    return text if len(text) <= width else text[: width - 1] + "…"


class TurnPrinter:
    """Shows a run as it happens: text deltas on *text_out*, notices on *info_out*.

    Use :meth:`text` as ``on_text`` and :meth:`hooks` as the client's hooks. A notice
    first ends an open text line, so text and notices never share a line, whether the
    two streams are one terminal or two files. Text written to a terminal has its
    control characters (escape sequences included) made visible. *text_prefix* starts
    each text line, *info_prefix* each notice.
    """

    def __init__(
        self, text_out: TextIO, info_out: TextIO, *, text_prefix: str = "", info_prefix: str = ""
    ) -> None:
        self.text_out = text_out
        self.info_out = info_out
        self.text_prefix = text_prefix
        self.info_prefix = info_prefix
        self._open = False  # text_out holds text not yet ended by a newline
        self._raw = not _isatty(text_out)

    def text(self, delta: str) -> None:
        """Write one text delta (``on_text``)."""
        if not delta:
            return
        if not self._open and self.text_prefix:
            delta = self.text_prefix + delta
        if not self._raw:
            delta = _TEXT_CONTROLS.sub(_escape, delta)
        self.text_out.write(delta)
        self.text_out.flush()
        self._open = not delta.endswith("\n")

    def end_text(self) -> None:
        """End an open text line."""
        if self._open:
            self.text_out.write("\n")
            self.text_out.flush()
            self._open = False

    def info(self, line: str, *, width: int = _INFO_WIDTH) -> None:
        """Write one notice line (control characters escaped, cut at *width*)."""
        self.end_text()
        self.info_out.write(self.info_prefix + _one_line(line, width) + "\n")
        self.info_out.flush()

    def hooks(self) -> Hooks:
        """``before_tool`` / ``after_tool`` hooks that print each call as it starts and ends."""
        from ..loop._results import Hooks

        return Hooks(before_tool=self._before_tool, after_tool=self._after_tool)

    def _before_tool(self, event: dict[str, Any]) -> None:
        try:
            args = json.dumps(event["args"], ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            args = repr(event["args"])
        self.info(f"-> {event['name']} {args}")

    def _after_tool(self, event: dict[str, Any]) -> None:
        result = event["result"]
        tag = "error" if result.is_error else "ok"
        self.info(f"<- {event['name']} [{tag}]: {result.output}")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


_SHOW_LIMIT = 64_000
"""An approval shows this many characters of a command or patch in full; a longer one
shows its start and end and says how much is hidden."""


def _show_block(printer: TurnPrinter, text: str) -> None:
    if len(text) > _SHOW_LIMIT:
        half = _SHOW_LIMIT // 2
        hidden = len(text) - 2 * half
        text = f"{text[:half]}\n[... {hidden} characters not shown ...]\n{text[-half:]}"
    for line in text.split("\n"):
        # Whole, not cut (what is approved must be seen); controls made visible.
        printer.info("  | " + line, width=sys.maxsize)


def stdin_wait_for(
    printer: TurnPrinter, lines: TerminalLines | None = None, *, terminal: bool | None = None
) -> Any:
    """A ``wait_for`` that asks on *printer*'s notice stream and reads answers from stdin.

    A ``question`` gets one line per question (``data={"answers": [...]}``), from a
    terminal or a pipe. Any other kind (the approvals of ``bash``, ``write``, ``edit``
    and ``apply_patch``) shows ``data["show"]`` and is a yes/no asked on the terminal
    (``y`` or ``yes`` approves); without a terminal (*terminal*, default: whether stdin
    is one) the answer is no. End of input declines. Lines come from *lines* (default:
    fd 0), one question at a time.
    """
    reader = TerminalLines() if lines is None else lines
    on_terminal = is_terminal() if terminal is None else terminal
    asking = trio.Lock()  # parallel calls: one question (prompt and answer) at a time

    async def wait_for(request: Request) -> Answer:
        async with asking:
            return await ask(request)

    async def ask(request: Request) -> Answer:
        questions = (request.data or {}).get("questions") if request.kind == "question" else None
        if isinstance(questions, list) and questions:
            replies = []
            for question in questions:
                shown = render_questions([question]) if isinstance(question, dict) else question
                printer.info(f"? {shown}")
                reply = await reader.readline()
                if reply is None:
                    return declined(request, "(end of input: declined)")
                replies.append(reply)
            return Answer(id=request.id, ok=True, data={"answers": replies})
        show = (request.data or {}).get("show")
        if isinstance(show, str) and show:
            _show_block(printer, show)
        printer.info(f"? {request.prompt} [y/N]")
        if not on_terminal:
            return declined(request, "(no terminal to ask: declined; --yes allows without asking)")
        reply = await reader.readline()
        if reply is None:
            return declined(request, "(end of input: declined)")
        if reply.strip().lower() not in ("y", "yes"):
            return Answer(id=request.id, ok=False, reason="declined")
        return Answer(id=request.id, ok=True)

    def declined(request: Request, notice: str) -> Answer:
        printer.info(notice)
        return Answer(id=request.id, ok=False, reason="declined")

    return wait_for


async def run_ask(args: argparse.Namespace, printer: TurnPrinter) -> int:
    """One ``ask`` as *args* say, shown through *printer*; returns the exit code."""
    from .._toolkit import ToolkitOptions, create_toolkit
    from ..models import ClientOptions, create_client

    options = ClientOptions(
        base_url=args.base_url,
        style=args.style,
        model=args.model,
        api_key=args.api_key,
        system_prompt=args.system,
        max_turns=args.max_turns,
        hooks=printer.hooks(),
        wait_for=stdin_wait_for(printer),
    )
    # Confined to where ask runs, and asking before anything that changes something
    # (see _ask_guard): a model that read a hostile page must not act unasked.
    tools = ask_tools(os.getcwd(), confirm=not args.yes)
    async with (
        create_client(options) as client,
        await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=False)) as toolkit,
    ):
        result = await client.ask(args.prompt, toolkit, on_text=printer.text)
    printer.end_text()
    return _finish(result, printer)


def _finish(result: RunResult, printer: TurnPrinter) -> int:
    usage = result.usage
    summary = (
        f"{result.turns} turn{'s' * (result.turns != 1)}, "
        f"{result.tool_call_count} tool call{'s' * (result.tool_call_count != 1)}, "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens"
    )
    if result.status == "done":
        printer.info(f"done: {summary}")
        return 0
    if result.limit == "maxTurns":
        printer.info(f"error: the run stopped at --max-turns ({result.turns} turns)")
    else:
        printer.info(f"error: the run ended {result.status} ({summary})")
    return 1


def _describe(exc: BaseException) -> str:
    leaves = list(leaf_exceptions(exc)) if isinstance(exc, BaseExceptionGroup) else [exc]
    return "; ".join(str(leaf) or type(leaf).__name__ for leaf in leaves)


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        from .._http_client import safe_url  # the HTTP stack only when it is needed

        raise argparse.ArgumentTypeError(f"not an http(s) URL: {safe_url(value)!r}")
    return value


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def add_ask_command(commands: Any) -> None:
    """Register ``ask`` on the CLI's subparsers (*commands*)."""
    ask = commands.add_parser(
        "ask",
        help="ask a real model (OpenAI- or Anthropic-style HTTP) with the builtin tools",
        description=(
            "Run one ask with the builtin tools. The file tools are confined to the current "
            "directory, and each bash, write, edit and apply_patch call is shown and asked "
            "about on the terminal first (no terminal: no; --yes: run without asking). The "
            "answer streams to stdout; tool calls, questions and the summary go to stderr. "
            "Exit 0 done, 1 error, 130 Ctrl-C."
        ),
    )
    ask.add_argument("prompt", help="what to ask")
    add_model_options(ask)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model and tool-rule options ``ask`` and ``run`` share, on *parser*."""
    parser.add_argument(
        "--base-url",
        required=True,
        type=_http_url,
        help="e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1",
    )
    parser.add_argument(
        "--style",
        required=True,
        choices=["openai", "anthropic", "responses", "gemini"],
        help="the wire: /chat/completions, /messages, /responses (OpenAI's Responses "
        "API) or /models/{model}:generateContent (Gemini)",
    )
    parser.add_argument("--model", required=True, help="the model name, sent as is")
    parser.add_argument(
        "--api-key",
        default=None,
        help="default: OPENAI_API_KEY / OPENROUTER_API_KEY (openai, responses), "
        "ANTHROPIC_API_KEY (anthropic) or GEMINI_API_KEY / GOOGLE_API_KEY (gemini) from the "
        "environment; none sends no auth header",
    )
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--max-turns", type=_positive, default=10, help="default: 10")
    parser.add_argument(
        "--yes",
        action="store_true",
        help="run bash, write, edit and apply_patch without asking first (by default each "
        "call is shown and asked about on the terminal; with no terminal the answer is no)",
    )


def main_ask(args: argparse.Namespace) -> int:
    """Run the ``ask`` command; returns the exit code (see the module doc)."""
    printer = TurnPrinter(sys.stdout, sys.stderr)

    async def ask() -> int:
        try:
            return await run_ask(args, printer)
        finally:
            printer.end_text()  # a streamed answer cut by Ctrl-C still ends its line

    return run_guarded(ask, printer)


def run_guarded(main: Callable[[], Awaitable[int]], printer: TurnPrinter | None = None) -> int:
    """:func:`run_command` (*main*), a failure being one ``error: ...`` line and exit 1."""
    try:
        return run_command(main)  # Ctrl-C: the shared goodbye line and exit 130
    except Exception as exc:
        if printer is not None:
            printer.end_text()
        print(f"error: {_one_line(_describe(exc), 2000)}", file=sys.stderr, flush=True)
        return 1
