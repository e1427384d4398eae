"""Helpers for the A2A tests: a scripted model that answers a task, and a served agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from toolnexus_trio import (
    InProcessOptions,
    InProcessResponse,
    SkillDef,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, TaskInfo


@attrs.define
class Model:
    """Echoes the task (``echo: <task>``); a task starting ``slow`` waits until cancelled,
    one starting ``boom`` fails."""

    started: trio.Event = attrs.field(factory=trio.Event)
    cancelled: list[str] = attrs.field(factory=list)
    seen: list[str] = attrs.field(factory=list)

    async def generate(self, request: Any) -> InProcessResponse:
        text = str(request.messages[-1]["content"])
        self.seen.append(text)
        if text.startswith("slow"):
            self.started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled.append(text)
                raise
        if text.startswith("boom"):
            raise RuntimeError("the model broke")
        return InProcessResponse(content=f"echo: {text}")


SKILLS = [
    SkillDef(name="echo", content="Echo the task.", description="Echoes a task back"),
    SkillDef(name="summarize", content="Summarize.", description="Summarizes text"),
]


@asynccontextmanager
async def served_agent(
    config: A2AServeConfig | None = None, *, model: Model | None = None
) -> AsyncIterator[tuple[Any, Model, list[TaskInfo], Toolkit]]:
    """A toolkit with two skills served as an A2A agent on loopback."""
    model = model or Model()
    ended: list[TaskInfo] = []
    client = create_in_process_client(InProcessOptions(model="scripted", generate=model.generate))
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    serving = toolkit.serve(client=client, a2a=config or A2AServeConfig(), on_task=ended.append)
    async with toolkit, serving as served:
        yield served, model, ended, toolkit
