"""The three question types of SPEC §8B and their canonical bytes.

A question is a frozen attrs value; its wire form is the JSON object the backend reads
(``{"type", "instructions", "criteria"?}``). :func:`canonical_request` is the byte
contract the shared fixtures pin: ``model`` + ``questions`` only, keys sorted by code
point, arrays in their given order (a score rubric's order *is* its level numbering),
compact separators, nothing escaped that JSON does not require.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

MAX_CHOICE_OPTIONS = 255
"""A choice question offers at most this many options (and at least one)."""
MIN_SCORE_LEVELS = 2
"""A score question's rubric has at least this many ordered levels."""
MAX_SCORE_LEVELS = 10
"""... and at most this many."""


class ClassifierError(Exception):
    """A judgment could not be made: bad questions, a failed backend call, a malformed
    answer, a read of an answer that is absent or of another type. The message says
    which; it never carries a credential nor an authentication failure's body."""


def _str_map(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class NoulCriteria:
    """What "true" and "false" mean for a noul question. Empty strings are sent as
    empty strings: ``NoulCriteria()`` is not the same request as no criteria."""

    true: str = ""
    false: str = ""


@attrs.frozen
class NoulQuestion:
    """A yes/no question answered with a probability (``noul``, 0..1)."""

    instructions: str
    criteria: NoulCriteria | None = None

    def to_wire(self) -> dict[str, Any]:
        """The backend's JSON form (no ``criteria`` key when there are none)."""
        out: dict[str, Any] = {"type": "noul", "instructions": self.instructions}
        if self.criteria is not None:
            out["criteria"] = {"true": self.criteria.true, "false": self.criteria.false}
        return out


@attrs.frozen
class ChoiceQuestion:
    """Pick one of named options; ``criteria`` maps each option to what it means."""

    instructions: str
    criteria: Mapping[str, str] = attrs.field(converter=_str_map)

    def to_wire(self) -> dict[str, Any]:
        """The backend's JSON form."""
        return {
            "type": "choice",
            "instructions": self.instructions,
            "criteria": dict(self.criteria),
        }


@attrs.frozen
class ScoreQuestion:
    """Place the state on an ordered rubric; level ``i`` is ``criteria[i]``."""

    instructions: str
    criteria: tuple[str, ...] = attrs.field(converter=_str_tuple)

    def to_wire(self) -> dict[str, Any]:
        """The backend's JSON form (the rubric in its given order)."""
        return {"type": "score", "instructions": self.instructions, "criteria": list(self.criteria)}


Question = NoulQuestion | ChoiceQuestion | ScoreQuestion
"""Any of the three question types."""


def choice_over(
    instructions: str, items: Mapping[str, str] | Iterable[tuple[str, str]]
) -> ChoiceQuestion:
    """A :class:`ChoiceQuestion` over named items (a mapping or ``(name, meaning)`` pairs)."""
    return ChoiceQuestion(instructions, dict(items))


def question_from_wire(data: Mapping[str, Any]) -> Question:
    """A question from its JSON form; a wrong shape is a :class:`ClassifierError`."""
    kind = data.get("type") if isinstance(data, Mapping) else None
    instructions = data.get("instructions") if isinstance(data, Mapping) else None
    if not isinstance(instructions, str):
        raise ClassifierError(f"a question needs string instructions, got {instructions!r:.60}")
    criteria = data.get("criteria")
    if kind == "noul":
        if criteria is None and "criteria" not in data:
            return NoulQuestion(instructions)
        if isinstance(criteria, Mapping) and all(
            isinstance(criteria.get(k, ""), str) for k in ("true", "false")
        ):
            return NoulQuestion(
                instructions, NoulCriteria(criteria.get("true", ""), criteria.get("false", ""))
            )
    elif kind == "choice":
        if isinstance(criteria, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in criteria.items()
        ):
            return ChoiceQuestion(instructions, criteria)
    elif kind == "score":
        if isinstance(criteria, list) and all(isinstance(v, str) for v in criteria):
            return ScoreQuestion(instructions, criteria)
    else:
        raise ClassifierError(f"unknown question type {kind!r:.40}; expected noul, choice or score")
    raise ClassifierError(f"a {kind} question has malformed criteria: {criteria!r:.80}")


def as_question(value: Question | Mapping[str, Any]) -> Question:
    """A question object (its JSON form is accepted too)."""
    if isinstance(value, NoulQuestion | ChoiceQuestion | ScoreQuestion):
        return value
    return question_from_wire(value)


def questions_to_wire(questions: Mapping[str, Question]) -> dict[str, dict[str, Any]]:
    """Each question's JSON form, under its key, in the given order."""
    return {key: q.to_wire() for key, q in questions.items()}


def canonical_json(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8, no optional escaping."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_request(model: str, questions: Mapping[str, Question | Mapping[str, Any]]) -> bytes:
    """The exact bytes of ``{"model", "questions"}`` that SPEC §8B fixes (the state is
    outside them: it is sent as the host gave it)."""
    wire = {key: as_question(q).to_wire() for key, q in questions.items()}
    return canonical_json({"model": model, "questions": wire})


def check_limits(questions: Mapping[str, Question]) -> None:
    """Refuse, before any request, what the backend cannot answer."""
    if not questions:
        raise ClassifierError("classifier: no questions")
    for key, q in questions.items():
        if isinstance(q, ChoiceQuestion):
            n = len(q.criteria)
            if not 1 <= n <= MAX_CHOICE_OPTIONS:
                raise ClassifierError(
                    f"classifier: question {key!r}: a choice takes 1..{MAX_CHOICE_OPTIONS} "
                    f"options, got {n}"
                )
        elif isinstance(q, ScoreQuestion):
            n = len(q.criteria)
            if not MIN_SCORE_LEVELS <= n <= MAX_SCORE_LEVELS:
                raise ClassifierError(
                    f"classifier: question {key!r}: a score takes {MIN_SCORE_LEVELS}.."
                    f"{MAX_SCORE_LEVELS} ordered levels, got {n}"
                )


def degenerate_reason(q: Question) -> str | None:
    """Why a choice's options cannot be told apart (so it ranks at chance), or ``None``.

    A single option is never degenerate: there is nothing to tell apart.
    """
    if not isinstance(q, ChoiceQuestion) or len(q.criteria) < 2:
        return None
    values = list(q.criteria.values())
    if all(v.strip() == "" for v in values):
        return "every option's description is empty"
    if all(v.strip() == k for k, v in q.criteria.items()):
        return "every option is described by its own name"
    if len(set(values)) == 1:
        return "every option has the same description"
    return None
