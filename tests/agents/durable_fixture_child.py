"""A child process for test_durable_tree_processes.py: one phase of the
``subagent-durable-resume`` fixture on a SQLite file.

    durable_fixture_child.py DB phase1
    durable_fixture_child.py DB phase2 REQUEST_ID

``phase1`` runs the fixture's entry until the root comes back ``pending``; ``phase2``
opens a brand-new runtime on the file and resumes with the fixture's answer. The last
stdout line is a JSON summary: status, the request, every handle's state, transitions
and tokens, the runtime trace and how often each fixture tool ran in this process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio
from agent_rig import ScriptedModel, Tools, load, registry_of

from toolnexus_trio import Answer, SqliteConversationStore
from toolnexus_trio.agents import open_agent_runtime


async def main(db: str, phase: str, *rest: str) -> dict[str, Any]:
    fixture = load("subagent-durable-resume")
    tools = Tools()
    model = ScriptedModel(fixture["mockLLM"], call_ms=1)
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(registry_of(fixture, tools), generate=model, store=store) as rt,
    ):
        if phase == "phase1":
            result = await rt.run(fixture["run"]["entry"], fixture["run"]["prompt"])
        else:
            ok = fixture["resume"]["answer"]["ok"]
            result = await rt.resume(Answer(rest[0], ok))
        handles = {
            h.id: {"state": h.state, "transitions": list(h.transitions), "tokens": h.tokens}
            for h in rt.list()
            if h.id != "root"
        }
        return {
            "status": result.status,
            "request": None if result.pending is None else result.pending.to_json(),
            "handles": handles,
            "trace": list(rt.trace),
            "runs": tools.runs,
        }


if __name__ == "__main__":
    print(json.dumps(trio.run(main, *sys.argv[1:])), flush=True)
