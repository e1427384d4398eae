"""The FakeProvider as a process that also stamps when a client hangs up mid-answer.

``python -m benchmarks.http_provider --script FILE.json --closes CLOSES.txt`` serves
:class:`toolnexus_trio.testing.FakeProvider` (the same server as ``python -m
toolnexus_trio.testing serve``) with the script cycled, prints its base URL on the first
stdout line, and appends one line per request the client abandoned::

    <last user message of the request>\t<time.monotonic() when the server saw the close>

``time.monotonic()`` is the system-wide ``CLOCK_MONOTONIC`` on Linux, so a client
process can subtract its own ``time.monotonic()`` of the cancel. The server stamps the
close itself (``ReceivedRequest.closed_at``, when its read saw EOF); the stamp is only
converted to the monotonic clock here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

import trio

from toolnexus_trio.testing import FakeProvider, ReceivedRequest, load_script


def _marker(request: ReceivedRequest) -> str:
    body: Any = request.json if isinstance(request.json, dict) else {}
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return f"request-{id(request)}"


async def _serve(provider: FakeProvider, closes_path: str) -> None:
    with open(closes_path, "a", encoding="utf-8") as closes:  # noqa: ASYNC230 - local file, line-sized writes

        async def watch(request: ReceivedRequest) -> None:
            await request.closed.wait()
            assert request.closed_at is not None
            # trio's clock is perf_counter (CLOCK_MONOTONIC) plus an offset: remove it.
            stamp = time.monotonic() - (trio.current_time() - request.closed_at)
            closes.write(f"{_marker(request)}\t{stamp:.6f}\n")
            closes.flush()

        async with trio.open_nursery() as nursery:
            await nursery.start(provider.serve, "127.0.0.1", 0)
            print(provider.base_url, flush=True)
            index = 0
            while True:
                request = await provider.wait_request(index)
                nursery.start_soon(watch, request)
                index += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--script", required=True)
    parser.add_argument("--closes", required=True, help="file the close stamps go to")
    args = parser.parse_args()
    with open(args.script, encoding="utf-8") as f:
        steps, _ = load_script(json.load(f))
    provider = FakeProvider(steps, cycle=True)
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_serve, provider, args.closes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
