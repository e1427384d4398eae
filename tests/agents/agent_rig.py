"""The fixture rig: a scripted model and the registry/tools of a toolnexus agent fixture.

The fixtures (``fixtures/*/fixture.json``, MIT, see ``fixtures/NOTICE.md``) describe a
mock LLM as per-model scripts; :class:`ScriptedModel` is a ``generate`` that plays
them. Each call takes 10 ms of (virtual) time, so overlapping calls are observable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import trio

from toolnexus_trio import Answer, Request, ToolContext, define_tool, pending
from toolnexus_trio.agents import AgentDef, Budget
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

FIXTURES = Path(__file__).parent / "fixtures"
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def load(name: str) -> dict[str, Any]:
    """The fixture *name*, with its ``$ref`` s resolved."""
    path = FIXTURES / name / "fixture.json"
    return _resolve(json.loads(path.read_text(encoding="utf-8")), path.parent)


def _resolve(node: Any, base: Path) -> Any:
    if isinstance(node, dict):
        if set(node) == {"$ref"}:
            file, _, pointer = node["$ref"].partition("#")
            target = (base / file).resolve()
            doc: Any = json.loads(target.read_text(encoding="utf-8"))
            for part in filter(None, pointer.split("/")):
                doc = doc[part]
            return _resolve(doc, target.parent)
        return {k: _resolve(v, base) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, base) for v in node]
    return node


def snake(name: str) -> str:
    """``maxTokens`` → ``max_tokens``."""
    return _CAMEL.sub("_", name).lower()


def budget_of(data: dict[str, Any] | None) -> Budget | None:
    """A :class:`Budget` from a fixture's camelCase budget object."""
    if data is None:
        return None
    return Budget(**{snake(k): v for k, v in data.items()})


def _tool_msgs(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]


def _matches(when: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    tools = _tool_msgs(messages)
    if when.get("always"):
        return True
    if "whenToolMsgs" in when:
        rule = when["whenToolMsgs"]
        if rule == 0 and tools:
            return False
        if isinstance(rule, str) and rule.startswith(">=") and len(tools) < int(rule[2:]):
            return False
    if "whenNoToolMsgContains" in when and any(when["whenNoToolMsgContains"] in t for t in tools):
        return False
    needed = when.get("whenToolMsgContains")
    return needed is None or any(needed in t for t in tools)


def _render(text: str, messages: list[dict[str, Any]]) -> str:
    tools = _tool_msgs(messages)
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    numbered = len(re.findall(r"^\d+\. ", users[-1], re.M)) if users else 0
    fills = {
        "<join all tool msg contents with ' + '>": " + ".join(tools),
        "<first tool msg content>": tools[0] if tools else "",
        "<last tool msg content>": tools[-1] if tools else "",
        "<count of numbered inbox items in last user msg>": str(numbered),
    }
    for key, value in fills.items():
        text = text.replace(key, value)
    return text


class ScriptedModel:
    """A ``generate`` playing a fixture's ``mockLLM`` scripts (keyed by model name)."""

    def __init__(self, mock: dict[str, Any], call_ms: float = 10) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = mock["scripts"]
        self.usage = dict(mock["usagePerCall"])
        self.call_ms = call_ms
        self.in_flight = 0
        self.peak = 0
        self.calls: list[GenerateRequest] = []
        self.started = 0
        self.release = trio.Event()
        self.cancelled = 0

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        # A copy: the loop keeps appending to the live transcript list.
        self.calls.append(attrs.evolve(request, messages=list(request.messages)))
        self.started += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await trio.sleep(self.call_ms / 1000)
            messages = list(request.messages)
            script = self.scripts[request.model]
            entry = next(e for e in script if _matches(e, messages))
            if entry.get("blocksUntil"):
                await self.release.wait()
        except trio.Cancelled:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        calls = tuple(
            InProcessToolCall(id=f"call_{i}", name=c["name"], arguments=c["args"])
            for i, c in enumerate(entry.get("toolCalls", ()))
        )
        return InProcessResponse(
            content=_render(entry.get("text", ""), messages), tool_calls=calls, usage=self.usage
        )


class Tools:
    """The fixture's tools, counting their executions."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def make(self, name: str, spec: dict[str, Any]) -> Any:
        schema = spec.get("inputSchema")

        async def lookup(args: dict[str, Any], ctx: ToolContext) -> Any:
            self.runs[name] = self.runs.get(name, 0) + 1
            return f"data({args.get('q', '')})"

        async def check_secret(args: dict[str, Any], ctx: ToolContext) -> Any:
            self.runs[name] = self.runs.get(name, 0) + 1
            if ctx.answer is None:
                return pending(Request(kind="approval", prompt="approve secret access?"))
            return "secret-token" if ctx.answer.ok else "denied"

        fn = {"lookup": lookup, "check_secret": check_secret}[name]
        return define_tool(name, f"fixture tool {name}", schema, fn)


async def auto_approve(request: Request) -> Answer:
    """The fixtures' ``waitFor`` behaviour: approve whatever is asked."""
    auto_approve.asked.append(request)  # type: ignore[attr-defined]
    return Answer(request.id, True)


def registry_of(fixture: dict[str, Any], tools: Tools, **overrides: Any) -> dict[str, AgentDef]:
    """The fixture's registry as :class:`AgentDef` s (``registryOverride`` applied)."""
    specs = {k: dict(v) for k, v in fixture["registry"].items()}
    for name, extra in overrides.items():
        specs[name].update(extra)
    made: dict[str, AgentDef] = {}
    tool_specs = fixture.get("tools", {})
    for name, spec in sorted(specs.items()):
        wait_for = auto_approve if "waitFor" in spec else None
        made[name] = AgentDef(
            name=name,
            description=spec["does"],
            system_prompt=f"You are {name}.",
            model=spec.get("model", "m"),
            budget=budget_of(spec.get("budget")),
            tools=[tools.make(t, tool_specs[t]) for t in spec.get("tools", ())] or None,
            wait_for=wait_for,
            task_targets=spec.get("team"),
        )
    return made
