"""The agent runtime's spans: a sub-agent's invoke_agent sits under the parent's
``execute_tool task`` span, siblings stay siblings, and an interrupt ends the
interrupted child's open spans with error.type set."""

from __future__ import annotations

from typing import Any

import trio
from helpers import TaskCensus
from opentelemetry.trace import StatusCode
from otel_helpers import attrs_of, global_recorder, parent_of

from toolnexus_trio import ToolContext, define_tool
from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

STUCK = trio.Event()


async def _look(args: dict[str, Any], ctx: ToolContext) -> Any:
    await trio.sleep(1)
    return "looked"


async def _hang(args: dict[str, Any], ctx: ToolContext) -> Any:
    STUCK.set()
    await trio.sleep_forever()


async def _model(request: GenerateRequest) -> InProcessResponse:
    done = [m for m in request.messages if m.get("role") == "tool"]
    if request.model == "m-lead" and not done:
        return InProcessResponse(
            tool_calls=(
                InProcessToolCall("t1", "task", {"agent": "looker", "prompt": "look"}),
                InProcessToolCall("t2", "task", {"agent": "hanger", "prompt": "hang"}),
            )
        )
    if request.model == "m-looker" and not done:
        return InProcessResponse(tool_calls=(InProcessToolCall("l1", "look", {}),))
    if request.model == "m-hanger" and not done:
        return InProcessResponse(tool_calls=(InProcessToolCall("h1", "hang", {}),))
    return InProcessResponse(content=f"{request.model} finished")


async def test_a_sub_agent_tree_with_an_interrupt(autojump_clock: Any) -> None:
    registry = {
        "lead": AgentDef("lead", "leads", "lead", "m-lead", task_targets=["looker", "hanger"]),
        "looker": AgentDef(
            "looker", "looks", "look", "m-looker", tools=[define_tool("look", "", None, _look)]
        ),
        "hanger": AgentDef(
            "hanger", "hangs", "hang", "m-hanger", tools=[define_tool("hang", "", None, _hang)]
        ),
    }
    with global_recorder() as rec, TaskCensus() as census:
        async with open_agent_runtime(registry, generate=_model) as rt:
            lead = rt.spawn(rt.root, "lead")
            assert rt.wake(lead, "go").ok
            await STUCK.wait()
            hanger = next(h for h in lead.children if h.defn and h.defn.name == "hanger")
            rt.interrupt(hanger)
            result = await rt.wait(lead)
        census.assert_no_new_tasks()
    assert result.status == "done"
    spans = rec.spans()
    lead_span = rec.one("invoke_agent lead")
    assert attrs_of(lead_span)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs_of(lead_span)["gen_ai.agent.name"] == "lead"
    assert "error.type" not in attrs_of(lead_span)
    lead_run = next(
        s for s in spans if s.name == "invoke_agent" and parent_of(s) == lead_span.context.span_id
    )
    tasks = rec.named("execute_tool task")
    assert len(tasks) == 2
    assert {parent_of(t) for t in tasks} == {lead_run.context.span_id}  # siblings
    by_call = {attrs_of(t)["gen_ai.tool.call.id"]: t for t in tasks}
    looker = rec.one("invoke_agent looker")
    hanger_span = rec.one("invoke_agent hanger")
    # Each child's agent span is a child of the parent's execute_tool task span.
    assert parent_of(looker) == by_call["t1"].context.span_id
    assert parent_of(hanger_span) == by_call["t2"].context.span_id
    assert {s.context.trace_id for s in spans} == {lead_span.context.trace_id}
    # The looker's own tool under its own run.
    look = rec.one("execute_tool look")
    looker_run = next(s for s in spans if s.context.span_id == parent_of(look))
    assert parent_of(looker_run) == looker.context.span_id
    # The interrupt ended the hanger's open spans, each with error.type.
    hang = rec.one("execute_tool hang")
    assert attrs_of(hang)["error.type"] == "cancelled"
    assert hang.status.status_code is StatusCode.ERROR
    hanger_run = next(s for s in spans if s.context.span_id == parent_of(hang))
    assert attrs_of(hanger_run)["error.type"] == "cancelled"
    assert attrs_of(hanger_span)["error.type"] == "interrupted"
    assert attrs_of(hanger_span)["toolnexus_trio.agent.status"] == "interrupted"
    # Every span ended inside its parent.
    by_id = {s.context.span_id: s for s in spans}
    for s in spans:
        parent = by_id.get(parent_of(s))
        if parent is not None:
            assert parent.start_time <= s.start_time and s.end_time <= parent.end_time, s.name
