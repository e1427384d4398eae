"""A persona (SPEC §7E): an agent whose home is a folder, with memory and a heartbeat.

Ava's home holds her soul, what she knows about the user and what to do on a heartbeat.
Each run is a session whose soul is composed from the home when it starts. One session:
she saves a fact with the ``memory`` tool (it lands in USER.md). The next session starts
from the home as it is now, so she knows it. Then she runs long-lived with a
heartbeat every 15 minutes for an afternoon: silent (HEARTBEAT_OK) until the 3pm sync
is due. The model is scripted and the clock is Trio's virtual one, so the afternoon
passes in no time.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import trio
import trio.testing

from toolnexus_trio import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.agents import HEARTBEAT_OK, agent_from_dir, start_agent

HOME = {
    "SOUL.md": "You are Ava, a calm, precise personal assistant.",
    "USER.md": "- Name: Muthu\n- Has a daily sync at 15:00",
    "HEARTBEAT.md": "If the daily sync starts within 15 minutes, remind Muthu. "
    "Otherwise reply HEARTBEAT_OK.",
}
START = 13 * 3600  # the afternoon starts at 13:00; the clock counts seconds from there


async def model(request: GenerateRequest) -> InProcessResponse:
    """A scripted model that reads its system prompt (the soul) like a real one would."""
    await trio.lowlevel.checkpoint()
    soul = str(request.messages[0]["content"])
    last = request.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(f"Noted. ({last['content']})")
    prompt = str(last["content"])
    if "I like dark roast" in prompt:
        fact = {"action": "add", "target": "user", "text": "Prefers dark roast"}
        return InProcessResponse(tool_calls=[InProcessToolCall("m1", "memory", fact)])
    if "coffee" in prompt:
        return InProcessResponse("Dark roast." if "dark roast" in soul else "I don't know yet.")
    if "Heartbeat" in prompt:
        now = START + trio.current_time()
        if 14 * 3600 + 45 * 60 <= now < 15 * 3600:
            return InProcessResponse("Your daily sync starts at 15:00.")
        return InProcessResponse(HEARTBEAT_OK)
    return InProcessResponse("?")


def clock_time() -> str:
    seconds = int(START + trio.current_time())
    return f"{seconds // 3600:02}:{seconds // 60 % 60:02}"


async def main(home: Path) -> None:
    for name, text in HOME.items():
        (home / name).write_text(text, encoding="utf-8")

    # Building the agent reads the home: in a worker thread, off the event loop.
    ava = await trio.to_thread.run_sync(partial(agent_from_dir, home, name="ava"))
    print("session 1:", (await ava.run("What coffee do I like?", generate=model)).text)
    print("session 2:", (await ava.run("I like dark roast.", generate=model)).text)
    print("USER.md now ends with:", (home / "USER.md").read_text().splitlines()[-1])
    print("session 3:", (await ava.run("What coffee do I like?", generate=model)).text)

    # Long-lived, a beat every 15 minutes from 13:00 to 16:00; only a beat with something
    # to say (not HEARTBEAT_OK) reaches on_report.
    def on_report(text: str) -> None:
        print(f"[{clock_time()}] Ava: {text}")

    async with start_agent(ava, every_ms=15 * 60_000, on_report=on_report, generate=model) as a:
        await trio.sleep(3 * 3600 + 1)
        print(f"{a.beats} beats, {a.reports} reported")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, Path(tmp), clock=trio.testing.MockClock(autojump_threshold=0))
