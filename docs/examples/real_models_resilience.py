"""Real models: retries, errors and cancellation, against a FakeProvider that misbehaves.

The provider answers 429 with ``Retry-After: 0``, then 503, then succeeds; a 409
(which the default rule fails at once) is retried because ``on_error`` says so; a 400
fails at once; a stalled answer is cut off by the run's token, by ``run_timeout_ms``
and by an enclosing Trio scope, and each time the provider sees the connection close.
"""

from typing import Any

import trio

from toolnexus_trio import (
    CancelToken,
    ClientOptions,
    ErrorInfo,
    GenerateError,
    RunTimeout,
    create_client,
)
from toolnexus_trio.testing import FakeProvider, open_fake_provider


def options(provider: FakeProvider, **kw: Any) -> ClientOptions:
    return ClientOptions(base_url=provider.base_url, style="anthropic", model="claude-x",
                         api_key="sk-ant-example", **kw)  # fmt: skip


async def retries() -> None:
    script = [{"status": 429, "retry_after": "0"}, {"status": 503}, {"text": "third time lucky"}]
    async with open_fake_provider(script) as provider:
        # [retries]
        # 429/500/502/503/504 (plus retryable_statuses) and network errors are retried
        # `retries` times, after retry_base_ms * 2**attempt ms (+ up to 100 ms of jitter),
        # or after Retry-After seconds when the server sends that header.
        client = create_client(options(provider, retries=2, retry_base_ms=50))
        async with client:
            result = await client.run("Hello?")
        # [/retries]
    print(f"retries: a 429, a 503, then {result.text!r} ({len(provider.requests)} requests)")

    # [on-error]
    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)  # error (network), status (HTTP), attempt, retryable
        return "retry" if info.status == 409 else "fail"

    # [/on-error]
    async with (
        open_fake_provider([{"status": 409}, {"text": "busy, then fine"}]) as provider,
        create_client(options(provider, on_error=on_error, retry_base_ms=10)) as client,
    ):
        result = await client.run("Hello?")
    print(f"on_error saw {[(i.status, i.attempt, i.retryable) for i in seen]} and retried;")
    print(f"  then {result.text!r}")

    body = '{"error": {"message": "max_tokens: too large (key sk-ant-example)"}}'
    async with (
        open_fake_provider([{"status": 400, "body": body}]) as provider,
        create_client(options(provider)) as client,
    ):
        # [errors]
        try:
            await client.run("Hello?")
        except GenerateError as exc:
            status, message, transcript = exc.status, str(exc), exc.result
        # [/errors]
    # the key is redacted from the quoted body; a 400 is not retried
    print(f"a {status} raises GenerateError: {message}")
    print(f"  after {len(provider.requests)} request; the transcript so far has ", end="")
    print(f"{len(transcript.messages) if transcript else 0} message(s)")


async def cancellation() -> None:
    async with (
        open_fake_provider([{"stall": True}, {"text": "still here"}]) as provider,
        create_client(options(provider)) as client,
    ):
        # [cancel-token]
        token = CancelToken()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon, token)  # the user presses stop at 100 ms
            result = await client.run("Write a novel", cancel=token)
        print(f"a cancel token fired at 100 ms: the run ends {result.status!r}")
        # [/cancel-token]
        request = provider.requests[0]
        with trio.fail_after(5):
            await request.closed.wait()  # the provider saw the connection end
        print(f"  the server saw the request's connection closed: {request.closed.is_set()}")
        again = await client.run("Still there?")  # the pool is still usable
    print(f"  and the same client answers the next run: {again.text!r}")

    async with open_fake_provider([{"stall": True}]) as provider:
        async with create_client(options(provider, run_timeout_ms=100)) as client:
            # [run-timeout]
            try:
                await client.run("Write a novel")
            except RunTimeout as exc:
                partial = exc.result  # the balanced transcript so far
            # [/run-timeout]
            print(f"run_timeout_ms=100: RunTimeout, the partial result's limit {partial.limit!r}")
        with trio.fail_after(5):
            await provider.requests[0].closed.wait()

    async with open_fake_provider([{"stall": True}]) as provider:
        async with create_client(options(provider)) as client:
            # [scope]
            with trio.move_on_after(0.1) as scope:
                await client.run("Write a novel")  # raises Cancelled inside the scope
            # [/scope]
            print(f"a Trio scope cancelled the run at 100 ms: {scope.cancelled_caught}")
        with trio.fail_after(5):
            await provider.requests[0].closed.wait()
        print(f"  and the server saw its connection closed: {provider.requests[0].closed.is_set()}")


async def cancel_soon(token: CancelToken) -> None:
    await trio.sleep(0.1)
    token.cancel("the user pressed stop")


async def main() -> None:
    await retries()
    await cancellation()


if __name__ == "__main__":
    trio.run(main)
