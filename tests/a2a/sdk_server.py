"""An a2a-sdk 1.3 server (asyncio, starlette on hypercorn's asyncio worker) for the
interop tests: run as a subprocess; prints ``PORT <n>`` once it listens.

One skill, ``echo``: answers ``echo: <task>``; a task starting ``slow`` prints ``STARTED <task>``,
waits until it is cancelled and then prints ``CANCELLED <task>`` (so the test sees the cancel arrive).
"""

from __future__ import annotations

import asyncio
import socket
import sys

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if context.current_task is None:
            assert context.message is not None
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.start_work()
        if text.startswith("slow"):
            print(f"STARTED {text}", flush=True)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                print(f"CANCELLED {text}", flush=True)
                raise
        await updater.add_artifact([Part(text=f"echo: {text}")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="SDK Echo",
        description="an a2a-sdk server",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    app = Starlette(routes=routes)
    config = Config()
    sock.listen()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = None
    print(f"PORT {port}", flush=True)
    await serve(app, config)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    asyncio.run(main())
