"""Interop: our spans exported over OTLP/HTTP to a real collector, Arize Phoenix (PyPI),
and read back from it (issue 34).

Run with ``nox -s interop`` (which makes Phoenix its own virtualenv: it is large and
pins its own dependencies), or by hand with ``TOOLNEXUS_PHOENIX`` set to a ``phoenix``
executable. Starts ``phoenix serve`` on loopback (free ports, a temporary working
directory, its own process group), runs an agent tree with the OpenTelemetry SDK's
OTLP/HTTP exporter pointed at it (a lead agent that hands a task to a sub-agent, which
runs two tools at once), then reads the project's spans back over Phoenix's REST API and
checks the tree: names, kinds, parents, GenAI attributes. Prints one line per check and
``N passed, M failed``; the exit status is non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import trio
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from toolnexus_trio import ClientOptions, ToolContext, define_tool
from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.testing import open_fake_provider

PROJECT = "toolnexus-interop"
results: list[tuple[str, bool]] = []


def check(name: str, ok: bool) -> None:
    results.append((name, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


async def _run_tree(endpoint: str) -> None:
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": PROJECT}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))

    async def look(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(0.01)
        return f"saw {args.get('what', '')}"

    script = [
        {"tool_calls": [{"name": "task", "arguments": {"agent": "looker", "prompt": "look"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"what": "a"}},
                        {"name": "look", "arguments": {"what": "b"}}]},
        {"text": "looked at a and b"},
        {"text": "the looker saw a and b"},
    ]  # fmt: skip
    looker_tools = [define_tool("look", "Look.", None, look)]
    registry = {
        "lead": AgentDef("lead", "leads", "lead", "inherit", task_targets=["looker"]),
        "looker": AgentDef("looker", "looks", "look", "inherit", tools=looker_tools),
    }
    async with open_fake_provider(script) as fake:
        llm = ClientOptions(
            base_url=fake.base_url, style="openai", model="fake-1", api_key="k",
            tracer_provider=provider,
        )  # fmt: skip
        async with open_agent_runtime(registry, llm=llm) as rt:
            lead = rt.spawn(rt.root, "lead")
            rt.wake(lead, "go")
            result = await rt.wait(lead)
    check("the agent tree ran to its answer", result.status == "done")
    provider.shutdown()


def main() -> int:
    phoenix = os.environ.get("TOOLNEXUS_PHOENIX")
    if not phoenix:
        print("TOOLNEXUS_PHOENIX is not set: skipped")
        return 0
    port, grpc = _free_port(), _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PHOENIX_WORKING_DIR": work, "PHOENIX_HOST": "127.0.0.1",
               "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc)}  # fmt: skip
        log = open(os.path.join(work, "phoenix.log"), "w")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [phoenix, "serve"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        with open(log.name) as seen:
                            print(seen.read()[-3000:])
                        check("phoenix started", False)
                        return 1
                    time.sleep(0.5)
            check("phoenix started", True)
            trio.run(_run_tree, f"{base}/v1/traces")
            spans: list[dict[str, Any]] = []
            for _ in range(40):  # ingestion is asynchronous: poll until all are stored
                spans = _get(f"{base}/v1/projects/{PROJECT}/spans?limit=100")["data"]
                if len(spans) >= 9:
                    break
                time.sleep(0.25)
            _check_tree(spans)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    failed = sum(1 for _, ok in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _check_tree(spans: list[dict[str, Any]]) -> None:
    by_id = {s["context"]["span_id"]: s for s in spans}
    named = {}
    for s in spans:
        named.setdefault(s["name"], []).append(s)
    check("one trace", len({s["context"]["trace_id"] for s in spans}) == 1)

    def parent(s: dict[str, Any]) -> dict[str, Any] | None:
        return by_id.get(s["parent_id"]) if s["parent_id"] else None

    lead = named.get("invoke_agent lead", [])
    looker = named.get("invoke_agent looker", [])
    task = named.get("execute_tool task", [])
    looks = named.get("execute_tool look", [])
    chats = named.get("chat fake-1", [])
    counts = (len(lead), len(looker), len(task), len(looks), len(chats))
    check("spans read back: 2 agent turns, 1 task, 2 looks, 4 chats", counts == (1, 1, 1, 2, 4))
    if not (lead and looker and task and len(looks) == 2):
        return
    check("the sub-agent's turn is a child of the task tool call", parent(looker[0]) is task[0])
    look_parents = {s["parent_id"] for s in looks}
    check("the two parallel tool calls are siblings", len(look_parents) == 1)
    looker_run = by_id.get(looks[0]["parent_id"])
    check("...under the looker's run", looker_run is not None and parent(looker_run) is looker[0])
    a = chats[0]["attributes"]
    check("chat attributes: operation, provider, model, usage",
          a.get("gen_ai.operation.name") == "chat" and a.get("gen_ai.provider.name") == "openai"
          and a.get("gen_ai.request.model") == "fake-1"
          and a.get("gen_ai.usage.input_tokens") == 10)  # fmt: skip
    t = task[0]["attributes"]
    check("execute_tool attributes: name, call id, type",
          t.get("gen_ai.tool.name") == "task" and bool(t.get("gen_ai.tool.call.id"))
          and t.get("gen_ai.tool.type") == "function")  # fmt: skip
    check("agent attributes", lead[0]["attributes"].get("gen_ai.agent.name") == "lead")


if __name__ == "__main__":
    sys.exit(main())
