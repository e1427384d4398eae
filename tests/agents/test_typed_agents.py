"""Typed results across agents (issue 33): a sub-agent's output reaches its parent
through the task tool as JSON and as TaskResult.output."""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from toolnexus_trio import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.agents import agent
from toolnexus_trio.agents._snapshot import _result_from, _result_json


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


async def test_a_sub_agents_typed_output_reaches_its_parent_as_json() -> None:
    seen_by_lead: list[str] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        await trio.lowlevel.checkpoint()
        if request.model == "lead":
            tools = [m for m in request.messages if m["role"] == "tool"]
            if not tools:
                call = InProcessToolCall("t1", "task", {"agent": "judge", "prompt": "ok?"})
                return InProcessResponse(tool_calls=[call])
            seen_by_lead.append(str(tools[0]["content"]))
            return InProcessResponse("the judge said yes")
        declared = [t["function"]["name"] for t in request.tools or ()]
        assert declared == ["final_result"]
        arguments: dict[str, Any] = {"ok": True, "reason": "fine"}
        return InProcessResponse(tool_calls=[InProcessToolCall("f", "final_result", arguments)])

    judge = agent("judge", does="judges", model="judge", output_type=Verdict)
    assert judge.definition.output_type is Verdict
    lead = agent("lead", does="delegates", team=[judge], model="lead")
    alone = await judge.run("ok?", generate=generate)
    assert alone.status == "done" and alone.output == Verdict(True, "fine")
    assert json.loads(alone.text) == {"ok": True, "reason": "fine"}
    led = await lead.run("ask the judge", generate=generate)
    assert led.status == "done" and led.output is None
    assert [json.loads(text) for text in seen_by_lead] == [{"ok": True, "reason": "fine"}]
    # A snapshot keeps the output as JSON.
    saved = json.loads(json.dumps(_result_json(alone)))
    restored = _result_from(saved)
    assert restored is not None and restored.output == {"ok": True, "reason": "fine"}
