"""Context compaction: a long conversation stays under its budget.

A ``compactor`` is a ``before_llm`` hook: before each model call it estimates the
transcript, and over ``max_tokens`` it replaces the older part with one summary
message, keeping the system prompt and a recent tail that starts at a user turn. The
summary here comes from the model itself, through a second client with no hooks and
no tools (a summarizer that may call tools could answer with a tool call instead).
"""

import trio

from toolnexus_trio import (
    GenerateRequest,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    compactor,
    create_in_process_client,
    estimate_tokens,
)


async def toy_model(req: GenerateRequest) -> InProcessResponse:
    last = req.messages[-1]["content"]
    if last.startswith("Summarize"):
        lines = last.count("\n")
        return InProcessResponse(content=f"(a summary of {lines} earlier messages)")
    return InProcessResponse(content=f"Noted: {last}")


async def main() -> None:
    # The summarizer: the same model, no hooks, and run() without a toolkit (no tools).
    summarizer = create_in_process_client(InProcessOptions(model="toy", generate=toy_model))

    async def summarize(older: list[dict]) -> str:
        text = "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in older)
        result = await summarizer.run("Summarize this conversation:\n" + text)
        return result.text

    hook = compactor(max_tokens=400, summarize=summarize)
    client = create_in_process_client(
        InProcessOptions(
            model="toy",
            generate=toy_model,
            system_prompt="You are Ava.",
            hooks=Hooks(before_llm=hook),
        )
    )
    for i in range(20):
        await client.ask(f"fact {i}: " + "something worth remembering " * 3, id="chat")
    messages = await client.store.get("chat") or []
    print(f"after 20 turns the thread holds {len(messages)} messages,")
    print(f"  about {estimate_tokens(messages)} tokens (the budget: 400, plus the last turn):")
    for m in messages[:3]:
        print(f"  {m['role']}: {m['content']!r}")
    print("  ...")


if __name__ == "__main__":
    trio.run(main)
