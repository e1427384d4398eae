"""Simple judgments (``ask``, ``gate``, builders, bands, policies, tapes, batches)
against the shared adapter fixtures (tests/fixtures/judge/adapters, MIT).

Each test names the toolnexus 0.21 test (tests/test_judge.py) it answers in a
``# peer:`` comment.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from judge_helpers import answer, load, served

from toolnexus_trio import Request
from toolnexus_trio.judge import (
    Bands,
    ChoiceQuestion,
    ClassifierError,
    NoulQuestion,
    Policy,
    Rule,
    ScoreQuestion,
    Tape,
    ask,
    choice,
    context,
    create_classifier,
    gate,
    noul,
    questions,
    questions_wire,
    score,
    state,
    static_classifier,
)

STATE_CASES = load("adapters/state-cases")["cases"]
GATE = load("adapters/gate-cases")
REPORT = {"report": "checkout returns 500 when a coupon is applied"}


def _build(spec: dict[str, Any]) -> Any:
    if spec["kind"] == "noul":
        return noul(spec["name"], spec["instructions"])
    if spec["kind"] == "choice":
        return choice(spec["name"], spec["instructions"], spec["options"])
    return score(spec["name"], spec["instructions"], spec["levels"])


# peer: test_state_cases
@pytest.mark.parametrize("case", STATE_CASES, ids=[c["name"] for c in STATE_CASES])
def test_state_cases(case: dict[str, Any]) -> None:
    built = [_build(q) for q in case["questions"]]
    if "wantError" in case:
        with pytest.raises(ClassifierError) as caught:
            questions(built)
        assert str(caught.value) == case["wantError"]
        return
    if "context" in case:
        sugar = case["context"]
        got = context(sugar["context"], sugar["message"], sugar.get("extra"))
    elif "roleState" in case:
        got = state(case["roleState"]["role"], case["roleState"]["data"])
    else:
        got = dict(case["state"])
    assert got == case["wantState"]
    wire = questions_wire(built)
    assert wire == case["wantQuestions"]
    assert list(wire) == list(case["wantQuestions"])  # the list's order is kept


def _rules(specs: list[dict[str, Any]]) -> list[Rule]:
    return [
        Rule(
            question=r["question"],
            action=r["action"],
            below=r.get("below"),
            at_least=r.get("at_least"),
            is_=r.get("is"),
            target=r.get("target", ""),
        )
        for r in specs
    ]


# peer: test_gate_cases
@pytest.mark.parametrize("case", GATE["cases"], ids=[c["name"] for c in GATE["cases"]])
async def test_gate_cases(case: dict[str, Any]) -> None:
    qs = GATE["questions"]
    response = {"answers": case["answers"]}
    c = static_classifier((REPORT, qs, response))
    bands = Bands(**case["bands"]) if case["bands"] else None
    rules: Any = _rules(case.get("rules", GATE["rules"]))
    if "policy" in case:
        rules = Policy(
            rules=rules,
            default=case["policy"]["default"],
            skip_uncertain=case["policy"]["skipUncertain"],
        )
    result = await gate(c, REPORT, qs, rules, bands)
    want = case["want"]
    assert (result.action, result.target, result.escalated) == (
        want["action"],
        want["target"],
        want["escalated"],
    )
    if want["escalated"]:
        request = result.request
        assert isinstance(request, Request) and request.kind == "input"
        assert request.id == want["requestId"]
        assert request.data is not None and request.data["question"] == want["question"]
        if "reason" in want:
            assert request.data["reason"] == want["reason"]
        assert request.data["answers"] == case["answers"]
    else:
        assert result.request is None
    views = await ask(c, REPORT, qs, bands)
    assert set(views) == set(case["wantAnswers"])
    for key, expected in case["wantAnswers"].items():
        view = views[key]
        assert view.value() == expected["value"], key
        if "band" in expected:
            assert view.band == expected["band"], key
        if "sure" in expected:
            assert view.sure is expected["sure"], key
        if "choice" in expected:
            assert view.choice() == expected["choice"], key


# peer: test_builders_byte_identical_to_hand_written
def test_builders_byte_identical_to_hand_written() -> None:
    from toolnexus_trio.judge import canonical_request

    built = questions(
        [
            noul("fixable", "Fixable?"),
            choice("component", "Which?", {"pricing": "coupons", "checkout": "handler"}),
            score("effort", "How hard?", ["easy", "hard"]),
        ]
    )
    by_hand = {
        "fixable": NoulQuestion("Fixable?"),
        "component": ChoiceQuestion("Which?", {"pricing": "coupons", "checkout": "handler"}),
        "effort": ScoreQuestion("How hard?", ["easy", "hard"]),
    }
    assert built == by_hand
    assert canonical_request("m", built) == canonical_request("m", by_hand)


# peer: test_role_state_and_wrap
def test_role_state_and_wrap() -> None:
    assert state("judge", {"message": "hi", "n": 1}) == {"role": "judge", "message": "hi", "n": 1}
    assert state("judge", ["a"]) == {"role": "judge", "data": ["a"]}
    assert context("c", "m") == {"context": "c", "message": "m"}


def _noul(p: float) -> dict[str, Any]:
    return {"answers": {"q": {"type": "noul", "noul": p}}}


# peer: test_bands_and_value
@pytest.mark.parametrize(
    ("p", "bands", "band"),
    [
        (0.29, None, "no"),
        (0.3, None, "uncertain"),
        (0.5, None, "uncertain"),
        (0.7, None, "uncertain"),
        (0.71, None, "yes"),
        (0.15, Bands(0.1, 0.9), "uncertain"),
        (0.95, Bands(0.1, 0.9), "yes"),
        (0.05, Bands(0.1, 0.9), "no"),
    ],
)
async def test_bands_and_value(p: float, bands: Bands | None, band: str) -> None:
    qs = [noul("q", "?")]
    c = static_classifier(("s", qs, _noul(p)))
    view = (await ask(c, "s", qs, bands))["q"]
    assert (view.type, view.value(), view.band) == ("noul", p, band)


# peer: test_choice_value_and_pick
async def test_choice_value_and_pick() -> None:
    qs = [choice("pick", "?", {"a": "first", "b": "second"})]
    response = {
        "answers": {
            "pick": {
                "type": "choice",
                "choice": "b",
                "confidence": 0.9,
                "probabilities": {"a": 0.1, "b": 0.9},
            }
        }
    }
    view = (await ask(static_classifier(("s", qs, response)), "s", qs))["pick"]
    assert (view.value(), view.sure, view.choice()) == (0.9, True, "b")
    noul_view = (
        await ask(static_classifier(("s", [noul("q", "?")], _noul(0.9))), "s", [noul("q", "?")])
    )["q"]
    with pytest.raises(ClassifierError, match="'q' is a noul answer, not choice"):
        noul_view.choice()


# peer: test_policy_default_and_no_rule_fired
async def test_policy_default_and_no_rule_fired() -> None:
    qs = [noul("q", "?")]
    c = static_classifier(("s", qs, _noul(0.9)))
    rules = [Rule(question="q", below=0.3, action="stop")]
    plain = await gate(c, "s", qs, rules)
    assert (plain.action, plain.escalated) == ("", False)
    proceed = await gate(c, "s", qs, Policy(rules=rules, default="proceed"))
    assert (proceed.action, proceed.escalated) == ("proceed", False)
    none = await gate(c, "s", qs, Policy(rules=rules))
    assert none.escalated and none.action == "needs_input"
    assert none.request is not None and none.request.id == "gate:default"
    assert none.request.data is not None and none.request.data["reason"] == "no rule fired"


# peer: test_policy_skip_uncertain
async def test_policy_skip_uncertain() -> None:
    qs = [noul("q", "?"), noul("r", "?")]
    response = {"answers": {"q": {"type": "noul", "noul": 0.5}, "r": {"type": "noul", "noul": 0.1}}}
    c = static_classifier(("s", qs, response))
    rules = [Rule(question="q", below=0.3, action="a"), Rule(question="r", below=0.3, action="b")]
    stop = await gate(c, "s", qs, Policy(rules=rules))
    assert stop.escalated and stop.request is not None and stop.request.id == "gate:0:q"
    skip = await gate(c, "s", qs, Policy(rules=rules, skip_uncertain=True))
    assert (skip.action, skip.escalated) == ("b", False)


# peer: test_missing_answer_reason_names_the_key
async def test_missing_answer_reason_names_the_key() -> None:
    qs = [noul("q", "?")]
    c = static_classifier(("s", qs, _noul(0.9)))
    result = await gate(c, "s", qs, [Rule(question="zz", below=0.3, action="x")])
    assert result.request is not None and result.request.data is not None
    assert result.request.data["reason"] == 'missing answer "zz"'
    assert result.request.id == "gate:0:zz"


# peer: test_tape_record_replay_and_miss
async def test_tape_record_replay_and_miss() -> None:
    qs = [noul("q", "?")]
    async with served([answer(_noul(0.8))]) as (provider, live):
        tape = Tape(live)
        first = (await ask(tape.call("plan"), "s", qs))["q"]
    assert first.value() == 0.8 and len(provider.requests) == 1
    replay = Tape(recorded=tape.recorded)
    again = (await ask(replay.call("plan"), "s", qs))["q"]
    assert again.value() == 0.8
    with pytest.raises(ClassifierError, match=r'^tape: no recorded decision for call "review"$'):
        await ask(replay.call("review"), "s", qs)


# peer: test_tape_miss_on_evaluate_not_construction_sends_nothing
async def test_tape_miss_on_evaluate_not_construction_sends_nothing() -> None:
    tape = Tape(recorded={})
    call = tape.call("plan")  # no error yet
    with pytest.raises(ClassifierError, match=r'^tape: no recorded decision for call "plan"$'):
        await call.evaluate("s", questions([noul("q", "?")]))


def _custom(delays: dict[int, float], failing: set[int]) -> Any:
    async def evaluate(state: Any, qs: Any) -> dict[str, Any]:
        await trio.sleep(delays.get(state, 0))
        if state in failing:
            raise ValueError(f"boom {state}")
        return _noul(state / 10)

    return create_classifier("custom", evaluate=evaluate)


# peer: test_evaluate_batch_order
async def test_evaluate_batch_order() -> None:
    c = _custom({}, set())
    decisions = await c.evaluate_batch([1, 2, 3], questions([noul("q", "?")]))
    assert [d.noul("q").noul for d in decisions] == [0.1, 0.2, 0.3]


# peer: test_evaluate_batch_order_regardless_of_completion
async def test_evaluate_batch_order_regardless_of_completion(autojump_clock: Any) -> None:
    c = _custom({1: 3.0, 2: 2.0, 3: 1.0}, set())
    decisions = await c.evaluate_batch([1, 2, 3], questions([noul("q", "?")]))
    assert [d.noul("q").noul for d in decisions] == [0.1, 0.2, 0.3]


# peer: test_evaluate_batch_fails_closed_naming_index
async def test_evaluate_batch_fails_closed_naming_index() -> None:
    c = _custom({}, {2})
    with pytest.raises(
        ClassifierError, match=r"^classifier: state 1: evaluate raised ValueError: boom 2$"
    ):
        await c.evaluate_batch([1, 2, 3], questions([noul("q", "?")]))


# peer: test_evaluate_batch_names_lowest_failing_index
async def test_evaluate_batch_names_lowest_failing_index(autojump_clock: Any) -> None:
    # state index 2 fails first (no delay), index 1 later: the lowest index is named.
    c = _custom({2: 5.0}, {2, 3})
    with pytest.raises(
        ClassifierError, match=r"^classifier: state 1: evaluate raised ValueError: boom 2$"
    ):
        await c.evaluate_batch([1, 2, 3], questions([noul("q", "?")]))


# peer: test_evaluate_batch_empty_sends_nothing
async def test_evaluate_batch_empty_sends_nothing() -> None:
    async with served([answer(_noul(0.5))]) as (provider, c):
        with pytest.raises(ClassifierError, match="at least one state"):
            await c.evaluate_batch([], questions([noul("q", "?")]))
    assert provider.requests == []
