"""Durable approvals: a run that waits for a human survives the process, and the
approval is used exactly once.

``halt`` and ``approve`` below share nothing but the SQLite file: run them in two
processes, hours apart, and it works the same (here they run one after the other, and
the second one's client is brand new). The end shows the store-less path too:
``RunResult.to_json`` / ``from_json`` with ``resume``.
"""

import json
import tempfile
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    BuiltinsConfig,
    Client,
    ConversationStore,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    RunResult,
    SqliteConversationStore,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
    pending,
)


async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Suspends for approval; runs once approved (``ctx.answer`` is the approval)."""
    if ctx.answer is None:
        return pending(Request(kind="approval", prompt=f"Deploy {args['version']}?"))
    print(f"deploy: {args['version']} is live (it runs once, after the approval)")
    return ToolResult.ok(f"{args['version']} is live")


async def generate(req: GenerateRequest) -> InProcessResponse:
    """A scripted model: "ship v2" deploys v2, then it reports the tool's answer."""
    last = req.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"Done: {last['content']}")
    version = last["content"].split()[-1]
    return InProcessResponse(
        tool_calls=[InProcessToolCall(name="deploy", arguments={"version": version})]
    )


async def make_toolkit() -> Toolkit:
    tool = Tool("deploy", "Deploy a version", empty_schema(), ToolSource.CUSTOM, deploy)
    return await create_toolkit(ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off()))


def make_client(store: ConversationStore | None = None) -> Client:
    return create_in_process_client(InProcessOptions(model="m", generate=generate, store=store))


async def halt(db: Path) -> str:
    """Process A: the agent asks; the run halts pending and is saved. Returns the request id
    (in a real host: send the request to a person, by mail, chat or a web page)."""
    async with SqliteConversationStore(db) as store, await make_toolkit() as toolkit:
        result = await make_client(store).ask("ship v2", toolkit, id="release-42")
    if result.pending is None:  # the script above always asks; a real model might not
        raise RuntimeError(f"the run ended {result.status}, with nothing to approve")
    print(f"halted and saved as release-42, asking: {result.pending.prompt}")
    return result.pending.id


async def approve(db: Path, request_id: str) -> None:
    """Process B: a fresh client on the same file answers; the run goes on and is saved."""
    async with SqliteConversationStore(db) as store, await make_toolkit() as toolkit:
        client = make_client(store)
        done = await client.answer("release-42", [Answer(request_id, True)], toolkit=toolkit)
        print(f"approved by a fresh client; the model says: {done.text}")
        try:  # the same approval again (a retried webhook, a double click)
            await client.answer("release-42", [Answer(request_id, True)], toolkit=toolkit)
        except AlreadyAnswered as exc:
            print(f"the same approval again is refused: {exc}")


async def store_less() -> None:
    """Without a store: keep the JSON yourself, resume in a fresh client with the toolkit."""
    async with await make_toolkit() as toolkit:
        halted = await make_client().run("ship v3", toolkit)
        text = json.dumps(halted.to_json())  # a file, a queue, a database column...
        print(f"without a store: halted, kept as {len(text)} characters of JSON")
        restored = RunResult.from_json(json.loads(text))
        answers = [Answer(call.request.id, True) for call in restored.suspended]
        done = await make_client().resume(restored, answers, toolkit=toolkit)
    print(f"resumed from the JSON; the model says: {done.text}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "approvals.db"
        request_id = await halt(db)
        await approve(db, request_id)
    await store_less()


if __name__ == "__main__":
    trio.run(main)
