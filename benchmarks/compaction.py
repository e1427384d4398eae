"""Scenario 14: context compaction (SPEC §7F), ours (Trio) and toolnexus 0.21.0's (asyncio).

One process measures one side of one case and prints one JSON object on stdout::

    python -m benchmarks.compaction compact ours --runs 30
    python -m benchmarks.compaction noop peer --runs 2000

- ``compact``: one ``before_llm`` call of a fresh compactor on a 2,000-message transcript
  (the compaction fixture's four-message tool group, 500 times) over its budget
  (``max_tokens`` 20,000, ``keep_tail`` 4,000): the estimate, the split, the summary
  (an async function returning a fixed string: no model) and the new transcript.
- ``noop``: the cost of the check on every model call of a transcript under its budget:
  one ``before_llm`` call on a 200-message transcript the hook has seen before (the
  loop calls it before each turn with the same messages plus the new ones).

Both sides run in their own framework (``trio.run`` / ``asyncio.run``) and are driven
through their public API only (``compactor``), with the same transcript and summarizer.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.rows import Config, Row

COMPACT_MESSAGES = 2000
COMPACT_MAX_TOKENS = 20_000
COMPACT_KEEP_TAIL = 4_000
NOOP_MESSAGES = 200
SCENARIO_TEXT = [
    "14. **Compaction** (SPEC §7F): one ``before_llm`` call of a fresh ``compactor`` on a",
    "    2,000-message transcript over its budget (the compaction fixture's tool group",
    "    repeated; an async summarizer that returns a fixed string), and the no-op check",
    "    on a 200-message transcript under budget that the hook has seen before.",
]
"""Scenario 14's description for the performance page."""


def transcript(messages: int) -> list[dict[str, Any]]:
    """A system prompt then the fixture's tool group repeated up to *messages* messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are Ava. SOUL."}]
    i = 0
    while len(out) < messages:
        function = {"name": "lookup", "arguments": "{}"}
        call = {"id": f"c{i}", "type": "function", "function": function}
        out += [
            {"role": "user", "content": f"question {i} " + "pad " * 40},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "data " * 40},
            {"role": "assistant", "content": f"answer {i}"},
        ]
        i += 1
    return out[:messages]


async def summarize(older: list[dict[str, Any]]) -> str:
    return f"summarized {len(older)} messages"


async def _measure(make: Callable[..., Any], case: str, runs: int) -> dict[str, Any]:
    if case == "compact":
        messages = transcript(COMPACT_MESSAGES)
        samples, kept, digest = [], 0, ""
        for _ in range(runs):
            hook = make(
                max_tokens=COMPACT_MAX_TOKENS, keep_tail=COMPACT_KEEP_TAIL, summarize=summarize
            )
            event = {"messages": messages, "tools": [], "model": "m", "turn": 0}
            t0 = time.perf_counter()
            change = await hook(event)
            samples.append((time.perf_counter() - t0) * 1000)
            kept = len(change["messages"])
        digest = hashlib.sha256(json.dumps(change["messages"]).encode()).hexdigest()
        return {"samples": samples, "messages_out": kept, "digest": digest}
    messages = transcript(NOOP_MESSAGES)
    hook = make(max_tokens=10**9, summarize=summarize)
    event = {"messages": messages, "tools": [], "model": "m", "turn": 0}
    t0 = time.perf_counter()
    assert await hook(event) is None
    first_us = (time.perf_counter() - t0) * 1e6
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        assert await hook(event) is None
        samples.append((time.perf_counter() - t0) * 1e6)
    return {"samples": samples, "first_us": first_us}


def ours(case: str, runs: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio import compactor

    result: dict[str, Any] = trio.run(_measure, compactor, case, runs)
    return result


def peer(case: str, runs: int) -> dict[str, Any]:
    from toolnexus.agents import compactor  # toolnexus.estimate_tokens is another one

    return asyncio.run(_measure(compactor, case, runs))


def collect(
    cfg: Config,
    add: Callable[[str, str, dict[str, Any]], None],
    child: Callable[[list[str], float], dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Run scenario 14 (about 20 s, the peer's quadratic split dominates)."""
    rounds = 4 if cfg.agent_rounds > 2 else 2
    for r in range(rounds):
        for side in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            argv = ["-m", "benchmarks.compaction", "compact", side, "--runs", "10"]
            add("compaction_compact", side, child(argv, 300))
            argv = ["-m", "benchmarks.compaction", "noop", side, "--runs", "2000"]
            add("compaction_noop", side, child(argv, 120))
        progress(f"compaction round {r + 1}/{rounds}")


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-14 rows of the report (only for what was run)."""
    from benchmarks.rows import Row, Stats, Target, flat

    out: list[Row] = []
    if "compaction_compact" in raw:
        o, p = raw["compaction_compact"]["ours"], raw["compaction_compact"]["peer"]
        same = len({run["digest"] for run in o + p}) == 1  # byte-identical transcripts out
        out.append(
            Row(
                "14. Compaction of a 2,000-message transcript",
                "one before_llm call that compacts, median",
                "ms",
                Stats.of(flat(o, "samples")),
                Stats.of(flat(p, "samples")),
                "a fresh compactor each call; summarizer: an async function, no model",
                Target("ratio", "<=", 0.5, checks=(("same transcript out", same),)),
                [
                    f"max_tokens {COMPACT_MAX_TOKENS:,}, keep_tail {COMPACT_KEEP_TAIL:,}; "
                    f"messages out: ours {flat(o, 'messages_out')[0]:g}, "
                    f"peer {flat(p, 'messages_out')[0]:g}"
                ],
            )
        )
    if "compaction_noop" in raw:
        o, p = raw["compaction_noop"]["ours"], raw["compaction_noop"]["peer"]
        first_o, first_p = Stats.of(flat(o, "first_us")), Stats.of(flat(p, "first_us"))
        out.append(
            Row(
                "14. Compaction check under budget (200 messages)",
                "one before_llm call (no-op), median",
                "µs",
                Stats.of(flat(o, "samples")),
                Stats.of(flat(p, "samples")),
                "the transcript seen before (as on every turn of a run)",
                Target("ours", "<=", 20.0, unit="µs"),
                [
                    f"the first call on a transcript (nothing remembered yet): ours "
                    f"{first_o.median:.0f} µs, peer {first_p.median:.0f} µs"
                ],
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compaction")
    parser.add_argument("case", choices=["compact", "noop"])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    run = ours if args.side == "ours" else peer
    print(json.dumps(run(args.case, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
