"""Simple judgments over a classifier: builders, bands, ``ask`` and ``gate`` (SPEC §8B).

A state is a mapping (or ``context`` + ``message`` sugar); questions are an ordered
list built with :func:`noul`, :func:`choice` and :func:`score`; :class:`Bands` turn
probabilities into ``yes`` / ``no`` / ``uncertain`` (cut points exclusive on the
confident side: exactly ``low`` or ``high`` is uncertain). :func:`gate` walks rules in
order and either acts or escalates with a SPEC §10 :class:`~toolnexus_trio.Request`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._wire import Request
from ._classifier import DEFAULT_MODEL, Classifier, RecordedDecision, create_classifier
from ._decision import AnyAnswer, ChoiceAnswer, Decision, NoulAnswer, parse_decision
from ._questions import (
    ChoiceQuestion,
    ClassifierError,
    NoulQuestion,
    Question,
    ScoreQuestion,
    as_question,
    questions_to_wire,
)


class Evaluator(Protocol):
    """Anything with a classifier's ``evaluate``: a :class:`Classifier`, a tape call."""

    async def evaluate(
        self, state: Any, questions: Mapping[str, Question | Mapping[str, Any]]
    ) -> Decision:
        """Answer *questions* about *state*."""


@attrs.frozen
class NamedQuestion:
    """A question with the key its answer comes back under."""

    name: str
    question: Question


def noul(name: str, instructions: str) -> NamedQuestion:
    """A yes/no question named *name*."""
    return NamedQuestion(name, NoulQuestion(instructions))


def choice(name: str, instructions: str, options: Mapping[str, str]) -> NamedQuestion:
    """A choice among *options* (option -> what it means) named *name*."""
    return NamedQuestion(name, ChoiceQuestion(instructions, options))


def score(name: str, instructions: str, levels: Sequence[str]) -> NamedQuestion:
    """A score on the ordered rubric *levels* (lowest first) named *name*."""
    return NamedQuestion(name, ScoreQuestion(instructions, levels))


QuestionsLike = Iterable[NamedQuestion] | Mapping[str, Question | Mapping[str, Any]]


def questions(items: QuestionsLike) -> dict[str, Question]:
    """The ``evaluate`` mapping of an ordered list of named questions (a mapping is
    taken as it is). A name used twice is a :class:`ClassifierError`."""
    if isinstance(items, Mapping):
        return {str(k): as_question(q) for k, q in items.items()}
    out: dict[str, Question] = {}
    for item in items:
        if item.name in out:
            raise ClassifierError(f'duplicate question name "{item.name}"')
        out[item.name] = item.question
    return out


def questions_wire(items: QuestionsLike) -> dict[str, dict[str, Any]]:
    """The JSON form of :func:`questions`."""
    return questions_to_wire(questions(items))


def state(role: str, data: Any) -> dict[str, Any]:
    """A state with a ``role``: a mapping *data* is merged after it; anything else
    goes under ``data``."""
    if isinstance(data, Mapping):
        return {"role": role, **data}
    return {"role": role, "data": data}


def context(context: str, message: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"context", "message", **extra}``: the usual state of a judgment."""
    return {"context": context, "message": message, **(extra or {})}


@attrs.frozen
class Bands:
    """Cut-offs: a probability above ``high`` is ``yes``, below ``low`` is ``no``, and
    ``low <= p <= high`` is ``uncertain``; a choice or score is sure when its
    confidence is above ``high``."""

    low: float = 0.3
    high: float = 0.7


@attrs.frozen
class AnswerView:
    """One answer as :func:`ask` gives it: the typed answer plus its reading under the
    bands."""

    name: str
    answer: AnyAnswer
    bands: Bands

    @property
    def type(self) -> str:
        """``noul``, ``choice`` or ``score``."""
        return self.answer.type

    def value(self) -> float:
        """A noul's probability, a choice's confidence, a score's value."""
        if isinstance(self.answer, NoulAnswer):
            return self.answer.noul
        if isinstance(self.answer, ChoiceAnswer):
            return self.answer.confidence
        return self.answer.score

    @property
    def band(self) -> str:
        """``yes``, ``no`` or ``uncertain``: a noul's probability read on the bands
        (for a choice or score: ``yes`` when sure, else ``uncertain``)."""
        if isinstance(self.answer, NoulAnswer):
            p = self.answer.noul
            if p > self.bands.high:
                return "yes"
            if p < self.bands.low:
                return "no"
            return "uncertain"
        return "yes" if self.sure else "uncertain"

    @property
    def sure(self) -> bool:
        """Confident enough to act on: a noul outside the uncertain band; a choice with
        confidence above ``high`` and not near uniform; a score with confidence above
        ``high``."""
        if isinstance(self.answer, NoulAnswer):
            return self.band != "uncertain"
        if isinstance(self.answer, ChoiceAnswer):
            return self.answer.confidence > self.bands.high and not self.answer.near_uniform
        return self.answer.confidence > self.bands.high

    def choice(self) -> str:
        """A choice's pick (another type: :class:`ClassifierError`)."""
        if not isinstance(self.answer, ChoiceAnswer):
            raise ClassifierError(f"{self.name!r} is a {self.type} answer, not choice")
        return self.answer.choice


async def ask(
    classifier: Evaluator,
    state: Any,
    questions_: QuestionsLike,
    bands: Bands | None = None,
) -> dict[str, AnswerView]:
    """Evaluate and read every answer on *bands* (default 0.3 / 0.7): answers by name."""
    views, _ = await _ask(classifier, state, questions_, bands)
    return views


async def _ask(
    classifier: Evaluator, state: Any, questions_: QuestionsLike, bands: Bands | None
) -> tuple[dict[str, AnswerView], Decision]:
    decision = await classifier.evaluate(state, questions(questions_))
    cut = bands or Bands()
    return {k: AnswerView(k, a, cut) for k, a in decision.answers.items()}, decision


@attrs.frozen(kw_only=True)
class Rule:
    """Act when an answer says so: ``below`` (a noul or score value under it),
    ``at_least`` (at or over it) or ``is_`` (a choice's pick); ``action`` and ``target``
    are what :func:`gate` returns when it fires."""

    question: str
    action: str
    below: float | None = None
    at_least: float | None = None
    is_: str | None = None
    target: str = ""

    def fits(self, view: AnswerView) -> bool:
        """Whether this rule can read *view* (``is_`` needs a choice, thresholds a
        number)."""
        if self.is_ is not None:
            return view.type == "choice"
        return view.type in ("noul", "score")

    def fires(self, view: AnswerView) -> bool:
        """Whether the answer meets the rule."""
        if self.is_ is not None:
            return view.choice() == self.is_
        value = view.value()
        if self.below is not None and not value < self.below:
            return False
        if self.at_least is not None and not value >= self.at_least:
            return False
        return self.below is not None or self.at_least is not None


def _rules(value: Iterable[Rule]) -> tuple[Rule, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Policy:
    """Rules plus what happens when none fires: ``default`` (an action), or, when it is
    empty, an escalation ``no rule fired``. ``skip_uncertain`` moves past a rule whose
    answer is uncertain instead of escalating there."""

    rules: tuple[Rule, ...] = attrs.field(converter=_rules)
    default: str = ""
    bands: Bands | None = None
    skip_uncertain: bool = False


@attrs.frozen
class GateResult:
    """What :func:`gate` decided: an ``action`` (``""`` when no rule fired) and its
    ``target``, or ``escalated`` with ``action="needs_input"`` and a §10 ``request``
    (kind ``input``, ``data={"question", "reason", "answers"}``)."""

    action: str
    target: str = ""
    escalated: bool = False
    request: Request | None = None
    answers: Mapping[str, AnswerView] = attrs.field(factory=dict)


def _escalate(
    request_id: str, question: str, reason: str, decision: Decision, views: Mapping[str, AnswerView]
) -> GateResult:
    data = {
        "question": question,
        "reason": reason,
        "answers": dict(decision.response.get("answers", {})),
    }
    request = Request(id=request_id, kind="input", prompt=reason, data=data)
    return GateResult("needs_input", "", True, request, views)


async def gate(
    classifier: Evaluator,
    state: Any,
    questions_: QuestionsLike,
    rules: Sequence[Rule] | Policy,
    bands: Bands | None = None,
) -> GateResult:
    """Evaluate, then walk the rules in order; the first that fires decides.

    Per rule: a missing answer escalates (``missing answer "<q>"``), an uncertain one
    escalates (``uncertain answer "<q>"``) unless the policy skips uncertain answers,
    a rule that cannot read its answer's type escalates. With a :class:`Policy` and no
    rule firing: its ``default`` action, or an escalation ``no rule fired``.
    """
    policy: Policy | None = None
    if isinstance(rules, Policy):
        policy, rule_list = rules, rules.rules
    else:
        rule_list = tuple(rules)
    cut = bands or (policy.bands if policy is not None else None)
    views, decision = await _ask(classifier, state, questions_, cut)
    for index, rule in enumerate(rule_list):
        request_id = f"gate:{index}:{rule.question}"
        view = views.get(rule.question)
        if view is None:
            return _escalate(
                request_id, rule.question, f'missing answer "{rule.question}"', decision, views
            )
        if not view.sure:
            if policy is not None and policy.skip_uncertain:
                continue
            return _escalate(
                request_id, rule.question, f'uncertain answer "{rule.question}"', decision, views
            )
        if not rule.fits(view):
            reason = f'rule {index} cannot read the {view.type} answer "{rule.question}"'
            return _escalate(request_id, rule.question, reason, decision, views)
        if rule.fires(view):
            return GateResult(rule.action, rule.target, False, None, views)
    if policy is not None:
        if policy.default:
            return GateResult(policy.default, "", False, None, views)
        return _escalate("gate:default", "", "no rule fired", decision, views)
    return GateResult("", "", False, None, views)


def static_classifier(
    *entries: tuple[Any, QuestionsLike, Mapping[str, Any]], model: str = DEFAULT_MODEL
) -> Classifier:
    """A ``static`` classifier answering from ``(state, questions, response)`` entries."""
    return create_classifier(
        "static",
        model=model,
        decisions=[RecordedDecision(s, questions(q), r) for s, q, r in entries],
    )


class TapeCall:
    """One named call of a :class:`Tape`: records live decisions, or replays them."""

    def __init__(self, tape: Tape, name: str) -> None:
        self._tape = tape
        self.name = name

    async def evaluate(
        self, state: Any, questions: Mapping[str, Question | Mapping[str, Any]]
    ) -> Decision:
        """The live classifier's decision (recorded under this call's name), or the
        recorded one when the tape has no live classifier."""
        tape = self._tape
        if tape.live is None:
            response = tape.recorded.get(self.name)
            if response is None:
                raise ClassifierError(f'tape: no recorded decision for call "{self.name}"')
            return parse_decision(response, model=tape.model)
        decision = await tape.live.evaluate(state, questions)
        tape.recorded[self.name] = dict(decision.response)
        return decision


class Tape:
    """Record a workflow's judgments once, replay them in tests: with ``live`` every
    call evaluates and is kept in :attr:`recorded` (call name -> backend response);
    without, calls replay from ``recorded``, and a call never recorded fails when it
    is evaluated (not when the tape is made)."""

    def __init__(
        self,
        live: Evaluator | None = None,
        recorded: Mapping[str, Mapping[str, Any]] | None = None,
        model: str = DEFAULT_MODEL,
    ) -> None:
        self.live = live
        self.recorded: dict[str, Mapping[str, Any]] = dict(recorded or {})
        self.model = model

    def call(self, name: str) -> TapeCall:
        """The evaluator for the call named *name*."""
        return TapeCall(self, name)
