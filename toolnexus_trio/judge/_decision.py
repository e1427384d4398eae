"""What a classifier answers: a :class:`Decision` of typed answers (SPEC §8B).

Numbers are kept as the backend sent them (``0`` stays ``0``, a zero probability stays
present); ``near_uniform`` is derived here, with the SPEC's inclusive tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._questions import ClassifierError

NEAR_UNIFORM_TOLERANCE = 0.05
"""A distribution is near uniform when no option is further than this from ``1/n``."""


def near_uniform(probabilities: Mapping[str, float]) -> bool:
    """``max |p - 1/n| <= 0.05`` (inclusive); ``False`` for no options, ``True`` for one."""
    n = len(probabilities)
    if n == 0:
        return False
    even = 1 / n
    return max(abs(p - even) for p in probabilities.values()) <= NEAR_UNIFORM_TOLERANCE


@attrs.frozen
class ClassifierUsage:
    """Tokens a judgment used, and its cost when the backend said one (``None`` is
    "not reported", never "free")."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None


@attrs.frozen
class NoulAnswer:
    """A noul question's answer: the probability that the statement is true."""

    noul: float
    type: str = "noul"


@attrs.frozen
class ChoiceAnswer:
    """A choice question's answer: the pick, how sure, and the full distribution."""

    choice: str
    confidence: float
    probabilities: Mapping[str, float]
    near_uniform: bool
    type: str = "choice"


@attrs.frozen
class ScoreAnswer:
    """A score question's answer: the expected level, how sure, the distribution over
    levels (keys ``"0"``, ``"1"``, ...) and the legend naming each level."""

    score: float
    confidence: float
    probabilities: Mapping[str, float]
    legend: Mapping[str, str]
    type: str = "score"

    def levels(self) -> list[tuple[str, str]]:
        """The legend as ``(level, meaning)`` pairs in level order (``"2"`` before ``"10"``)."""
        return sorted(self.legend.items(), key=lambda item: (len(item[0]), item[0]))


AnyAnswer = NoulAnswer | ChoiceAnswer | ScoreAnswer


@attrs.frozen
class Decision:
    """One evaluation's answers, by question key.

    ``calibrated`` is ``False`` when the answers are not calibrated probabilities (the
    ``llm`` and ``custom`` styles, or a backend that says so). ``response`` is the
    backend's body as received, for recording and replay.
    """

    model: str
    calibrated: bool
    usage: ClassifierUsage
    answers: Mapping[str, AnyAnswer]
    response: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)

    def _get(self, key: str, kind: str) -> Any:
        answer = self.answers.get(key)
        if answer is None:
            raise ClassifierError(f"no answer {key!r}")
        if answer.type != kind:
            raise ClassifierError(f"{key!r} is a {answer.type} answer, not {kind}")
        return answer

    def noul(self, key: str) -> NoulAnswer:
        """The noul answer under *key* (absent or another type: :class:`ClassifierError`)."""
        answer: NoulAnswer = self._get(key, "noul")
        return answer

    def choice(self, key: str) -> ChoiceAnswer:
        """The choice answer under *key* (absent or another type: :class:`ClassifierError`)."""
        answer: ChoiceAnswer = self._get(key, "choice")
        return answer

    def score(self, key: str) -> ScoreAnswer:
        """The score answer under *key* (absent or another type: :class:`ClassifierError`)."""
        answer: ScoreAnswer = self._get(key, "score")
        return answer


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClassifierError(f"classifier: malformed response: {where} is not a number")
    return value


def _numbers(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ClassifierError(f"classifier: malformed response: {where} is not an object")
    return {str(k): _number(v, f"{where}.{k}") for k, v in value.items()}


def _answer(key: str, data: Any) -> AnyAnswer:
    where = f"answers.{key}"
    if not isinstance(data, Mapping):
        raise ClassifierError(f"classifier: malformed response: {where} is not an object")
    kind = data.get("type")
    if kind == "noul":
        return NoulAnswer(_number(data.get("noul"), f"{where}.noul"))
    if kind == "choice":
        choice = data.get("choice")
        if not isinstance(choice, str):
            raise ClassifierError(f"classifier: malformed response: {where}.choice is not a string")
        probabilities = _numbers(data.get("probabilities", {}), f"{where}.probabilities")
        return ChoiceAnswer(
            choice,
            _number(data.get("confidence"), f"{where}.confidence"),
            probabilities,
            near_uniform(probabilities),
        )
    if kind == "score":
        legend = data.get("legend", {})
        if not isinstance(legend, Mapping) or not all(isinstance(v, str) for v in legend.values()):
            raise ClassifierError(f"classifier: malformed response: {where}.legend")
        return ScoreAnswer(
            _number(data.get("score"), f"{where}.score"),
            _number(data.get("confidence"), f"{where}.confidence"),
            _numbers(data.get("probabilities", {}), f"{where}.probabilities"),
            {str(k): v for k, v in legend.items()},
        )
    raise ClassifierError(f"classifier: malformed response: {where}.type is {kind!r:.40}")


def parse_decision(body: Any, *, calibrated_default: bool = True, model: str = "") -> Decision:
    """A :class:`Decision` from a backend body.

    ``calibrated`` absent or ``null`` means *calibrated_default*; only a literal
    ``false`` (or ``true``) says otherwise. Usage without ``cost`` has ``cost=None``.
    """
    if not isinstance(body, Mapping):
        raise ClassifierError("classifier: malformed response: not a JSON object")
    answers = body.get("answers")
    if not isinstance(answers, Mapping):
        raise ClassifierError("classifier: malformed response: no 'answers' object")
    usage_data = body.get("usage") or {}
    if not isinstance(usage_data, Mapping):
        raise ClassifierError("classifier: malformed response: 'usage' is not an object")
    cost = usage_data.get("cost")
    usage = ClassifierUsage(
        int(_number(usage_data.get("input_tokens", 0), "usage.input_tokens")),
        int(_number(usage_data.get("output_tokens", 0), "usage.output_tokens")),
        None if cost is None else _number(cost, "usage.cost"),
    )
    flag = body.get("calibrated")
    calibrated = calibrated_default if flag is None else flag is not False
    response_model = body.get("model")
    return Decision(
        response_model if isinstance(response_model, str) else model,
        calibrated,
        usage,
        {str(k): _answer(str(k), v) for k, v in answers.items()},
        dict(body),
    )
