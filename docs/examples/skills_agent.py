"""Skills and an HTTP tool: a scripted model loads a skill, then calls a REST endpoint.

A temporary folder holds one skill (``SKILL.md`` plus a template); a loopback HTTP
server answers ``GET /issues/{id}``. The toolkit gets the ``skill`` tool and an
``http_tool``; the model sees the skill catalog in its system prompt, loads the skill,
fetches the issue, and answers.
"""

import json
import tempfile
from pathlib import Path

import h11
import trio

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    http_tool,
)

SKILL = """\
---
name: release-notes
description: Write release notes for an issue tracker entry
---
Fetch the issue with the `issue` tool, then fill in templates/notes.md.
"""

ISSUES = {"42": {"id": 42, "title": "Cancel stops the upload", "state": "closed"}}


async def serve_issues(stream: trio.SocketStream) -> None:
    """A one-request-per-connection HTTP/1.1 server for ``GET /issues/<id>``."""
    conn = h11.Connection(h11.SERVER)
    target = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            target = event.target
        elif isinstance(event, h11.EndOfMessage):
            break
    issue = ISSUES.get(target.decode().rsplit("/", 1)[-1])
    status, body = (200, json.dumps(issue).encode()) if issue else (404, b"no such issue")
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
    await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
    await stream.aclose()


async def serve_and_run(skills_dir: Path) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, serve_issues, 0)
        port = listeners[0].socket.getsockname()[1]
        await agent(skills_dir, f"http://127.0.0.1:{port}")
        nursery.cancel_scope.cancel()


async def agent(skills_dir: Path, base_url: str) -> None:
    issue = http_tool(
        name="issue",
        description="Fetch one issue by id",
        method="GET",
        url=base_url + "/issues/{id}",
        timeout_ms=5000,
    )
    seen_system: list[str] = []

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.turn == 0:
            seen_system.append(req.messages[0]["content"])
            call = InProcessToolCall(name="skill", arguments={"name": "release-notes"})
            return InProcessResponse(tool_calls=[call])
        if req.turn == 1:
            return InProcessResponse(
                tool_calls=[InProcessToolCall(name="issue", arguments={"id": 42})]
            )
        fetched = json.loads(req.messages[-1]["content"])
        return InProcessResponse(content=f"## {fetched['title']} ({fetched['state']})")

    options = ToolkitOptions(
        skills_dir=skills_dir, extra_tools=[issue], builtins=BuiltinsConfig.off()
    )
    async with await create_toolkit(options) as toolkit:
        print("tools:", [t.name for t in toolkit.tools()])
        client = create_in_process_client(
            InProcessOptions(model="scripted", generate=generate, system_prompt="You write docs.")
        )
        result = await client.run("Release notes for issue 42, please.", toolkit)
    print("system prompt:\n" + seen_system[0])
    for record in result.tool_calls:
        print(f"<- {record.name}: {record.output.splitlines()[0]} {record.metadata}")
    print("answer:", result.text)


def main() -> None:
    # The files are written before the event loop starts: no blocking I/O inside it.
    with tempfile.TemporaryDirectory() as tmp:
        skill_dir = Path(tmp) / "skills" / "release-notes"
        (skill_dir / "templates").mkdir(parents=True)
        (skill_dir / "SKILL.md").write_text(SKILL, encoding="utf-8")
        (skill_dir / "templates" / "notes.md").write_text("## {title}\n", encoding="utf-8")
        trio.run(serve_and_run, Path(tmp) / "skills")


if __name__ == "__main__":
    main()
