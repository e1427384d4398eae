"""The SPEC §8B classifier against the shared fixtures, over a real loopback backend.

Each test names the toolnexus 0.21 test (tests/test_classifier.py) it answers in a
``# peer:`` comment; the fixtures are the peer's (tests/fixtures/judge, MIT).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import sys
from typing import Any

import pytest
import trio
from judge_helpers import KEY, answer, load, served
from trio.abc import Clock

from toolnexus_trio.judge import (
    MAX_CHOICE_OPTIONS,
    ChoiceQuestion,
    ClassifierError,
    ClassifierUsage,
    NoulCriteria,
    NoulQuestion,
    RecordedDecision,
    ScoreQuestion,
    canonical_request,
    choice_over,
    create_classifier,
    near_uniform,
    question_from_wire,
)
from toolnexus_trio.judge._decision import parse_decision
from toolnexus_trio.models import ErrorInfo

CANONICAL = ["base", "hardened", "numbers", "wide", "degenerate", "near-uniform"]


def _questions(request: dict[str, Any]) -> dict[str, Any]:
    return {k: question_from_wire(v) for k, v in request["questions"].items()}


# peer: test_canonical_bytes_and_sha_match_the_fixture
@pytest.mark.parametrize("name", CANONICAL)
def test_canonical_bytes_and_sha_match_the_fixture(name: str) -> None:
    fixture = load(name)
    request = fixture["request"]
    data = canonical_request(request["model"], _questions(request))
    assert data == fixture["canonical"].encode()
    assert hashlib.sha256(data).hexdigest() == fixture["canonicalSha256"]
    assert len(data) == fixture["canonicalBytes"]
    # The wire form in, the same bytes out.
    assert canonical_request(request["model"], request["questions"]) == data


# peer: test_canonical_bytes_and_sha_match_every_decisions_entry
def test_canonical_bytes_and_sha_match_every_decisions_entry() -> None:
    entries = load("decisions")["entries"]
    hashes = set()
    for entry in entries:
        data = canonical_request(entry["request"]["model"], _questions(entry["request"]))
        assert data == entry["canonical"].encode()
        hashes.add(hashlib.sha256(data).hexdigest())
        assert hashes == {entry["canonicalSha256"]}
    assert len(entries) == 3 and len(hashes) == 1


# peer: test_absent_and_empty_noul_criteria_are_different_bytes
def test_absent_and_empty_noul_criteria_are_different_bytes() -> None:
    absent = canonical_request("m", {"q": NoulQuestion("x")})
    empty = canonical_request("m", {"q": NoulQuestion("x", NoulCriteria())})
    assert b"criteria" not in absent
    assert b'"criteria":{"false":"","true":""}' in empty


# peer: test_a_score_rubric_is_never_reordered
def test_a_score_rubric_is_never_reordered() -> None:
    data = canonical_request("m", {"s": ScoreQuestion("?", ["zero", "mid", "apex"])})
    assert b'"criteria":["zero","mid","apex"]' in data


# peer: test_choice_over_builds_a_choice_from_named_items
def test_choice_over_builds_a_choice_from_named_items() -> None:
    items = {"bash": "runs a shell command", "read": "reads a file"}
    assert choice_over("Which tool?", items) == ChoiceQuestion("Which tool?", items)
    assert choice_over("Which tool?", list(items.items())) == ChoiceQuestion("Which tool?", items)


# peer: test_base_parses_to_the_expected_answers
def test_base_parses_to_the_expected_answers() -> None:
    fixture = load("base")
    decision = parse_decision(fixture["response"])
    expect = fixture["expect"]
    assert decision.calibrated is expect["calibrated"] is True
    department = decision.choice("department")
    assert department.choice == "shipping" and department.confidence == 0.41
    assert department.near_uniform is False
    assert department.probabilities == {"billing": 0.39, "technical": 0, "shipping": 0.61}
    assert decision.noul("is_refund_request").noul == 0.98
    urgency = decision.score("urgency")
    assert (urgency.score, urgency.confidence) == (1.21, 0.57)
    assert urgency.levels() == [("0", "routine"), ("1", "elevated"), ("2", "urgent")]
    assert decision.model == "typesafe/jev-1.13-20260917"
    assert (decision.usage.input_tokens, decision.usage.output_tokens) == (398, 72)


# peer: test_a_wrong_type_or_absent_read_raises
def test_a_wrong_type_or_absent_read_raises() -> None:
    decision = parse_decision(load("base")["response"])
    with pytest.raises(ClassifierError, match="'department' is a choice answer, not noul"):
        decision.noul("department")
    with pytest.raises(ClassifierError, match="'is_refund_request' is a noul answer, not score"):
        decision.score("is_refund_request")
    with pytest.raises(ClassifierError, match="no answer 'nope'"):
        decision.choice("nope")


# peer: test_numbers_parse_numerically_never_as_strings
def test_numbers_parse_numerically_never_as_strings() -> None:
    fixture = load("numbers")
    decision = parse_decision(fixture["response"])
    parse = fixture["expect"]["parse"]
    assert decision.score("urgency").score == parse["answers.urgency.score"]
    assert decision.score("urgency").probabilities["0"] == parse["answers.urgency.probabilities.0"]
    assert decision.noul("is_expensive").noul == parse["answers.is_expensive.noul"] == 0
    assert decision.usage.cost == parse["usage.cost"]
    assert isinstance(decision.usage.cost, float)


# peer: test_levels_sorts_by_level_not_by_string
def test_levels_sorts_by_level_not_by_string() -> None:
    legend = {str(i): f"level {i}" for i in (10, 2, 0, 1)}
    body = {"answers": {"s": {"type": "score", "score": 1, "confidence": 0.5, "legend": legend}}}
    levels = parse_decision(body).score("s").levels()
    assert [k for k, _ in levels] == ["0", "1", "2", "10"]


# peer: test_wide_carries_forty_probabilities_and_is_not_near_uniform
def test_wide_carries_forty_probabilities_and_is_not_near_uniform() -> None:
    fixture = load("wide")
    decision = parse_decision(fixture["response"])
    wide = [a for a in decision.answers.values() if a.type == "choice"]
    assert wide
    for a in wide:
        assert len(a.probabilities) == 40  # type: ignore[union-attr]
        assert a.near_uniform is False  # type: ignore[union-attr]


# peer: test_near_uniform_matches_the_fixture_on_all_four_answers
def test_near_uniform_matches_the_fixture_on_all_four_answers() -> None:
    fixture = load("near-uniform")
    decision = parse_decision(fixture["response"])
    for key, want in fixture["expect"]["answers"].items():
        assert decision.choice(key).near_uniform is want["nearUniform"], key
    assert fixture["expect"]["tolerance"] == 0.05


# peer: test_near_uniform_edge_cases
def test_near_uniform_edge_cases() -> None:
    assert near_uniform({}) is False
    assert near_uniform({"only": 1.0}) is True
    assert near_uniform({"a": 0.5499, "b": 0.4501}) is True
    assert near_uniform({"a": 0.5501, "b": 0.4499}) is False
    assert near_uniform({"a": 0.2, "b": 0.2}) is False


# peer: test_degenerate_criteria_warn_once_per_key_and_change_no_bytes
async def test_degenerate_criteria_warn_once_per_key_and_change_no_bytes() -> None:
    fixture = load("degenerate")
    request = fixture["request"]
    events: list[dict[str, Any]] = []
    reply = {"answers": {}, "usage": {"input_tokens": 1, "output_tokens": 1}}
    async with served([answer(reply)] * 2, on_metric=events.append) as (provider, c):
        for _ in range(2):
            await c.evaluate(request["state"], _questions(request))
    warnings = [e for e in events if e["event"] == "classifier.warning"]
    assert sorted(e["question"] for e in warnings) == fixture["expect"]["warnings"]
    for e in warnings:
        assert e["warning"].startswith(f"classifier: question {e['question']!r} has degenerate")
        assert "(SPEC.md §8B)" in e["warning"]
    for sent in provider.requests:
        body = dict(sent.json)
        assert body.pop("state") == request["state"]
        assert (
            hashlib.sha256(canonical_request(body["model"], body["questions"])).hexdigest()
            == (fixture["canonicalSha256"])
        )


# peer: test_single_option_choice_is_never_reported
async def test_single_option_choice_is_never_reported() -> None:
    events: list[dict[str, Any]] = []
    reply = {"answers": {}}
    async with served([answer(reply)], on_metric=events.append) as (_, c):
        await c.evaluate("s", {"only": ChoiceQuestion("?", {"yes": "yes"})})
    assert [e["event"] for e in events] == ["classifier.evaluate"]


# peer: test_limits_are_rejected_before_any_request
@pytest.mark.parametrize(
    ("question", "rule"),
    [
        (ChoiceQuestion("?", {}), "1..255 options, got 0"),
        (ChoiceQuestion("?", {str(i): "x" for i in range(MAX_CHOICE_OPTIONS + 1)}), "got 256"),
        (ScoreQuestion("?", ["one"]), "2..10 ordered levels, got 1"),
        (ScoreQuestion("?", [str(i) for i in range(11)]), "2..10 ordered levels, got 11"),
    ],
)
async def test_limits_are_rejected_before_any_request(question: Any, rule: str) -> None:
    async with served([answer({"answers": {}})]) as (provider, c):
        with pytest.raises(ClassifierError, match=rf"question 'bad_key': .*{rule}"):
            await c.evaluate("s", {"ok": NoulQuestion("?"), "bad_key": question})
    assert provider.requests == []


# peer: test_a_limit_failure_emits_an_error_metric
async def test_a_limit_failure_emits_an_error_metric() -> None:
    events: list[dict[str, Any]] = []
    async with served(on_metric=events.append) as (_, c):
        with pytest.raises(ClassifierError):
            await c.evaluate("s", {"s": ScoreQuestion("?", ["one"])})
    assert [(e["event"], e["status"]) for e in events] == [("classifier.evaluate", "error")]


# peer: test_no_questions_is_an_error
async def test_no_questions_is_an_error() -> None:
    async with served() as (provider, c):
        with pytest.raises(ClassifierError, match="no questions"):
            await c.evaluate("s", {})
    assert provider.requests == []


# peer: test_no_credential_or_expanded_header_on_any_error_or_metric_path
@pytest.mark.parametrize("status", [401, 403])
async def test_no_credential_or_expanded_header_on_any_error_or_metric_path(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_ORG_TOKEN", "org-secret-42")
    echo = json.dumps({"error": f"bad key {KEY} for org org-secret-42"})
    events: list[dict[str, Any]] = []
    headers = {"X-Org": "${JUDGE_ORG_TOKEN}"}
    async with served(
        [{"status": status, "body": echo}], headers=headers, on_metric=events.append
    ) as (
        provider,
        c,
    ):
        with pytest.raises(ClassifierError) as caught:
            await c.evaluate("s", {"q": NoulQuestion("?")})
    message = str(caught.value)
    assert str(status) in message and "/systemone" in message
    seen = message + json.dumps(events) + repr(caught.value.__cause__)
    assert KEY not in seen and "org-secret-42" not in seen and "bad key" not in seen
    assert provider.requests[0].headers["x-org"] == "org-secret-42"


# peer: test_a_non_auth_backend_cause_is_surfaced_intact
async def test_a_non_auth_backend_cause_is_surfaced_intact() -> None:
    body = json.dumps({"error": "Too many choices for question 'q'"})
    async with served([{"status": 400, "body": body}]) as (_, c):
        with pytest.raises(ClassifierError, match=r"400.*Too many choices for question 'q'"):
            await c.evaluate("s", {"q": NoulQuestion("?")})


# peer: test_headers_expand_at_call_time
async def test_headers_expand_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = answer({"answers": {}})
    monkeypatch.setenv("JUDGE_TENANT", "first")
    async with served([reply, reply], headers={"X-Tenant": "t-${JUDGE_TENANT}"}) as (provider, c):
        await c.evaluate("s", {"q": NoulQuestion("?")})
        monkeypatch.setenv("JUDGE_TENANT", "second")
        await c.evaluate("s", {"q": NoulQuestion("?")})
    assert [r.headers["x-tenant"] for r in provider.requests] == ["t-first", "t-second"]
    assert provider.requests[0].headers["authorization"] == f"Bearer {KEY}"


# peer: test_the_posted_body_is_canonical_and_carries_state_verbatim
@pytest.mark.parametrize("name", ["base", "hardened", "numbers"])
async def test_the_posted_body_is_canonical_and_carries_state_verbatim(name: str) -> None:
    fixture = load(name)
    request = fixture["request"]
    async with served([answer({"answers": {}})]) as (provider, c):
        await c.evaluate(request["state"], _questions(request))
    sent = provider.requests[0]
    assert sent.method == "POST" and sent.path == "/v1/systemone"
    body = dict(sent.json)
    state = body.pop("state")
    assert state == request["state"]
    assert json.dumps(state) == json.dumps(request["state"])  # -0.0 stays -0.0, 1e+21 too
    expected = json.loads(fixture["canonical"])
    assert body == expected and list(body) == list(expected)


# peer: test_request_params_and_body_transform_apply_in_spec_order
async def test_request_params_and_body_transform_apply_in_spec_order() -> None:
    seen: list[dict[str, Any]] = []

    def transform(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(body))
        return {**body, "transformed": True}

    params = {"model": "override-model", "temperature": 0}
    async with served(
        [answer({"answers": {}})], request_params=params, body_transform=transform
    ) as (
        provider,
        c,
    ):
        await c.evaluate("s", {"q": NoulQuestion("?")})
    assert seen[0]["model"] == "override-model" and seen[0]["temperature"] == 0
    sent = provider.requests[0].json
    assert sent["model"] == "override-model" and sent["transformed"] is True


# peer: test_body_transform_returning_none_leaves_the_body_unchanged
async def test_body_transform_returning_none_leaves_the_body_unchanged() -> None:
    async with served([answer({"answers": {}})], body_transform=lambda body: None) as (provider, c):
        await c.evaluate("s", {"q": NoulQuestion("?")})
    assert provider.requests[0].json == {
        "model": "typesafe/jev-1.13",
        "questions": {"q": {"instructions": "?", "type": "noul"}},
        "state": "s",
    }


def _gaps(provider: Any) -> list[float]:
    times = [r.received_at for r in provider.requests]
    return [b - a for a, b in itertools.pairwise(times)]


# peer: test_a_retryable_status_is_retried_within_the_budget
async def test_a_retryable_status_is_retried_within_the_budget(
    socket_autojump_clock: Clock,
) -> None:
    script = [{"status": 503}] * 3 + [answer({"answers": {}})]
    async with served(script, retries=2) as (provider, c):
        with pytest.raises(ClassifierError, match="503"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 3


# peer: test_retry_base_ms_scales_the_backoff_and_defaults_to_500
@pytest.mark.parametrize(("base", "first"), [(None, 0.5), (2000, 2.0)])
async def test_retry_base_ms_scales_the_backoff_and_defaults_to_500(
    base: int | None, first: float, socket_autojump_clock: Clock
) -> None:
    script = [{"status": 503}, {"status": 503}, answer({"answers": {}})]
    options = {} if base is None else {"retry_base_ms": base}
    async with served(script, timeout=60, **options) as (provider, c):
        await c.evaluate("s", {"q": NoulQuestion("?")})
    one, two = _gaps(provider)
    assert first <= one <= first + 0.15 and 2 * first <= two <= 2 * first + 0.15


# peer: test_on_error_can_refuse_to_retry
async def test_on_error_can_refuse_to_retry() -> None:
    infos: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        infos.append(info)
        return "fail"

    async with served([{"status": 503}, answer({"answers": {}})], on_error=on_error) as (
        provider,
        c,
    ):
        with pytest.raises(ClassifierError, match="503"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 1 and infos[0].status == 503 and infos[0].retryable


# peer: test_a_transport_fault_is_classified_and_retried
async def test_a_transport_fault_is_classified_and_retried(socket_autojump_clock: Clock) -> None:
    with socket.socket() as s:  # a port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    infos: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        infos.append(info)
        return "retry"

    async with create_classifier(
        base_url=f"http://127.0.0.1:{port}/v1", on_error=on_error, retries=2
    ) as c:
        with pytest.raises(ClassifierError, match="/systemone"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(infos) == 3
    assert all(i.error is not None and i.status is None and i.retryable for i in infos)


# peer: test_529_overloaded_is_retryable_by_default
async def test_529_overloaded_is_retryable_by_default(socket_autojump_clock: Clock) -> None:
    async with served([{"status": 529}, answer({"answers": {}})]) as (provider, c):
        await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 2


# peer: test_an_unlisted_5xx_stays_terminal_by_default
@pytest.mark.parametrize("status", [501, 505])
async def test_an_unlisted_5xx_stays_terminal_by_default(status: int) -> None:
    async with served([{"status": status}, answer({"answers": {}})]) as (provider, c):
        with pytest.raises(ClassifierError, match=str(status)):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 1


# peer: test_retryable_statuses_widens_the_set_and_keeps_the_defaults
async def test_retryable_statuses_widens_the_set_and_keeps_the_defaults(
    socket_autojump_clock: Clock,
) -> None:
    script = [{"status": 409}, {"status": 503}, answer({"answers": {}})]
    async with served(script, retryable_statuses=[409]) as (provider, c):
        await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 3


# peer: test_retryable_statuses_does_not_make_a_permanent_5xx_retryable
async def test_retryable_statuses_does_not_make_a_permanent_5xx_retryable() -> None:
    async with served([{"status": 501}, answer({"answers": {}})], retryable_statuses=[501]) as (
        provider,
        c,
    ):
        with pytest.raises(ClassifierError, match="501"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 1


# peer: test_on_error_fail_overrides_a_status_the_host_listed_as_retryable
async def test_on_error_fail_overrides_a_status_the_host_listed_as_retryable() -> None:
    script = [{"status": 409}, answer({"answers": {}})]
    async with served(script, retryable_statuses=[409], on_error=lambda info: "fail") as (
        provider,
        c,
    ):
        with pytest.raises(ClassifierError, match="409"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 1


# peer: test_a_4xx_other_than_429_stays_terminal
async def test_a_4xx_other_than_429_stays_terminal() -> None:
    async with served([{"status": 422}, answer({"answers": {}})]) as (provider, c):
        with pytest.raises(ClassifierError, match="422"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
    assert len(provider.requests) == 1


# peer: test_a_typesafe_shaped_usage_block_reports_an_absent_cost_not_a_free_call
# peer: test_d5_must_not_regress_classifier_cost_absent_is_not_zero (test_consumer_issues_86_93.py)
async def test_an_absent_cost_is_none_not_free() -> None:
    assert ClassifierUsage().cost is None
    reply = answer({"answers": {}, "usage": {"input_tokens": 3, "output_tokens": 2}})
    async with served([reply]) as (_, c):
        decision = await c.evaluate("s", {"q": NoulQuestion("?")})
    assert decision.usage == ClassifierUsage(3, 2, None)


# peer: test_defaults_are_the_spec_defaults
def test_defaults_are_the_spec_defaults() -> None:
    c = create_classifier()
    assert (c.style, c.base_url, c.model, c.api_key_env, c.timeout) == (
        "systemone",
        "https://api.typesafe.ai/v1",
        "jev-latest",
        "TYPESAFE_API_KEY",
        10.0,
    )
    assert MAX_CHOICE_OPTIONS == 255


# peer: D5 rows on the classifier backend presets (test_consumer_issues_86_93.py)
def test_backend_presets_set_url_model_and_key_as_a_unit() -> None:
    c = create_classifier(backend="openrouter")
    assert (c.base_url, c.model, c.api_key_env) == (
        "https://openrouter.ai/api/v1",
        "typesafe/jev-1.13",
        "OPENROUTER_API_KEY",
    )
    t = create_classifier(backend="typesafe")
    assert (t.base_url, t.model, t.api_key_env) == (
        "https://api.typesafe.ai/v1",
        "jev-latest",
        "TYPESAFE_API_KEY",
    )
    with pytest.raises(ClassifierError, match=r"typesafe/jev-1\.13"):
        create_classifier(base_url="https://openrouter.ai/api/v1")


# peer: test_a_style_missing_its_required_option_is_rejected_at_construction
def test_a_style_missing_its_required_option_is_rejected_at_construction() -> None:
    with pytest.raises(ClassifierError, match="requires client"):
        create_classifier("llm")
    with pytest.raises(ClassifierError, match="requires evaluate"):
        create_classifier("custom")
    with pytest.raises(ClassifierError, match="unknown style"):
        create_classifier("magic")  # type: ignore[arg-type]


# peer: test_custom_style_delegates_to_the_host_function
async def test_custom_style_delegates_to_the_host_function() -> None:
    calls: list[tuple[Any, Any]] = []

    async def evaluate(state: Any, questions: Any) -> dict[str, Any]:
        calls.append((state, questions))
        await trio.lowlevel.checkpoint()
        return {"answers": {"q": {"type": "noul", "noul": 0.9}}}

    c = create_classifier("custom", evaluate=evaluate)
    decision = await c.evaluate({"x": 1}, {"q": NoulQuestion("?")})
    assert calls == [({"x": 1}, {"q": NoulQuestion("?")})]
    assert decision.calibrated is False and decision.noul("q").noul == 0.9


def _static() -> Any:
    entries = load("decisions")["entries"]
    decisions = [
        RecordedDecision(e["request"]["state"], e["request"]["questions"], e["response"])
        for e in entries
    ]
    return entries, create_classifier("static", model="typesafe/jev-1.13", decisions=decisions)


# peer: test_static_distinguishes_the_three_guard_bands
async def test_static_distinguishes_the_three_guard_bands() -> None:
    entries, c = _static()
    scores = []
    for e in entries:
        decision = await c.evaluate(e["request"]["state"], _questions(e["request"]))
        scores.append(decision.score("risk").score)
    assert [e["band"] for e in entries] == ["allow", "ask", "deny"]
    assert scores == [0.02, 2.25, 2.97]


# peer: test_static_errors_rather_than_guessing_on_an_unrecorded_state
async def test_static_errors_rather_than_guessing_on_an_unrecorded_state() -> None:
    entries, c = _static()
    state = {**entries[0]["request"]["state"], "command": "ls"}
    with pytest.raises(ClassifierError, match="no recorded decision"):
        await c.evaluate(state, _questions(entries[0]["request"]))


# peer: test_importing_the_module_constructs_nothing_and_touches_no_client
async def test_importing_the_module_constructs_nothing_and_touches_no_client() -> None:
    probe = (
        "import sys, toolnexus_trio\n"
        "assert 'toolnexus_trio.judge' not in sys.modules\n"
        "import httpx2\n"
        "made = []\n"
        "init = httpx2.AsyncClient.__init__\n"
        "httpx2.AsyncClient.__init__ = lambda self, *a, **k: (made.append(1), init(self, *a, **k))[1]\n"
        "from toolnexus_trio.judge import create_classifier\n"
        "create_classifier()\n"
        "print(len(made))\n"
    )
    out = await trio.run_process([sys.executable, "-c", probe], capture_stdout=True, check=True)
    assert out.stdout.decode().strip() == "0"
    async with served() as (provider, _):
        pass
    assert provider.requests == []


# peer: test_metrics_carry_the_evaluate_event_with_tokens
async def test_metrics_carry_the_evaluate_event_with_tokens() -> None:
    events: list[dict[str, Any]] = []
    fixture = load("base")
    async with served([answer(fixture["response"])], on_metric=events.append) as (_, c):
        await c.evaluate(fixture["request"]["state"], _questions(fixture["request"]))
    (event,) = events
    assert {k: v for k, v in event.items() if k != "ms"} == {
        "event": "classifier.evaluate",
        "status": "ok",
        "model": "typesafe/jev-1.13-20260917",
        "prompt_tokens": 398,
        "completion_tokens": 72,
    }
    assert isinstance(event["ms"], int)


# peer: test_absent_calibrated_decodes_as_true
@pytest.mark.parametrize(
    ("flag", "want"), [("absent", True), (None, True), (True, True), (False, False)]
)
def test_absent_calibrated_decodes_as_true(flag: Any, want: bool) -> None:
    body: dict[str, Any] = {"answers": {}}
    if flag != "absent":
        body["calibrated"] = flag
    assert parse_decision(body).calibrated is want


async def test_a_malformed_answer_is_a_clear_error() -> None:
    script = [{"text": "not json"}, answer({"answers": {"q": {"type": "noul", "noul": "high"}}})]
    async with served(script) as (_, c):
        with pytest.raises(ClassifierError, match="invalid JSON"):
            await c.evaluate("s", {"q": NoulQuestion("?")})
        with pytest.raises(ClassifierError, match=r"answers\.q\.noul is not a number"):
            await c.evaluate("s", {"q": NoulQuestion("?")})


async def test_a_cancel_aborts_the_call_and_is_not_swallowed(socket_autojump_clock: Clock) -> None:
    async with served([{"stall": True}]) as (provider, c):
        with trio.move_on_after(1) as scope:
            await c.evaluate("s", {"q": NoulQuestion("?")})
        assert scope.cancelled_caught
        await provider.requests[0].closed.wait()


async def test_the_timeout_bounds_an_evaluation(socket_autojump_clock: Clock) -> None:
    async with served([{"stall": True}], timeout=2) as (_, c):
        with pytest.raises(ClassifierError, match="timed out after 2 s"):
            await c.evaluate("s", {"q": NoulQuestion("?")})


async def test_the_llm_style_asks_a_client_and_parses_its_json() -> None:
    from toolnexus_trio import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    text = 'Sure. {"answers": {"q": {"type": "noul", "noul": 0.8}}} done'
    async with open_fake_provider([{"text": text}]) as provider:
        options = ClientOptions(base_url=provider.base_url, model="m", api_key="k", style="openai")
        async with create_client(options) as client:
            c = create_classifier("llm", client=client)
            decision = await c.evaluate({"m": "hi"}, {"q": NoulQuestion("Is it?")})
    assert decision.noul("q").noul == 0.8 and decision.calibrated is False
    prompt = json.dumps(provider.requests[0].json)
    assert "STATE:" in prompt and "QUESTIONS:" in prompt
