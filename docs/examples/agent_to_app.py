"""From agent to app: a loop's tool call runs a Tesseron action, and a cancel reaches it.

The host (a tiny app with one slow action) and the gateway run in this one process over
a loopback WebSocket. The scripted model calls the action; when its progress reaches
50% the turn is cancelled, and the handler's ``ActionContext`` sees it.
"""

from typing import Any

import trio

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.tesseron import ActionContext, Gateway, TesseronApp

app = TesseronApp("files", "Files")
handler_saw_cancel = trio.Event()


@app.action("sync", "Synchronise the files (slow)")
async def sync(input: Any, ctx: ActionContext) -> str:
    try:
        for step in range(1, 11):
            await trio.sleep(0.05)
            await ctx.progress(percent=step * 10, message=f"{step}/10")
    finally:
        if ctx.is_cancelled():
            handler_saw_cancel.set()
    return "synchronised"


async def generate(request: GenerateRequest) -> InProcessResponse:
    if request.turn == 0:
        return InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name="files__sync")])
    return InProcessResponse(content=f"the sync said: {request.messages[-1]['content']}")


async def main() -> None:
    async with app.listen(manifest_dir=None) as host, Gateway() as gateway:
        session = await gateway.connect(host.url)
        print(f"the gateway connected to the app; its claim code is {session.claim_code}")
        gateway.claim(session.claim_code or "")  # what the user does by typing the code
        async with await create_toolkit(ToolkitOptions(tesseron=gateway)) as toolkit:
            client = create_in_process_client(InProcessOptions(model="m", generate=generate))
            turn_token: Any = None
            async with client.stream("sync my files", toolkit) as events:
                async for event in events:
                    if event["type"] == "tool_call":
                        print(f"the model calls {event['name']}")
                        turn_token = event["cancel"]
                    elif event["type"] == "progress":
                        print(f"progress {event['percent']}% {event['message']}")
                        if event["percent"] >= 50:
                            print("the user presses stop: cancelling the turn")
                            turn_token.cancel("the user pressed stop")
                    elif event["type"] == "done":
                        result = event["result"]
        with trio.fail_after(5):
            await handler_saw_cancel.wait()
        print("the app's handler saw the cancel: ctx.is_cancelled() is True")
    print(f"model: {result.text}")


if __name__ == "__main__":
    trio.run(main)
