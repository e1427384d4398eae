"""Typed judgments (SPEC §8B): ask a classifier typed questions, gate on the answers.

The judgment backend here is a FakeProvider on loopback answering ``/systemone`` with
recorded answers; point ``base_url`` at a real backend and nothing else changes.
"""

import json

import trio

from toolnexus_trio.judge import (
    Policy,
    Rule,
    ToolGuardClassifier,
    ask,
    choice,
    context,
    create_classifier,
    gate,
    noul,
)
from toolnexus_trio.testing import open_fake_provider

QUESTIONS = [
    noul("fixable", "Can an agent fix this bug from the report alone?"),
    choice(
        "component",
        "Which component owns the fix?",
        {"pricing": "coupon and discount code", "checkout": "the HTTP checkout handler"},
    ),
]
TRIAGE = {  # what the backend answers about the bug report
    "model": "typesafe/jev-1.13",
    "answers": {
        "fixable": {"type": "noul", "noul": 0.91},
        "component": {
            "type": "choice",
            "choice": "checkout",
            "confidence": 0.88,
            "probabilities": {"pricing": 0.12, "checkout": 0.88},
        },
    },
    "usage": {"input_tokens": 120, "output_tokens": 18},
}
VAGUE = {"answers": {"fixable": {"type": "noul", "noul": 0.5}}}
RISK = {"answers": {"risk": {"type": "score", "score": 2.7, "confidence": 0.93}}}


async def main() -> None:
    script = [{"text": json.dumps(body)} for body in (TRIAGE, TRIAGE, VAGUE, RISK)]
    async with (
        open_fake_provider(script) as backend,
        create_classifier(base_url=backend.base_url, api_key_env="") as classifier,
    ):
        report = context("triage bugs", "checkout returns 500 when a coupon is applied")
        answers = await ask(classifier, report, QUESTIONS)
        fixable, component = answers["fixable"], answers["component"]
        print(f"fixable: p={fixable.value()} band={fixable.band}")
        sure = component.sure
        print(f"component: {component.choice()} (confidence {component.value()}, sure={sure})")

        rules = [
            Rule(question="fixable", below=0.3, action="close"),
            Rule(question="component", is_="checkout", action="assign", target="checkout-team"),
        ]
        decided = await gate(classifier, report, QUESTIONS, Policy(rules=rules, default="triage"))
        print(f"gate: {decided.action} -> {decided.target}")

        unsure = await gate(classifier, context("triage bugs", "it is broken"), QUESTIONS, rules)
        request = unsure.request  # the SPEC §10 request a human or wait_for answers
        reason = request.data["reason"] if request and request.data else ""
        print(f"gate: {unsure.action} ({reason}, request {request.id if request else ''})")

        guard = ToolGuardClassifier(classifier, on_error="closed")
        verdict = await guard.check({"name": "drop_table", "arguments": {"table": "users"}})
        print(f"tool guard: {verdict.action} ({verdict.reason}, risk {verdict.risk})")


trio.run(main)
