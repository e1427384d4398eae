"""toolnexus 0.21's consumer decisions (its issues #86-#93, D4 and D5): answer
constructors, the typed provider error, the public status and limit vocabularies.

Each test names the peer test it answers (``tests/test_consumer_issues_86_93.py`` in
toolnexus 0.21.0). Where we differ on purpose, the test says so and the docs too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
from http_helpers import served
from trio.abc import Clock

import toolnexus_trio
from toolnexus_trio import (
    RUN_STATUSES,
    Answer,
    GenerateError,
    Hooks,
    InProcessOptions,
    ProviderError,
    RunTimeout,
    ToolContext,
    answer_declined,
    answer_output,
    define_tool,
)
from toolnexus_trio import agents as agents_facade
from toolnexus_trio.agents import LIMITS, TASK_STATUSES, AgentDef, open_agent_runtime
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.models import (
    DEFAULT_RETRYABLE_STATUSES,
    MAX_ERROR_BODY,
    capped_error_body,
    safe_error_body,
)

# -- D4: answers ----------------------------------------------------------------------


def test_answer_output_builds_an_ok_answer_with_the_output() -> None:
    # peer: test_d4_answer_output_constructor
    assert answer_output("r1", "42") == Answer("r1", ok=True, data={"output": "42"})


@pytest.mark.parametrize("output", [42, None, {"a": 1}, b"bytes"])
def test_answer_output_refuses_a_non_string(output: Any) -> None:
    # peer: test_d4_a_non_string_output_errors_loudly
    with pytest.raises(TypeError, match="answer_output needs a str output"):
        answer_output("r1", output)


def test_answer_declined_builds_a_refusal_with_a_known_reason() -> None:
    # peer: test_d4_a9_answer_declined_constructor
    assert answer_declined("r1") == Answer("r1", ok=False, reason="declined")
    for reason in ("cancelled", "expired"):
        assert answer_declined("r1", reason) == Answer("r1", ok=False, reason=reason)
    with pytest.raises(ValueError, match="declined, cancelled, expired"):
        answer_declined("r1", "nope")


# -- D5: vocabularies -----------------------------------------------------------------


def test_the_run_and_task_status_vocabularies_are_public() -> None:
    # peer: test_d5_two_status_vocabularies_are_both_named. DIFFERENT (documented): a run
    # here can also end "cancelled"; "timeout" stays a task status only.
    assert {"done", "pending", "incomplete"} <= RUN_STATUSES
    assert RUN_STATUSES - {"done", "pending", "incomplete"} == {"cancelled"}
    assert "timeout" not in RUN_STATUSES and "timeout" in TASK_STATUSES
    assert len(TASK_STATUSES) == 7


def test_the_limit_and_task_status_names_are_public_api() -> None:
    # peer: test_d5_a20_the_two_vocabularies_are_public_api
    assert LIMITS == (
        "maxTurns",
        "maxTokens",
        "maxToolCalls",
        "maxWallMs",
        "maxChildren",
        "maxConcurrent",
        "maxDepth",
        "completion",
        "timeout",
    )
    exported = set(agents_facade.__all__)
    for value in LIMITS:
        name = "LIMIT_" + "".join("_" + c if c.isupper() else c for c in value).upper()
        assert name in exported and getattr(agents_facade, name) == value
    for value in TASK_STATUSES:
        name = f"TASK_STATUS_{value.upper()}"
        assert name in exported and getattr(agents_facade, name) == value
    assert {"LIMITS", "TASK_STATUSES"} <= exported
    assert "RUN_STATUSES" in toolnexus_trio.__all__


class _Model:
    """One tool call, then "ok"."""

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        if any(m.get("role") == "tool" for m in request.messages):
            return InProcessResponse(content="ok")
        return InProcessResponse(tool_calls=(InProcessToolCall("c1", "slow", {}),))


async def test_a_wait_timeout_sets_status_and_limit_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_d5_a17_wait_timeout_sets_status_and_limit_together and
    # test_d5_a18_status_and_limit_invariant_across_the_branches (the timeout branch;
    # the budget branches are pinned in tests/agents/test_runtime.py)
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "slow done"

    tool = define_tool("slow", "sleeps", None, slow)
    defs = {"a": AgentDef("a", "a worker", "you work", "m", tools=[tool])}
    async with open_agent_runtime(defs, generate=_Model()) as rt:
        h = rt.spawn(rt.root, "a")
        rt.wake(h, "go")
        early = await rt.wait(h, timeout_ms=500)
        assert (early.status, early.limit) == ("timeout", "timeout")
        late = await rt.wait(h)
        assert (late.status, late.limit) == ("done", None)


# -- D5: the typed provider error ------------------------------------------------------


async def test_a_provider_error_is_typed_and_keeps_the_raw_retry_after(
    socket_autojump_clock: Clock,
) -> None:
    # peer: test_d5_provider_error_is_typed and
    # test_d5_provider_error_carries_a_non_delay_seconds_retry_after_verbatim
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    body = json.dumps({"error": {"message": "slow down"}})
    script = [{"status": 429, "retry_after": date, "body": body}]
    async with served("openai", script, retries=0) as (_, client):
        with pytest.raises(ProviderError) as caught:
            await client.run("hi")
    error = caught.value
    assert isinstance(error, GenerateError)  # existing handlers keep working
    assert (error.status, error.retry_after, error.body) == (429, date, body)
    assert "HTTP 429" in str(error) and "slow down" in str(error)


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failure_bodies_never_surface(status: int, socket_autojump_clock: Clock) -> None:
    # peer: test_d5_auth_bodies_never_surface
    body = '{"error": "bad key for org_9f3 user alice@example.com"}'
    async with served("anthropic", [{"status": status, "body": body}]) as (_, client):
        with pytest.raises(ProviderError) as caught:
            await client.run("hi")
    assert caught.value.body == ""
    assert "alice" not in str(caught.value) and "org_9f3" not in str(caught.value)
    assert safe_error_body(status, body) == ""


def test_account_identifiers_are_redacted_not_merely_capped() -> None:
    # peer: test_d5_account_identifiers_are_redacted_not_merely_capped
    body = json.dumps(
        {"error": "quota", "user_id": "u-123", "org_id": "org-7", "organization": "acme"}
        | {"account_id": 991, "detail": "keep me"}
    )
    safe = safe_error_body(429, body)
    for secret in ("u-123", "org-7", "acme", "991"):
        assert secret not in safe
    assert json.loads(safe)["detail"] == "keep me"  # still JSON, the rest untouched
    assert json.loads(safe)["user_id"] == "[redacted]"


async def test_the_cap_is_for_the_message_only(socket_autojump_clock: Clock) -> None:
    # peer: test_d5_the_cap_is_message_only
    body = "x" * (MAX_ERROR_BODY * 3)
    async with served("openai", [{"status": 400, "body": body}]) as (_, client):
        with pytest.raises(ProviderError) as caught:
            await client.run("hi")
    assert caught.value.body == body
    assert str(caught.value).endswith("x" * MAX_ERROR_BODY + "…")
    assert capped_error_body(400, body) == "x" * MAX_ERROR_BODY + "…"
    assert capped_error_body(400, "short") == "short"


async def test_529_is_retried_by_default(socket_autojump_clock: Clock) -> None:
    # peer: test_d5_must_not_regress_429_is_retried (the set includes 529)
    assert {429, 500, 502, 503, 504, 529} == DEFAULT_RETRYABLE_STATUSES
    script = [{"status": 529}, {"text": "ok"}]
    async with served("anthropic", script) as (provider, client):
        assert (await client.run("hi")).text == "ok"
    assert len(provider.requests) == 2


async def test_the_run_timeout_message_names_the_budget(socket_autojump_clock: Clock) -> None:
    # peer: test_d5_timeout_message_names_the_budget (the option is run_timeout_ms here)
    script = [{"text": "late", "stall": True}]
    async with served("openai", script, run_timeout_ms=1000) as (_, client):
        with pytest.raises(RunTimeout, match=r"run timeout after 1000ms \(client run_timeout_ms"):
            await client.run("hi")


# -- the small gaps of issue 32 ----------------------------------------------------------


async def test_the_result_and_the_run_metric_name_the_model_actually_sent(
    socket_autojump_clock: Clock,
) -> None:
    # peer: the per-turn model of a before_llm hook is what RunResult.model reports
    metrics: list[dict[str, Any]] = []

    def per_turn(event: dict[str, Any]) -> dict[str, Any]:
        return {"model": "m-large"}

    hooks = Hooks(before_llm=per_turn)
    async with served("openai", [{"text": "ok"}], hooks=hooks, on_metric=metrics.append) as (
        provider,
        client,
    ):
        result = await client.run("hi")
    assert provider.requests[0].json["model"] == "m-large"
    assert result.model == "m-large"
    (run,) = [m for m in metrics if m["event"] == "run"]
    assert run["model"] == "m-large"
    async with served("openai", [{"text": "ok"}]) as (_, client):
        assert (await client.run("hi")).model == "m"  # no override: the configured one


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_body_transform_returning_none_sends_the_body_it_got(asynchronous: bool) -> None:
    # peer: body_transform returning None means unchanged (edits in place still count)
    def edit(body: dict[str, Any]) -> None:
        body["seed"] = 7

    async def edit_async(body: dict[str, Any]) -> None:
        edit(body)

    transform = edit_async if asynchronous else edit
    async with served("openai", [{"text": "ok"}], body_transform=transform) as (provider, c):
        assert (await c.run("hi")).text == "ok"
    assert provider.requests[0].json["seed"] == 7
    assert provider.requests[0].json["messages"] == [{"role": "user", "content": "hi"}]


async def test_a_body_transform_returning_another_kind_is_a_clear_error() -> None:
    async with served("openai", [{"text": "ok"}], body_transform=lambda body: [body]) as (_, c):
        with pytest.raises(GenerateError, match="body_transform returned list, not a dict or None"):
            await c.run("hi")


async def test_timeout_ms_is_the_contracts_name_for_the_run_budget(
    socket_autojump_clock: Clock,
) -> None:
    # peer: ClientOptions(timeout_ms=...) bounds the whole run
    async with served("openai", [{"text": "late", "stall": True}], timeout_ms=800) as (_, c):
        assert c.options.run_timeout_ms == 800
        with pytest.raises(RunTimeout, match="run timeout after 800ms"):
            await c.run("hi")
    options = InProcessOptions(model="m", generate=_Model(), timeout_ms=300)
    assert options.run_timeout_ms == 300
    with pytest.raises(ValueError, match="disagree"):
        InProcessOptions(model="m", generate=_Model(), timeout_ms=300, run_timeout_ms=200)
    with pytest.raises(ValueError, match="timeout_ms must be an integer >= 0"):
        InProcessOptions(model="m", generate=_Model(), timeout_ms=-1)
