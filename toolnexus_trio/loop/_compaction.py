"""Context compaction (SPEC §7F): a ``before_llm`` hook that keeps a transcript under budget.

:func:`compactor` returns the hook; :func:`estimate_tokens` is its default estimator.
The hook is a pure ``messages -> messages`` rewrite riding the loop's existing seam (a
``before_llm`` that returns ``{"messages": ...}`` replaces the working transcript), so it
adds no loop behaviour: without a compactor a run is byte-identical, and at or below the
budget the hook returns nothing, which leaves the transcript untouched.

The split rule holds in both wire dialects without being told which one it reads: the
retained tail starts at a ``user`` message that carries no tool result. Under the OpenAI
shape a tool result is a ``tool`` message, so every ``user`` message qualifies; under the
Anthropic shape a tool result is a ``user`` message whose content holds ``tool_result``
blocks, and that message is part of its tool group, never a place to cut.
"""

from __future__ import annotations

import inspect
import json
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import trio

from .._content import estimate_tokens as part_tokens
from .._content import is_part_dict, view

Message = dict[str, Any]

SUMMARY_PREFIX: Final = "[Summary of earlier conversation]\n"
"""The summary system message is this followed by what ``summarize`` returned."""

FLUSH_REMINDER: Final = (
    "The earlier part of this conversation has just been summarized and its details are "
    "gone from your context. Before you go on, save any durable facts, decisions and user "
    "preferences you still need with the memory tool."
)
"""The system reminder ``flush_to_memory=True`` adds between the summary and the tail."""

Summarize = Callable[[list[Message]], str | Awaitable[str]]
CountTokens = Callable[[Sequence[Message]], int]


# Compact JSON as JSON.stringify writes it (the SPEC's reference), characters not bytes;
# a value JSON cannot hold is counted by its str. One encoder: json.dumps with options
# builds a new one per call, which costs as much as encoding a short message.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def _message_tokens(message: Any) -> int:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list) and any(map(is_part_dict, content)):
        # A media part counts by its bytes (SPEC §1B), not its base64 as text: a 1 MB
        # image is ~1,400 tokens, not 350,000.
        rest = {**message, "content": [b for b in content if not is_part_dict(b)]}
        parts = sum(part_tokens(view(b)) for b in content if is_part_dict(b))
        return (len(_encode(rest)) + 3) // 4 + parts
    return (len(_encode(message)) + 3) // 4  # ceil(len / 4) without floats


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The default token estimate: ``ceil(len(JSON of the message) / 4)`` summed; a
    content part in a message counts ``max(85, bytes // 750)`` instead of its base64.

    An estimator, not a tokenizer (SPEC §7F): pass ``count_tokens`` to :func:`compactor`
    for an exact count. The JSON is compact (no spaces) and non-ASCII characters count
    once each.
    """
    return sum(map(_message_tokens, messages))


class _Counts:
    """The default estimate, remembered per message of the last transcript seen.

    The loop appends to its transcript between turns and never edits a message in place
    (it replaces one with a new dict), so a message that is the *same object* as before
    has the same count: only new messages are serialized, and the no-op check costs one
    identity comparison per message. Only the last transcript is kept (memory bounded by
    it); another transcript is counted afresh.
    """

    def __init__(self) -> None:
        self._seen: list[Any] = []
        self._counts: list[int] = []
        self._total = 0

    def update(self, messages: Sequence[Message]) -> int:
        seen, counts = self._seen, self._counts
        known = len(seen)
        if len(messages) < known or not all(map(operator.is_, messages, seen)):
            same = 0
            for mine, theirs in zip(messages, seen, strict=False):
                if mine is not theirs:
                    break
                same += 1
            del seen[same:], counts[same:]
            self._total = sum(counts)
            known = same
        for message in messages[known:]:
            count = _message_tokens(message)
            seen.append(message)
            counts.append(count)
            self._total += count
        return self._total

    def per_message(self) -> list[int]:
        """The counts of the transcript of the last :meth:`update`."""
        return self._counts


def _is_boundary(message: Any) -> bool:
    """A ``user`` message carrying no tool result: where a retained tail may start."""
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                return False
    return True


def _calls_tools(message: Any) -> bool:
    """An assistant message that calls a tool (either shape): a tool group starts here."""
    if message.get("tool_calls"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") == "tool_use" for block in content
    )


def _split(
    body: Sequence[Message], keep_tail: int, kept_tokens: Callable[[int | None, int], int]
) -> tuple[int | None, int]:
    """What to keep of *body*: ``(anchor, start)``, ``body[anchor]`` (unless ``None``)
    followed by ``body[start:]``; the rest is summarized.

    1. The largest suffix starting at a boundary (not the body's first message: it
       would leave nothing to summarize) within *keep_tail*, as in toolnexus 0.21.
    2. Else the most recent boundary (the anchor: the user turn the model is working
       on, a one-prompt run's prompt) followed by the largest suffix within *keep_tail*
       that starts at an assistant message after it and holds its latest tool group; if
       none fits, the anchor and that latest tool group (safety over size). A provider
       accepts it: the first message is a user turn, and a tool result is never cut
       from its call (results follow their assistant message). Summarizing the whole
       body instead left a run with no user turn, which the Anthropic API refuses.
    3. No boundary at all: no user turn to keep; the whole body (an empty tail).

    *kept_tokens(anchor, start)* is the estimate of what would be kept.
    """
    boundaries = [i for i in range(len(body)) if _is_boundary(body[i])]
    fit: int | None = None
    # Walk back from the most recent boundary while the tail still fits: a tail only
    # grows going back, so the last one that fits is the largest.
    for i in reversed(boundaries):
        if i == 0 or kept_tokens(None, i) > keep_tail:
            break
        fit = i
    if fit is not None:
        return None, fit
    if not boundaries:
        return None, len(body)
    anchor = boundaries[-1]
    cuts = [j for j in range(anchor + 1, len(body)) if _is_assistant(body[j])]
    groups = [j for j in cuts if _calls_tools(body[j])]
    if groups:  # never past the latest tool group: the model needs its latest results
        cuts = [j for j in cuts if j <= groups[-1]]
    start = cuts[-1] if cuts else anchor + 1
    for j in reversed(cuts[:-1]):
        if kept_tokens(anchor, j) > keep_tail:
            break
        start = j
    if start == anchor + 1:
        return None, anchor  # the whole turn: a plain suffix
    return anchor, start


async def _summary(summarize: Summarize, older: list[Message]) -> str:
    if inspect.iscoroutinefunction(summarize):
        out: Any = await summarize(older)
    else:
        # A plain function may block (an HTTP call): a worker thread, as for a plain
        # generate. A cancel returns at once and drops its answer, so it changes nothing.
        out = await trio.to_thread.run_sync(summarize, older, abandon_on_cancel=True)
        if inspect.isawaitable(out):
            out = await out
    if not isinstance(out, str):
        raise TypeError(f"summarize must return a str, not {type(out).__name__}")
    return out


def compactor(
    *,
    max_tokens: int,
    summarize: Summarize,
    keep_tail: int | None = None,
    count_tokens: CountTokens | None = None,
    flush_to_memory: bool = False,
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]:
    """A ``before_llm`` hook (SPEC §7F) that summarizes the older transcript over budget.

    Hand it to :class:`~toolnexus_trio.Hooks` (``Hooks(before_llm=compactor(...))``).
    Before each model call it estimates the transcript with *count_tokens* (default
    :func:`estimate_tokens`). At or below *max_tokens* it returns ``None``: the
    transcript is untouched, byte-identical to no compactor. Above, it returns
    ``{"messages": [leading system message (the same object), {"role": "system",
    "content": "[Summary of earlier conversation]\\n" + summary}, (the flush reminder),
    *tail]}``, which replaces the run's transcript from then on.

    The tail keeps the most recent messages: it starts at a ``user`` message that
    carries no tool result (so no tool result is ever cut off from the call it
    answers, in the OpenAI or the Anthropic message shape), the largest such tail
    within *keep_tail* tokens (default ``max_tokens // 2``). If none fits (a one-prompt
    run: its prompt is the only such message), the tail is the most recent such message
    followed by the largest run of recent messages within *keep_tail* that starts at an
    assistant message, or else by its latest tool group: the request after a compaction
    always starts with a user turn and keeps the latest tool call with its results. Only
    a transcript with no such message at all is summarized whole (an empty tail). When
    nothing older is left to summarize the hook returns ``None``.

    *summarize* receives the older messages (everything between the leading system
    message and the tail, in order, without the kept user turn) and returns the summary
    text; it may be sync (run in a worker thread) or async. It gets messages only: an
    LLM summarizer should call its model with **no tools**, or the model may answer with
    a tool call instead of a summary.
    If the summarizer is cancelled (the run's token, the run timeout), the transcript
    stays as it was; if it raises, the run fails with :class:`~toolnexus_trio.HookError`.

    *flush_to_memory* adds a system reminder to save durable facts with the memory tool
    before the tail. The hook keeps the default estimate of the last transcript it saw,
    so a growing transcript costs only its new messages; messages are assumed not to be
    edited in place (the loop never does; it replaces them).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
    tail_budget = max_tokens // 2 if keep_tail is None else keep_tail
    if tail_budget < 0:
        raise ValueError(f"keep_tail must be >= 0, not {keep_tail}")
    counts = _Counts() if count_tokens is None else None

    async def before_llm(event: dict[str, Any]) -> dict[str, Any] | None:
        messages: Sequence[Message] = event["messages"]
        if counts is not None:
            total = counts.update(messages)
        else:
            assert count_tokens is not None
            total = count_tokens(messages)
        if total <= max_tokens:
            return None
        lead = 1 if messages and _is_system(messages[0]) else 0
        body = messages[lead:]
        if counts is not None:
            # Suffix sums of the remembered counts: no message is serialized twice.
            per = counts.per_message()[lead:]
            suffix = [0] * (len(per) + 1)
            for i in range(len(per) - 1, -1, -1):
                suffix[i] = suffix[i + 1] + per[i]

            def kept_tokens(anchor: int | None, start: int) -> int:
                return suffix[start] + (0 if anchor is None else per[anchor])
        else:

            def kept_tokens(anchor: int | None, start: int) -> int:
                assert count_tokens is not None
                head = [] if anchor is None else [body[anchor]]
                return count_tokens([*head, *body[start:]])

        anchor, start = _split(body, tail_budget, kept_tokens)
        if anchor is None:
            older = list(body[:start])
            kept = list(body[start:])
        else:
            older = [*body[:anchor], *body[anchor + 1 : start]]
            kept = [body[anchor], *body[start:]]
        if not older:
            return None  # nothing older to summarize
        summary = await _summary(summarize, older)
        out: list[Message] = list(messages[:lead])
        out.append({"role": "system", "content": SUMMARY_PREFIX + summary})
        if flush_to_memory:
            out.append({"role": "system", "content": FLUSH_REMINDER})
        out.extend(kept)
        return {"messages": out}

    return before_llm


def _is_assistant(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") == "assistant"


def _is_system(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") == "system"
