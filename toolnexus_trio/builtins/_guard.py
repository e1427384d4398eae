"""What ``ask``, ``run`` and the ACP agent let a model do unasked: the builtins,
confined, with a question first.

A real model reads untrusted text (a ``webfetch`` page can carry a prompt injection),
so by default ``ask`` gives it the builtins with the file tools confined to the current
directory (:class:`~toolnexus_trio.builtins.BuiltinsConfig` ``base_dir``), and each
``bash``, ``write``, ``edit`` and ``apply_patch`` call first suspends (SPEC §10) on an
``"approval"`` request that shows the command, the path or the patch. The CLI's
``wait_for`` asks on the terminal; a declined call never runs and the model gets
``declined/expired: <prompt>``. ``--yes`` builds the same tools without the question.
The ACP agent (:mod:`toolnexus_trio.acp`) sends the same request to the editor as a
``session/request_permission``.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

from .._tools import Tool, ToolContext, ToolResult, pending
from .._wire import Request
from ._config import BuiltinsConfig
from ._registry import builtin_tools

CONFIRMED: Final = ("bash", "write", "edit", "apply_patch")
"""The builtins that change something: each call is approved first (unless ``--yes``)."""

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.*)$", re.M)


def ask_tools(base_dir: str, *, confirm: bool) -> list[Tool]:
    """The builtins in the SPEC's order, file tools confined to *base_dir*; with
    *confirm*, each :data:`CONFIRMED` tool asks (suspends) before it runs."""
    tools = builtin_tools(BuiltinsConfig(base_dir=base_dir))
    return [confirm_first(tool) if confirm and tool.name in CONFIRMED else tool for tool in tools]


def confirm_first(tool: Tool) -> Tool:
    """*tool*, suspending on an approval before its first run; it runs once approved."""
    inner = tool.execute

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        # The loop re-runs a suspended call only with an approving answer (ok=True);
        # a declined one becomes "declined/expired: <prompt>" without running it.
        if ctx.answer is None:
            return pending(approval_request(tool.name, args))
        return await inner(args, ctx)

    return attrs.evolve(tool, execute=execute)


def approval_request(name: str, args: dict[str, Any]) -> Request:
    """The question for one call: ``prompt`` names the tool and the path; ``data["show"]``
    is the full text the user must see first (the command, the patch)."""
    path = str(args.get("path", ""))
    if name == "bash":
        workdir = args.get("workdir")
        where = f" (in {workdir})" if isinstance(workdir, str) and workdir else ""
        prompt = f"Allow bash to run this command{where}?"
        show = str(args.get("command", ""))
    elif name == "write":
        content = str(args.get("content", ""))
        prompt = f"Allow write to {path}?"
        show = f"write {len(content)} characters to {path}:\n{content}"
    elif name == "edit":
        every = " (every occurrence)" if args.get("replaceAll") is True else ""
        prompt = f"Allow edit of {path}?"
        show = f"in {path}, replace{every}:\n{args.get('oldString', '')}\nwith:\n"
        show += str(args.get("newString", ""))
    else:
        patch = str(args.get("patchText", ""))
        files = ", ".join(dict.fromkeys(m.strip() for m in _PATCH_FILE.findall(patch)))
        prompt = f"Allow apply_patch to change {files or 'files'}?"
        show = patch
    return Request(kind="approval", prompt=prompt, data={"tool": name, "show": show})
