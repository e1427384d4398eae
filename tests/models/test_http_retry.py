"""Retries (SPEC §8 "Resilience"): statuses, network errors, backoff, Retry-After, on_error,
and error messages that are short and never carry the key."""

from __future__ import annotations

import itertools
import socket
from typing import Any

import attrs
import pytest
import trio
from http_helpers import KEY, STYLES, options, served
from trio.abc import Clock

from toolnexus_trio import ClientOptions, ErrorInfo, GenerateError, create_client
from toolnexus_trio.models._http import backoff_seconds, retry_after_seconds


def gaps(provider: Any) -> list[float]:
    times = [r.received_at for r in provider.requests]
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0", 0), ("3", 3), (" 7 ", 7), ("2147483647", 2147483647), ("2147483648", None),
     ("1.5", None), ("-1", None), ("+1", None), ("", None), (None, None), ("soon", None),
     ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("\u0663", None), ("1e3", None)],
)  # fmt: skip
def test_retry_after_is_delay_seconds_only(value: str | None, seconds: int | None) -> None:
    assert retry_after_seconds(value) == seconds


def test_backoff_is_base_times_two_to_the_attempt_plus_jitter() -> None:
    for attempt, low in [(0, 0.5), (1, 1.0), (2, 2.0)]:
        for _ in range(50):
            assert low <= backoff_seconds(500, attempt) <= low + 0.1


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_default_retryable_statuses(
    style: str, status: int, socket_autojump_clock: Clock
) -> None:
    script = [{"status": status}, {"status": status}, {"text": "ok"}]
    async with served(style, script, retry_base_ms=1000) as (provider, client):
        result = await client.run("hi")
    assert result.text == "ok" and len(provider.requests) == 3
    first, second = gaps(provider)
    assert 1.0 <= first <= 1.15 and 2.0 <= second <= 2.15


@pytest.mark.parametrize("status", [400, 401, 404, 418])
async def test_other_statuses_fail_at_once(status: int, socket_autojump_clock: Clock) -> None:
    async with served("openai", [{"status": status}, {"text": "never"}]) as (provider, client):
        with pytest.raises(GenerateError) as caught:
            await client.run("hi")
    assert len(provider.requests) == 1 and caught.value.status == status
    assert caught.value.result is not None
    assert caught.value.result.messages == [{"role": "user", "content": "hi"}]


async def test_retryable_statuses_adds_to_the_set(socket_autojump_clock: Clock) -> None:
    script = [{"status": 418}, {"text": "ok"}]
    async with served("openai", script, retryable_statuses=[418]) as (provider, client):
        assert (await client.run("hi")).text == "ok"
    assert len(provider.requests) == 2


async def test_retries_are_bounded(socket_autojump_clock: Clock) -> None:
    script = [{"status": 503}] * 4
    async with served("anthropic", script, retries=2) as (provider, client):
        with pytest.raises(GenerateError, match="HTTP 503"):
            await client.run("hi")
    assert len(provider.requests) == 3


@pytest.mark.parametrize(
    ("header", "low", "high"),
    [("0", 0.0, 0.05), ("3", 3.0, 3.05), ("1.5", 1.0, 1.15), ("-1", 1.0, 1.15),
     ("Wed, 21 Oct 2015 07:28:00 GMT", 1.0, 1.15), ("99999999999", 1.0, 1.15)],
)  # fmt: skip
async def test_retry_after_header(
    header: str, low: float, high: float, socket_autojump_clock: Clock
) -> None:
    script = [{"status": 429, "retry_after": header}, {"text": "ok"}]
    async with served("openai", script, retry_base_ms=1000) as (provider, client):
        assert (await client.run("hi")).text == "ok"
    assert low <= gaps(provider)[0] <= high


async def test_on_error_classifies_each_attempt_within_retries(
    socket_autojump_clock: Clock,
) -> None:
    seen: list[ErrorInfo] = []

    async def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"  # even a 400, which the default would not retry

    script = [{"status": 400}] * 5
    async with served("openai", script, on_error=on_error, retries=2) as (provider, client):
        with pytest.raises(GenerateError):
            await client.run("hi")
    assert len(provider.requests) == 3  # "retry" is still bounded by retries
    assert [(i.status, i.attempt, i.retryable, i.error) for i in seen] == [
        (400, 0, False, None), (400, 1, False, None), (400, 2, False, None)
    ]  # fmt: skip


async def test_on_error_fail_stops_a_retryable_error(socket_autojump_clock: Clock) -> None:
    def on_error(info: ErrorInfo) -> str:
        return "fail"

    script = [{"status": 503}, {"text": "never"}]
    async with served("openai", script, on_error=on_error) as (provider, client):
        with pytest.raises(GenerateError, match="HTTP 503"):
            await client.run("hi")
    assert len(provider.requests) == 1


@pytest.mark.parametrize("decision", ["Retry", None, 1])
async def test_on_error_must_answer_retry_or_fail(
    decision: object, socket_autojump_clock: Clock
) -> None:
    async with served("openai", [{"status": 503}], on_error=lambda info: decision) as (_, c):
        with pytest.raises(GenerateError, match="expected 'retry' or 'fail'"):
            await c.run("hi")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("style", STYLES)
async def test_network_errors_are_retried_then_reported(
    style: str, socket_autojump_clock: Clock
) -> None:
    seen: list[ErrorInfo] = []
    opts = ClientOptions(
        base_url=f"http://127.0.0.1:{closed_port()}/v1", style=style,  # type: ignore[arg-type]
        model="m", api_key=KEY, on_error=lambda i: seen.append(i) or "retry",
    )  # fmt: skip
    async with create_client(opts) as client:
        with pytest.raises(GenerateError, match="ConnectError") as caught:
            await client.run("hi")
    assert [(i.status, i.attempt, i.retryable) for i in seen] == [
        (None, 0, True), (None, 1, True), (None, 2, True)
    ]  # fmt: skip
    assert all(isinstance(i.error, Exception) for i in seen)
    assert caught.value.result is not None and caught.value.status is None


async def test_error_bodies_are_truncated_and_redacted(socket_autojump_clock: Clock) -> None:
    body = f"invalid key {KEY} " + "x" * 5000 + KEY
    # (a 400: a 401 or 403 body is never quoted at all, tests/test_consumer_decisions.py)
    async with served("openai", [{"status": 400, "body": body}]) as (_, client):
        with pytest.raises(GenerateError) as caught:
            await client.run("hi")
    message = str(caught.value)
    assert KEY not in message and "[redacted]" in message
    assert "HTTP 400" in message and len(message) < 700


async def test_a_connection_dropped_mid_json_body_is_retried(socket_autojump_clock: Clock) -> None:
    script = [{"text": "lost", "drop_after": 0}, {"text": "ok"}]
    async with served("openai", script) as (provider, client):
        assert (await client.run("hi")).text == "ok"
    assert len(provider.requests) == 2


async def test_the_pool_is_the_callers_when_given(socket_autojump_clock: Clock) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:
        async with served("openai", [{"text": "a"}, {"text": "b"}], http_client=http) as (_, c):
            await c.run("one")
        # The client did not close a pool it does not own.
        assert not http.is_closed
        async with served("openai", [{"text": "b"}]) as (provider, _):
            other = create_client(attrs.evolve(options(provider, "openai"), http_client=http))
            assert (await other.run("two")).text == "b"
            await other.aclose()
        assert not http.is_closed


# -- the longest Retry-After honoured (issue 17 item 26) -------------------------------


@pytest.mark.parametrize("style", STYLES)
async def test_a_retry_after_past_max_retry_after_fails_at_once(
    style: str, socket_autojump_clock: Clock
) -> None:
    """Retry-After: 2147483647 slept for 68 years; past max_retry_after (60 s by
    default) the call fails now, with the status and the server's delay."""
    script = [{"status": 429, "retry_after": "2147483647"}, {"text": "never"}]
    async with served(style, script) as (provider, client):
        started = trio.current_time()
        with pytest.raises(GenerateError) as caught:
            await client.run("hi")
        waited = trio.current_time() - started
    message = str(caught.value)
    assert "HTTP 429" in message and "Retry-After: 2147483647 s" in message
    assert "max_retry_after (60 s)" in message
    assert caught.value.status == 429 and caught.value.result is not None
    assert len(provider.requests) == 1 and waited < 60  # (virtual time: it did not sleep)


@pytest.mark.parametrize(
    ("limit", "header", "retried"), [(60.0, "60", True), (60.0, "61", False), (5, "6", False),
                                     (0, "0", True), (0, "1", False), (3600, "3600", True)]
)  # fmt: skip
async def test_max_retry_after_is_the_longest_delay_honoured(
    limit: float, header: str, retried: bool, socket_autojump_clock: Clock
) -> None:
    script = [{"status": 503, "retry_after": header}, {"text": "ok"}]
    async with served("openai", script, max_retry_after=limit) as (provider, client):
        if retried:
            assert (await client.run("hi")).text == "ok"
            assert gaps(provider)[0] >= int(header)  # the whole delay was waited
        else:
            with pytest.raises(GenerateError, match=f"Retry-After: {header} s") as caught:
                await client.run("hi")
            assert caught.value.status == 503 and len(provider.requests) == 1


async def test_a_retry_after_that_would_not_be_retried_anyway_is_the_plain_error(
    socket_autojump_clock: Clock,
) -> None:
    script = [{"status": 429, "retry_after": "999999"}]
    async with served("openai", script, retries=0) as (_, client):
        with pytest.raises(GenerateError, match="HTTP 429") as caught:
            await client.run("hi")
    assert "max_retry_after" not in str(caught.value)


@pytest.mark.parametrize("limit", [-1, float("nan"), float("inf"), "60", True])
def test_max_retry_after_must_be_a_finite_number_of_seconds(limit: Any) -> None:
    with pytest.raises(ValueError, match="max_retry_after"):
        create_client(
            ClientOptions(base_url="http://127.0.0.1:9/v1", style="openai", model="m",
                          max_retry_after=limit)
        )  # fmt: skip
