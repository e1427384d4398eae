"""A Tesseron conformance runner on Trio: it plays the gateway against a host.

Walks a fixture's steps over :func:`toolnexus_trio.gateway._ws_client.connect_websocket`:

- ``recv``: the next frame from the host must match structurally (only the named
  keys are checked, arrays match element-wise as a prefix, ``~`` matchers apply);
- ``send``: write a frame, resolving ``~ref:`` and omitting keys set to ``~absent``;
- ``expectClosed``: the host must close the connection without sending a frame;
- ``expectSilence``: no frame matching the pattern may arrive within the timeout
  (other frames are kept for later steps);
- ``dropTransport`` / ``reconnect``: close our connection / dial again.

Per-step ``timeoutMs`` (default 2000) and ``label`` (reported to an optional
``after_step`` hook once the step completed) are honoured; ``notBefore`` must name
an already completed label (steps run strictly in order). A failure raises
:class:`ConformanceFailure` naming the fixture id, the step index, the expected
shape and the actual frame. The fixture format is the Tesseron conformance suite's
(CC BY 4.0, Tesseron / Kenny Vaneetvelde); this code is our own.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio.gateway._ws_client import connect_websocket
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "ConformanceFailure",
    "FixtureError",
    "load_fixture",
    "match",
    "resolve",
    "run_fixture",
]

DEFAULT_TIMEOUT_MS = 2000
_STEP_KINDS = ("recv", "send", "expectClosed", "expectSilence", "dropTransport", "reconnect")
_STEP_OPTIONS = frozenset({"timeoutMs", "label", "notBefore", "note"})
_TYPE_MATCHERS: dict[str, Callable[[Any], bool]] = {
    "~string": lambda v: isinstance(v, str),
    "~number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "~boolean": lambda v: isinstance(v, bool),
    "~object": lambda v: isinstance(v, dict),
    "~array": lambda v: isinstance(v, list),
}

AfterStep = Callable[[str], Awaitable[None]]


class ConformanceFailure(AssertionError):
    """The host did not behave as the fixture requires."""


class FixtureError(ValueError):
    """The fixture itself is malformed or uses something this runner does not know."""


def load_fixture(path: Path) -> dict[str, Any]:
    """Read one fixture file."""
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise FixtureError(f"{path}: a fixture is a JSON object")
    return data


# -- matching ------------------------------------------------------------------


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def match(expected: Any, actual: Any, captures: dict[str, Any], path: str = "$") -> str | None:
    """Match *actual* against *expected*; return why not, or ``None`` on a match.

    New ``~capture:`` bindings are written into *captures* (callers pass a copy and
    keep it only when the whole frame matched).
    """
    if isinstance(expected, str) and expected.startswith("~"):
        return _match_token(expected, actual, captures, path)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {_show(actual)}"
        for key, sub in expected.items():
            where = f"{path}.{key}"
            if sub == "~absent":
                if key in actual:
                    return f"{where}: must be absent, got {_show(actual[key])}"
                continue
            if key not in actual:
                return f"{where}: missing"
            why = match(sub, actual[key], captures, where)
            if why is not None:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{path}: expected an array, got {_show(actual)}"
        if len(actual) < len(expected):
            return f"{path}: expected at least {len(expected)} element(s), got {len(actual)}"
        for index, sub in enumerate(expected):
            why = match(sub, actual[index], captures, f"{path}[{index}]")
            if why is not None:
                return why
        return None
    if _same_json(expected, actual):
        return None
    return f"{path}: expected {_show(expected)}, got {_show(actual)}"


def _same_json(a: Any, b: Any) -> bool:
    # JSON equality: 1 == 1.0, but true is not 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=0, abs_tol=0) or a == b
    return type(a) is type(b) and a == b


def _match_token(token: str, actual: Any, captures: dict[str, Any], path: str) -> str | None:
    if token == "~any":
        return None
    if token in _TYPE_MATCHERS:
        if _TYPE_MATCHERS[token](actual):
            return None
        return f"{path}: expected {token[1:]}, got {_show(actual)}"
    if token.startswith("~regex:"):
        pattern = token[len("~regex:") :]
        if isinstance(actual, str) and re.search(pattern, actual):
            return None
        return f"{path}: expected a string matching /{pattern}/, got {_show(actual)}"
    if token.startswith("~capture:"):
        captures[token[len("~capture:") :]] = actual
        return None
    if token.startswith("~ref:"):
        name = token[len("~ref:") :]
        if name not in captures:
            raise FixtureError(f"{path}: ~ref:{name} before any ~capture:{name}")
        if _same_json(captures[name], actual):
            return None
        return f"{path}: expected {_show(captures[name])} (captured {name}), got {_show(actual)}"
    if token == "~absent":
        return f"{path}: must be absent"
    raise FixtureError(f"{path}: unknown matcher {token!r}")


def resolve(template: Any, captures: Mapping[str, Any]) -> Any:
    """Build a frame to send: ``~ref:`` substituted, keys set to ``~absent`` omitted."""
    if isinstance(template, str) and template.startswith("~"):
        if template.startswith("~ref:"):
            name = template[len("~ref:") :]
            if name not in captures:
                raise FixtureError(f"send uses ~ref:{name} before any ~capture:{name}")
            return captures[name]
        raise FixtureError(f"matcher {template!r} cannot appear in a sent frame")
    if isinstance(template, dict):
        return {k: resolve(v, captures) for k, v in template.items() if v != "~absent"}
    if isinstance(template, list):
        return [resolve(v, captures) for v in template]
    return template


# -- running -------------------------------------------------------------------


class _Dropped(Exception):
    """Internal: the current connection was dropped by a dropTransport step."""


class _Run:
    def __init__(self, fixture: Mapping[str, Any], url: str, after_step: AfterStep | None) -> None:
        self.fixture_id = str(fixture.get("id", "<no id>"))
        self.steps: list[Any] = list(fixture.get("steps", []))
        self.url = url
        self.after_step = after_step
        self.captures: dict[str, Any] = {}
        self.done_labels: set[str] = set()
        self.index = 0
        self.inbox: deque[Any] = deque()
        self.closed: WebSocketClosed | None = None

    def fail(self, why: str, expected: Any = None, actual: Any = None) -> ConformanceFailure:
        step = self.steps[self.index] if self.index < len(self.steps) else {}
        kind = next((k for k in _STEP_KINDS if k in step), "?")
        label = f" [{step['label']}]" if isinstance(step, dict) and "label" in step else ""
        shown_actual = "<nothing>" if actual is None else _show(actual)
        return ConformanceFailure(
            f"{self.fixture_id}: step {self.index} ({kind}{label}) failed: {why}\n"
            f"  expected: {_show(expected)}\n"
            f"  actual:   {shown_actual}"
        )

    async def next_frame(self, ws: WebSocket, timeout_s: float) -> Any:
        """The next parsed frame; ``None`` on timeout; raises WebSocketClosed."""
        if not self.inbox:
            if self.closed is not None:
                raise self.closed
            with trio.move_on_after(timeout_s):
                try:
                    batch = await ws.receive_batch()
                except WebSocketClosed as exc:
                    self.closed = exc
                    raise
                for text in batch:
                    try:
                        self.inbox.append(json.loads(text))
                    except ValueError as exc:
                        why = "the host sent a frame that is not JSON"
                        raise self.fail(why, actual=text) from exc
        return self.inbox.popleft() if self.inbox else None

    async def run(self) -> None:
        self.validate()
        while self.index < len(self.steps):
            if self.index > 0 and "reconnect" not in self.steps[self.index]:
                raise self.fail("the connection is gone and this step is not a reconnect")
            self.inbox.clear()
            self.closed = None
            try:
                async with connect_websocket(self.url) as ws:
                    await self.walk(ws)
            except _Dropped:
                pass
            except (WebSocketClosed, OSError) as exc:
                raise self.fail(f"could not connect to {self.url}: {exc}") from exc

    def validate(self) -> None:
        if not self.steps:
            raise FixtureError(f"{self.fixture_id}: no steps")
        for index, step in enumerate(self.steps):
            if not isinstance(step, dict):
                raise FixtureError(f"{self.fixture_id}: step {index} is not an object")
            kinds = [k for k in _STEP_KINDS if k in step]
            unknown = set(step) - set(_STEP_KINDS) - _STEP_OPTIONS
            if len(kinds) != 1 or unknown:
                raise FixtureError(
                    f"{self.fixture_id}: step {index} needs exactly one of {_STEP_KINDS}"
                    + (f"; unknown keys {sorted(unknown)}" if unknown else "")
                )
            if index == 0 and kinds[0] == "reconnect":
                raise FixtureError(f"{self.fixture_id}: step 0 cannot be a reconnect")

    async def walk(self, ws: WebSocket) -> None:
        """Run steps on one connection until the fixture ends or the transport drops."""
        first = True
        while self.index < len(self.steps):
            step = self.steps[self.index]
            if "reconnect" in step:
                if first and self.index > 0:
                    await self.finish_step(step)  # this connection is the reconnect
                    first = False
                    continue
                raise self.fail("reconnect without a preceding dropTransport/expectClosed")
            first = False
            not_before = step.get("notBefore")
            if not_before is not None and not_before not in self.done_labels:
                raise self.fail(f"notBefore {not_before!r} names no completed step")
            timeout_s = step.get("timeoutMs", DEFAULT_TIMEOUT_MS) / 1000
            if "recv" in step:
                await self.do_recv(ws, step["recv"], timeout_s)
            elif "send" in step:
                frame = resolve(step["send"], self.captures)
                try:
                    await ws.send(json.dumps(frame))
                except WebSocketClosed as exc:
                    raise self.fail(f"connection closed before send: {exc}", frame) from exc
            elif "expectSilence" in step:
                await self.do_silence(ws, step["expectSilence"], timeout_s)
            elif "expectClosed" in step:
                await self.do_expect_closed(ws, timeout_s)
                await self.finish_step(step)
                return  # only a reconnect can follow
            elif "dropTransport" in step:
                await ws.aclose()
                await self.finish_step(step)
                raise _Dropped
            await self.finish_step(step)

    async def finish_step(self, step: Mapping[str, Any]) -> None:
        label = step.get("label")
        if isinstance(label, str):
            self.done_labels.add(label)
            if self.after_step is not None:
                await self.after_step(label)
        self.index += 1

    async def do_recv(self, ws: WebSocket, expected: Any, timeout_s: float) -> None:
        try:
            frame = await self.next_frame(ws, timeout_s)
        except WebSocketClosed as exc:
            raise self.fail(f"connection closed ({exc.code}, {exc.reason!r})", expected) from exc
        if frame is None:
            raise self.fail(f"no frame within {timeout_s * 1000:.0f} ms", expected)
        captures = dict(self.captures)
        why = match(expected, frame, captures)
        if why is not None:
            raise self.fail(why, expected, frame)
        self.captures = captures

    async def do_silence(self, ws: WebSocket, pattern: Any, timeout_s: float) -> None:
        kept: list[Any] = []
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    frame = await self.next_frame(ws, math.inf)
                except WebSocketClosed:
                    break  # a close is not a frame; a later recv will report it
                if match(pattern, frame, dict(self.captures)) is None:
                    raise self.fail("a frame arrived during expected silence", pattern, frame)
                kept.append(frame)
        self.inbox.extendleft(reversed(kept))

    async def do_expect_closed(self, ws: WebSocket, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    frame = await self.next_frame(ws, math.inf)
                except WebSocketClosed:
                    return
                raise self.fail("expected the host to close the connection", "<closed>", frame)
        raise self.fail(
            f"the connection was still open after {timeout_s * 1000:.0f} ms", "<closed>"
        )


async def run_fixture(
    fixture: Mapping[str, Any], url: str, *, after_step: AfterStep | None = None
) -> None:
    """Play the gateway for *fixture* against the host at *url*.

    ``after_step(label)`` is awaited after each labelled step completes. Raises
    :class:`ConformanceFailure` on a host deviation and :class:`FixtureError` on a
    fixture this runner cannot run.
    """
    await _Run(fixture, url, after_step).run()
