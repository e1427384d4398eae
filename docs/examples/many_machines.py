"""Running on many machines: one worker halts a run for approval, another answers it.

The two workers are separate processes that share nothing but a PostgreSQL database
(on two machines it is the same: point both at one server). Where the database is:
``python many_machines.py postgresql://user:password@host/db``, or with no argument
the standard ``PG*`` environment variables (``PGHOST``, ``PGUSER``, ``PGPASSWORD``,
``PGDATABASE``...), as for ``psql``.

    python many_machines.py [DSN]                    # runs both workers, then a replay
    python many_machines.py [DSN] --worker halt ID   # worker A: the run halts, is saved
    python many_machines.py [DSN] --worker answer ID REQUEST_ID  # worker B: approves
"""

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import trio

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    BuiltinsConfig,
    Client,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    PostgresConversationStore,
    Request,
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
    """Suspends for approval; runs once approved, in whichever worker answered."""
    if ctx.answer is None:
        return pending(Request(kind="approval", prompt=f"Deploy {args['version']}?"))
    return ToolResult.ok(f"{args['version']} is live (deployed by worker {os.getpid()})")


async def generate(req: GenerateRequest) -> InProcessResponse:
    """A scripted model: "ship v2" deploys v2, then it reports the tool's answer."""
    last = req.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"Done: {last['content']}")
    version = last["content"].split()[-1]
    return InProcessResponse(
        tool_calls=[InProcessToolCall(name="deploy", arguments={"version": version})]
    )


async def agent(store: PostgresConversationStore) -> tuple[Client, Toolkit]:
    """What every worker runs: the same model and tools, on the shared store."""
    tool = Tool("deploy", "Deploy a version", empty_schema(), ToolSource.CUSTOM, deploy)
    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off())
    )
    options = InProcessOptions(model="scripted", generate=generate, store=store)
    return create_in_process_client(options), toolkit


async def worker(dsn: str | None, command: str, args: list[str]) -> None:
    """One worker process: ``halt ID`` or ``answer ID REQUEST_ID``; prints one JSON line."""
    async with PostgresConversationStore(dsn) as store:
        client, toolkit = await agent(store)
        if command == "halt":
            result = await client.ask("ship v2", toolkit, id=args[0])
            asked = result.pending  # None only if the model did not ask (this one does)
            request = {"id": asked.id, "prompt": asked.prompt} if asked else None
            print(json.dumps({"status": result.status, "request": request}))
        else:
            thread, request_id = args
            done = await client.answer(thread, [Answer(request_id, True)], toolkit=toolkit)
            print(json.dumps({"status": done.status, "text": done.text}))


def run_worker(dsn: str | None, *args: str) -> dict[str, Any]:
    """Start one worker process (on another machine, this is another deployment)."""
    command = [sys.executable, __file__, *([dsn] if dsn else []), "--worker", *args]
    done = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:  # the worker's own words, not just its exit status
        raise SystemExit(f"worker {args[0]} failed:\n{done.stderr.strip()}")
    reply: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return reply


def check_database(dsn: str | None) -> None:
    """Fail at once, with the server's reason, when the database cannot be reached
    (the store itself would wait its whole timeout for a connection)."""
    import psycopg

    try:
        psycopg.connect(dsn or "", connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        raise SystemExit(
            f"cannot reach PostgreSQL: {str(exc).strip()}\n"
            "Pass a DSN or set PGHOST/PGPORT/PGUSER/PGPASSWORD/PGDATABASE; no server at "
            "hand? see 'A local PostgreSQL' in docs/many-machines.rst"
        ) from None


async def replay(dsn: str | None, thread: str, request_id: str) -> str:
    """A second approval of the same request, from this process: refused."""
    async with PostgresConversationStore(dsn) as store:
        client, toolkit = await agent(store)
        try:
            await client.answer(thread, [Answer(request_id, True)], toolkit=toolkit)
        except AlreadyAnswered as exc:
            return f"refused ({exc.status})"
    return "ran twice!"


def main(argv: list[str]) -> None:
    dsn = argv[0] if argv and argv[0].startswith("postgres") else None
    rest = argv[1:] if dsn else argv
    if rest[:1] == ["--worker"]:
        trio.run(worker, dsn, rest[1], rest[2:])
        return
    check_database(dsn)
    thread = f"release-{uuid.uuid4().hex[:8]}"
    halted = run_worker(dsn, "halt", thread)
    request = halted["request"] or {"id": "", "prompt": "(nothing)"}
    print(f"worker A: the run halts (status={halted['status']}), asking {request['prompt']!r}")
    answered = run_worker(dsn, "answer", thread, request["id"])
    print(f"worker B: approved; {answered['text']} (status={answered['status']})")
    again = trio.run(replay, dsn, thread, request["id"])
    print(f"the same approval again: {again}")


if __name__ == "__main__":
    main(sys.argv[1:])
