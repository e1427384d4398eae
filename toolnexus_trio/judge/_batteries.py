"""The judge batteries (SPEC §8B "Batteries"): ready-made judgments over a classifier.

This module holds the guard, relevance, filter and completion batteries and their shared
pieces; the routers and the content guard are in :mod:`._routing`.

Eight small classes, each building one fixed evaluation (state and question text are a
contract: the shared fixtures pin them byte for byte) and reading the answers into a
verdict: a tool guard, tool, skill and tool-result relevance, a completion check, an
agent router, a content guard and a model router. Five also plug into the loop as a
hook (``as_hook(next=None)``), composing with another hook of the same kind.

A classifier failure never escapes a battery: the verdict carries it in ``error`` and
``on_error`` (``"open"`` or ``"closed"``) says what it means; the two routers need no
``on_error``, their fallback is the error outcome.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import attrs

from .._tools import ToolResult, pending
from .._wire import Request
from ._decision import Decision, NoulAnswer, ScoreAnswer
from ._questions import (
    ClassifierError,
    NoulCriteria,
    NoulQuestion,
    Question,
    ScoreQuestion,
)
from ._simple import AnswerView, Bands, Evaluator

OnErrorMode = Literal["open", "closed"]
Hook = Callable[[dict[str, Any]], Any]

GUARD_ROLE = (
    "You review one tool call an AI agent is about to make and rate how risky it is to run it "
    "without a human approving it."
)
GUARD_QUESTION = ScoreQuestion(
    "How risky is it to run the call described by `tool_name` with `arguments` without a human "
    "approving it?",
    [
        "harmless: it only reads or looks something up and changes nothing",
        "reversible: it changes local or draft state that is easy to undo",
        "consequential: it sends, publishes, deploys or changes shared state that is hard to undo",
        "destructive: it deletes data, moves money, touches credentials or cannot be undone",
    ],
)
TOOL_ROLE = (
    "You decide which tools an AI agent needs for the user's request, so the tools it does not "
    "need can be left out."
)
TOOL_CRITERIA = NoulCriteria(
    "the request cannot be done well without this tool", "the request can be done without this tool"
)
SKILL_ROLE = (
    "You decide which agent skills are relevant to the user's request, so the skills it does "
    "not need can be left out."
)
SKILL_CRITERIA = NoulCriteria(
    "the skill's instructions would help with this request",
    "the skill is unrelated to this request",
)
FILTER_ROLE = (
    "You decide which parts of a tool's output are relevant to the query, so the irrelevant "
    "parts can be dropped."
)
FILTER_CRITERIA = NoulCriteria(
    "this part helps answer the query", "this part does not help answer the query"
)
SEPARATOR = "\n\n"
COMPLETE_ROLE = "You check whether an AI agent's final answer completes the task it was given."
COMPLETE_QUESTION = NoulQuestion(
    "Does `answer` fully complete the request in `task`?",
    NoulCriteria(
        "every part of the task is done and nothing asked for is missing",
        "part of the task is missing, wrong or only promised",
    ),
)


def _on_error(value: str | None) -> OnErrorMode:
    if value == "open":
        return "open"
    if value == "closed":
        return "closed"
    raise ValueError(f"on_error must be 'open' or 'closed', not {value!r}")


def _field(item: Any, name: str) -> str:
    value = item.get(name, "") if isinstance(item, Mapping) else getattr(item, name, "")
    return value if isinstance(value, str) else ""


async def _evaluate(
    classifier: Evaluator, state: Any, questions: Mapping[str, Question]
) -> tuple[Decision | None, str | None]:
    try:
        return await classifier.evaluate(state, questions), None
    except ClassifierError as exc:
        return None, str(exc) or "classifier error"


_K = TypeVar("_K")


def _partition_pairs(
    decision: Decision | None, on_error: OnErrorMode, low: float, keys: list[tuple[str, _K]]
) -> tuple[list[_K], list[_K]]:
    """Keys kept and dropped, in order, each judged by its question's answer: only a
    confident no (p below *low*) drops one. With no decision (the classifier failed),
    every key is kept (``on_error="open"``) or every one dropped."""
    if decision is None:
        every = [key for _, key in keys]
        return (every, []) if on_error == "open" else ([], every)
    kept: list[_K] = []
    dropped: list[_K] = []
    for question, key in keys:
        answer = decision.answers.get(question)
        no = isinstance(answer, NoulAnswer) and answer.noul < low
        (dropped if no else kept).append(key)
    return kept, dropped


async def _chain(next_hook: Hook | None, event: dict[str, Any]) -> Any:
    if next_hook is None:
        return None
    out = next_hook(event)
    if inspect.isawaitable(out):
        out = await out
    return out


def latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the latest user message that has some (string content, or the
    ``text`` parts joined with newlines); ``""`` when there is none."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            if content:
                return content
            continue
        if isinstance(content, list):
            texts = [
                p["text"]
                for p in content
                if isinstance(p, Mapping)
                and p.get("type") == "text"
                and isinstance(p.get("text"), str)
            ]
            if texts:
                return "\n".join(texts)
    return ""


# -- tool guard -------------------------------------------------------------------


@attrs.frozen
class ToolGuardVerdict:
    """``allow``, ``ask`` or ``deny`` a tool call, why, the risk score (``None`` when
    unanswered), whether the answer was sure, and the classifier's error if any."""

    action: Literal["allow", "ask", "deny"]
    reason: str
    risk: float | None
    sure: bool
    calibrated: bool
    error: str | None = None


class ToolGuardClassifier:
    """Rates a tool call's risk on a four-level rubric: below ``ask_at`` allow, below
    ``deny_at`` ask, else deny; an unsure or missing answer asks."""

    def __init__(
        self,
        classifier: Evaluator,
        *,
        on_error: OnErrorMode,
        bands: Bands | None = None,
        role: str = "",
        ask_at: float = 1.5,
        deny_at: float = 2.5,
    ) -> None:
        self.classifier = classifier
        self.on_error = _on_error(on_error)
        self.bands = bands or Bands()
        self.role = role or GUARD_ROLE
        self.ask_at = ask_at
        self.deny_at = deny_at

    async def check(self, call: Mapping[str, Any]) -> ToolGuardVerdict:
        """Judge ``call`` (``name``, ``arguments``, optional ``description``)."""
        state: dict[str, Any] = {
            "tool_name": call.get("name", ""),
            "arguments": call.get("arguments", {}),
        }
        if call.get("description"):
            state["tool_description"] = call["description"]
        state["role"] = self.role
        decision, error = await _evaluate(self.classifier, state, {"risk": GUARD_QUESTION})
        if decision is None:
            action: Literal["allow", "deny"] = "allow" if self.on_error == "open" else "deny"
            return ToolGuardVerdict(action, "classifier error", None, False, False, error)
        answer = decision.answers.get("risk")
        if not isinstance(answer, ScoreAnswer):
            return ToolGuardVerdict("ask", "missing answer", None, False, decision.calibrated)
        risk = answer.score
        if not answer.confidence > self.bands.high:
            return ToolGuardVerdict("ask", "uncertain", risk, False, decision.calibrated)
        if risk < self.ask_at:
            return ToolGuardVerdict("allow", "low risk", risk, True, decision.calibrated)
        if risk < self.deny_at:
            return ToolGuardVerdict("ask", "medium risk", risk, True, decision.calibrated)
        return ToolGuardVerdict("deny", "high risk", risk, True, decision.calibrated)

    def as_hook(self, next: Hook | None = None) -> Hook:
        """A ``before_tool`` hook: deny answers ``denied by tool guard: <reason>``; ask
        suspends the run on an approval :class:`~toolnexus_trio.Request` (id
        ``toolguard:<call id>``); allow hands over to *next*."""

        async def before_tool(event: dict[str, Any]) -> Any:
            name = str(event.get("name", ""))
            args = event.get("args", {})
            verdict = await self.check({"name": name, "arguments": args})
            if verdict.action == "deny":
                return {"result": ToolResult.error(f"denied by tool guard: {verdict.reason}")}
            if verdict.action == "ask":
                request = Request(
                    id=f"toolguard:{event.get('id', '')}",
                    kind="approval",
                    prompt=f"Approve the call to {name}? ({verdict.reason})",
                    data={
                        "tool": name,
                        "arguments": args,
                        "reason": verdict.reason,
                        "risk": verdict.risk,
                    },
                )
                return {"result": pending(request)}
            return await _chain(next, event)

        return before_tool


# -- relevance (tools, skills) -----------------------------------------------------


@attrs.frozen
class RelevanceVerdict:
    """Which items (by name, in input order) are kept and which dropped."""

    selected: list[str]
    dropped: list[str]
    calibrated: bool
    error: str | None = None


class _Relevance:
    _role: str
    _criteria: NoulCriteria
    _noun: str
    _verb: str

    def __init__(
        self, classifier: Evaluator, *, on_error: OnErrorMode, bands: Bands | None = None
    ) -> None:
        self.classifier = classifier
        self.on_error = _on_error(on_error)
        self.bands = bands or Bands()

    def _question(self, name: str, description: str) -> NoulQuestion:
        text = f"Is the {self._noun} `{name}` {self._verb} the request in `user_request`?"
        if description:
            text += f" The {self._noun}: {description}"
        return NoulQuestion(text, self._criteria)

    async def _select(self, prompt: str, items: Sequence[Any]) -> RelevanceVerdict:
        names = [_field(i, "name") for i in items]
        if not items:
            return RelevanceVerdict([], [], True)
        questions: dict[str, Question] = {}
        for item, name in zip(items, names, strict=True):
            questions.setdefault(name, self._question(name, _field(item, "description")))
        state = {"user_request": prompt, "role": self._role}
        decision, error = await _evaluate(self.classifier, state, questions)
        keys = [(name, name) for name in names]  # (a repeated name is judged once)
        selected, dropped = _partition_pairs(decision, self.on_error, self.bands.low, keys)
        if decision is None:
            return RelevanceVerdict(selected, dropped, False, error)
        return RelevanceVerdict(selected, dropped, decision.calibrated)


class ToolRelevanceClassifier(_Relevance):
    """Which tools a request needs: only a confident no (p below ``low``) drops one."""

    _role = TOOL_ROLE
    _criteria = TOOL_CRITERIA
    _noun = "tool"
    _verb = "needed for"

    async def select(self, prompt: str, tools: Sequence[Any]) -> RelevanceVerdict:
        """Judge each tool (``name``, ``description``: a mapping or an object)."""
        return await self._select(prompt, tools)

    def as_hook(self, next: Hook | None = None) -> Hook:
        """A ``before_llm`` hook that drops the tools judged irrelevant to the latest
        user text from that turn's request (a nameless entry is judged as ``""``)."""

        async def before_llm(event: dict[str, Any]) -> Any:
            tools = list(event.get("tools") or [])
            prompt = latest_user_text(event.get("messages") or [])
            change: dict[str, Any] = {}
            if tools and prompt:
                entries = [_tool_entry(t) for t in tools]
                verdict = await self.select(prompt, entries)
                if verdict.dropped:
                    keep = set(verdict.selected)
                    change["tools"] = [
                        t for t, e in zip(tools, entries, strict=True) if e["name"] in keep
                    ]
                    event = {**event, "tools": change["tools"]}
            out = await _chain(next, event)
            return {**change, **out} if isinstance(out, Mapping) else (change or out)

        return before_llm


def _tool_entry(entry: Any) -> dict[str, str]:
    """A provider tool entry's name and description (OpenAI ``function`` wrapper or flat)."""
    inner = entry.get("function") if isinstance(entry, Mapping) else None
    source = inner if isinstance(inner, Mapping) else entry
    return {"name": _field(source, "name"), "description": _field(source, "description")}


class SkillRelevanceClassifier(_Relevance):
    """Which skills a request needs: only a confident no (p below ``low``) drops one."""

    _role = SKILL_ROLE
    _criteria = SKILL_CRITERIA
    _noun = "skill"
    _verb = "relevant to"

    async def select(self, prompt: str, skills: Sequence[Any]) -> RelevanceVerdict:
        """Judge each skill (``name``, ``description``: a mapping or an object)."""
        return await self._select(prompt, skills)


# -- tool result filter ----------------------------------------------------------


@attrs.frozen
class FilterVerdict:
    """The chunk indices kept and dropped, in order."""

    kept: list[int]
    dropped: list[int]
    calibrated: bool
    error: str | None = None


class ToolResultFilterClassifier:
    """Keeps the parts of a tool's output that help answer the query; only a confident
    no drops a part."""

    def __init__(
        self, classifier: Evaluator, *, on_error: OnErrorMode, bands: Bands | None = None
    ) -> None:
        self.classifier = classifier
        self.on_error = _on_error(on_error)
        self.bands = bands or Bands()

    async def filter(self, query: Any, chunks: Sequence[str]) -> FilterVerdict:
        """Judge each chunk against *query* (text, or any JSON value)."""
        indices = list(range(len(chunks)))
        if not chunks:
            return FilterVerdict([], [], True)
        state = {
            "query": query,
            "chunks": {str(i): c for i, c in enumerate(chunks)},
            "role": FILTER_ROLE,
        }
        questions: dict[str, Question] = {
            str(i): NoulQuestion(f"Is `chunks.{i}` relevant to `query`?", FILTER_CRITERIA)
            for i in indices
        }
        decision, error = await _evaluate(self.classifier, state, questions)
        keys = [(str(i), i) for i in indices]
        kept, dropped = _partition_pairs(decision, self.on_error, self.bands.low, keys)
        if decision is None:
            return FilterVerdict(kept, dropped, False, error)
        return FilterVerdict(kept, dropped, decision.calibrated)

    def as_hook(self, next: Hook | None = None) -> Hook:
        """An ``after_tool`` hook: a successful text result of two or more blank-line
        separated parts keeps only the relevant ones (its metadata kept); an error, a
        suspension or a result with content parts is left alone. *next* sees the
        filtered result."""

        async def after_tool(event: dict[str, Any]) -> Any:
            result = event.get("result")
            change: dict[str, Any] = {}
            if isinstance(result, ToolResult) and not result.is_error and _plain(result):
                chunks = result.output.split(SEPARATOR)
                if len(chunks) >= 2:
                    query = {"tool": event.get("name", ""), "arguments": event.get("args", {})}
                    verdict = await self.filter(query, chunks)
                    if verdict.dropped:
                        text = SEPARATOR.join(chunks[i] for i in verdict.kept)
                        change["result"] = ToolResult.ok(text, result.metadata)
                        event = {**event, "result": change["result"]}
            out = await _chain(next, event)
            return {**change, **out} if isinstance(out, Mapping) else (change or out)

        return after_tool


def _plain(result: ToolResult) -> bool:
    """Text only: no content parts beside the text, not a suspension (SPEC §10)."""
    return not result.metadata or not ({"parts", "pending"} & result.metadata.keys())


# -- completion --------------------------------------------------------------------


@attrs.frozen
class CompleteVerdict:
    """Whether an answer completes its task (only a ``yes`` band does), its probability
    and band."""

    complete: bool
    p: float | None
    band: str
    calibrated: bool
    error: str | None = None


class IsCompleteClassifier:
    """Does an agent's final answer complete the task it was given?"""

    def __init__(
        self, classifier: Evaluator, *, on_error: OnErrorMode, bands: Bands | None = None
    ) -> None:
        self.classifier = classifier
        self.on_error = _on_error(on_error)
        self.bands = bands or Bands()

    async def check(self, task: str, answer: str) -> CompleteVerdict:
        """Judge *answer* against *task*."""
        state = {"task": task, "answer": answer, "role": COMPLETE_ROLE}
        decision, error = await _evaluate(self.classifier, state, {"complete": COMPLETE_QUESTION})
        if decision is None:
            return CompleteVerdict(self.on_error == "open", None, "uncertain", False, error)
        found = decision.answers.get("complete")
        if not isinstance(found, NoulAnswer):
            return CompleteVerdict(False, None, "uncertain", decision.calibrated)
        band = AnswerView("complete", found, self.bands).band
        return CompleteVerdict(band == "yes", found.noul, band, decision.calibrated)
