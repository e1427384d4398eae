"""Make docs/_static/trace-tree.png: a real sub-agent run, traced, drawn as a waterfall.

Runs a lead agent of the agent runtime that starts two sub-agents in parallel with the
``task`` tool (one looks something up with a tool, one hangs and is interrupted) under
the OpenTelemetry SDK, then either

- ``--phoenix=http://127.0.0.1:PORT`` (how the picture in the docs was made): exports the
  spans over OTLP/HTTP to a running Arize Phoenix (``phoenix serve``, see
  ``interop/run_otlp_phoenix.py``), and screenshots Phoenix's page of that trace with
  headless Chromium; or
- without it: writes the spans of the SDK's in-memory exporter as an HTML waterfall page
  (one row per span, indented under its parent, the bar at its real start and end; a
  pure function of the spans, only the durations change between runs) and screenshots
  that (``--html-only`` prints the page instead)::

    PYTHONPATH=$PWD python docs/_tools/trace_page.py [--phoenix=URL | --html-only]
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import trio
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from toolnexus_trio import ToolContext, define_tool
from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

PROJECT = "toolnexus-docs"  # the Phoenix project the spans go to
OUT = Path(__file__).resolve().parent.parent / "_static" / "trace-tree.png"
STUCK = trio.Event()

# The attributes shown beside a span's name, in this order, when it has them.
SHOWN = (
    "gen_ai.agent.name",
    "gen_ai.request.model",
    "gen_ai.tool.call.id",
    "gen_ai.response.finish_reasons",
    "toolnexus_trio.agent.status",
    "toolnexus_trio.run.status",
    "error.type",
)


async def _search(args: dict[str, Any], ctx: ToolContext) -> Any:
    await trio.sleep(0.25)
    return "three sources found"


async def _watch(args: dict[str, Any], ctx: ToolContext) -> Any:
    STUCK.set()
    await trio.sleep_forever()


async def _model(request: GenerateRequest) -> InProcessResponse:
    await trio.sleep(0.03)  # a model takes some time
    done = [m for m in request.messages if m.get("role") == "tool"]
    if request.model == "m-lead" and not done:
        return InProcessResponse(
            tool_calls=(
                InProcessToolCall("call_1", "task", {"agent": "researcher", "prompt": "find"}),
                InProcessToolCall("call_2", "task", {"agent": "watcher", "prompt": "watch"}),
            )
        )
    if request.model == "m-researcher" and not done:
        return InProcessResponse(tool_calls=(InProcessToolCall("call_3", "search", {}),))
    if request.model == "m-watcher" and not done:
        return InProcessResponse(tool_calls=(InProcessToolCall("call_4", "watch", {}),))
    return InProcessResponse(content=f"{request.model} finished")


async def _run() -> None:
    registry = {
        "lead": AgentDef("lead", "leads", "lead", "m-lead", task_targets=["researcher", "watcher"]),
        "researcher": AgentDef(
            "researcher",
            "searches",
            "search",
            "m-researcher",
            tools=[define_tool("search", "Search the notes.", None, _search)],
        ),
        "watcher": AgentDef(
            "watcher",
            "watches",
            "watch",
            "m-watcher",
            tools=[define_tool("watch", "Watch a queue.", None, _watch)],
        ),
    }
    async with open_agent_runtime(registry, generate=_model) as rt:
        lead = rt.spawn(rt.root, "lead")
        assert rt.wake(lead, "go").ok
        await STUCK.wait()
        await trio.sleep(0.4)
        watcher = next(h for h in lead.children if h.defn and h.defn.name == "watcher")
        rt.interrupt(watcher)
        await rt.wait(lead)


def record(otlp: str | None = None) -> list[ReadableSpan]:
    """Run the sub-agent run under a global SDK provider; its finished spans (also sent
    over OTLP/HTTP to *otlp*, a collector's ``/v1/traces``, when given)."""
    exporter = InMemorySpanExporter()
    resource = Resource.create({"openinference.project.name": PROJECT})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp)))
    trace.set_tracer_provider(provider)
    trio.run(_run)
    return list(exporter.get_finished_spans())


def _attrs(span: ReadableSpan) -> str:
    attrs = dict(span.attributes or {})
    parts = []
    for key in SHOWN:
        if key in attrs:
            value = attrs[key]
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            parts.append(f"{key}={text}")
    return "  ".join(parts)


def _order(span: ReadableSpan) -> tuple[int, str, str]:
    call_id = str(dict(span.attributes or {}).get("gen_ai.tool.call.id", ""))
    return ((span.start_time or 0) // 20_000_000, call_id, span.name)


def page(spans: list[ReadableSpan]) -> str:
    """The HTML waterfall of *spans* (one trace)."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    kids: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None else None
        kids.setdefault(parent if parent in by_id else None, []).append(s)
    for row in kids.values():
        # Parallel siblings start within a few ms of each other: order them by their
        # tool call id, so that the page does not depend on which task ran first.
        row.sort(key=_order)
    start = min(s.start_time or 0 for s in spans)
    end = max(s.end_time or 0 for s in spans)
    width = max(end - start, 1)
    rows: list[str] = []

    def walk(span: ReadableSpan, depth: int) -> None:
        s0 = (span.start_time or 0) - start
        s1 = (span.end_time or 0) - start
        left = 100 * s0 / width
        bar = max(100 * (s1 - s0) / width, 0.3)
        error = span.status.status_code is trace.StatusCode.ERROR
        kind = span.kind.name
        rows.append(
            f'<tr class="{"err" if error else ""}">'
            f'<td class="name" style="padding-left:{8 + 18 * depth}px">'
            f"{html.escape(span.name)} <span class=kind>{kind}</span></td>"
            f'<td class="bar"><div style="margin-left:{left:.2f}%;width:{bar:.2f}%"></div></td>'
            f'<td class="ms">{(s1 - s0) / 1e6:.0f} ms</td>'
            f'<td class="attrs">{html.escape(_attrs(span))}</td></tr>'
        )
        assert span.context is not None
        for child in kids.get(span.context.span_id, []):
            walk(child, depth + 1)

    for root in kids.get(None, []):
        walk(root, 0)
    trace_id = format(spans[0].context.trace_id, "032x") if spans[0].context else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ font: 13px/1.35 "DejaVu Sans", sans-serif; margin: 14px; color: #222; }}
h1 {{ font-size: 15px; margin: 0 0 8px; }}
table {{ border-collapse: collapse; width: 100%; }}
td {{ padding: 3px 6px; border-bottom: 1px solid #eee; white-space: nowrap; }}
td.name {{ width: 1%; font-family: "DejaVu Sans Mono", monospace; }}
.kind {{ color: #888; font-size: 11px; }}
td.bar {{ width: 34%; }}
td.bar div {{ height: 12px; background: #4a7bd0; border-radius: 2px; }}
tr.err td.bar div {{ background: #d0504a; }}
tr.err td.name {{ color: #b02a24; }}
td.ms {{ width: 1%; text-align: right; color: #555; }}
td.attrs {{ font-family: "DejaVu Sans Mono", monospace; font-size: 11px; color: #555; }}
</style></head><body>
<h1>trace {trace_id}: {len(spans)} spans of one sub-agent run (red: ended with an error)</h1>
<table>{"".join(rows)}</table></body></html>
"""


def _screenshot(url: str, width: int, height: int, budget_ms: str | None) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("headless Chromium is needed for the screenshot")
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--hide-scrollbars",
            *([f"--virtual-time-budget={budget_ms}"] if budget_ms else []),
            f"--screenshot={OUT}",
            f"--window-size={width},{height}",
            url,
        ],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )


def main() -> None:
    """Record, write the page, screenshot it."""
    phoenix = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--phoenix=")), None)
    spans = record(f"{phoenix}/v1/traces" if phoenix else None)
    if phoenix is not None:
        trace_id = format(spans[0].context.trace_id, "032x") if spans[0].context else ""
        with urllib.request.urlopen(f"{phoenix}/v1/projects", timeout=10) as response:
            projects = json.loads(response.read())["data"]
        project = next(p["id"] for p in projects if p["name"] == PROJECT)
        # Phoenix's page is a JavaScript app: the virtual time budget lets it render.
        _screenshot(f"{phoenix}/projects/{project}/traces/{trace_id}", 1500, 1010, "15000")
        print(f"wrote {OUT} (Phoenix's page of trace {trace_id})")
        return
    text = page(spans)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.html"
        path.write_text(text, encoding="utf-8")
        if "--html-only" in sys.argv:
            print(text)
            return
        _screenshot(path.as_uri(), 1400, 80 + 25 * len(spans), None)
    print(f"wrote {OUT} ({len(spans)} spans)")


if __name__ == "__main__":
    main()
