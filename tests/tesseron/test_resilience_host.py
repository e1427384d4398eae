"""Resilience of the Tesseron host against a hostile or flaky gateway (real loopback sockets).

Three families, all against a live host driven by the fake gateway of ``gateway_helpers``:

1. **Fuzz** (hypothesis, derandomized): random bytes (as text and as binary frames),
   random JSON and valid-but-wrong envelopes. A :class:`Ledger` predicts, from the
   JSON-RPC rules alone, which frames *must* be answered (a well-formed request: exactly
   once, under its own id; an unparseable frame: once, with a null id) and which *may*
   be (a malformed envelope: at most once). After every batch a valid ``actions/invoke``
   must still succeed; no id may be answered more often than allowed; nothing may be
   answered ``-32603``; the connection must stay up; nothing may be logged at ERROR.
   Text may hold lone surrogates, and
   nesting goes past the JSON decoder's recursion limit.
2. **Drop at every step** of an invocation that uses progress, confirm, sample and elicit,
   by a clean close and by a TCP reset: the handler sees ``-32010`` or a cancellation,
   the host takes the next dial, resumes with the stored credentials, and the same
   invocation then succeeds.
3. **Load**: 1,000 concurrent invocations with seeded random durations, timeouts and
   cancels. Each id is answered exactly once, a cancel sent before any response yields
   ``-32001`` (never a success), and every outcome is the one the schedule predicts.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import struct
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from gateway_helpers import FakeGateway, dial, gateway, serving, wait_until, welcome
from helpers import TaskCensus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    ElicitRequest,
    SampleRequest,
    TesseronApp,
)

FUZZ_SETTINGS = settings(
    derandomize=True,
    database=None,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

HOLD = "hold_until_cancelled"  # longer than any random text here (12 at most): no fuzz name hits it


def fuzz_app() -> TesseronApp:
    app = TesseronApp("fuzz", "Fuzz")

    @app.action("echo")
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    @app.action(HOLD, timeout_ms=20_000)
    async def hold(input: Any, ctx: ActionContext) -> Any:
        await trio.sleep_forever()

    return app


# -- the ledger: what must, may and must not be answered ------------------------------------


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


@attrs.define
class Ledger:
    """Bookkeeping of one connection's requests and responses.

    ``strict[id]``: well-formed requests sent with that id (each must be answered exactly
    once); ``strict_null``: frames that must get one null-id error (not JSON, or a JSON
    scalar); ``maybe[id]`` / ``maybe_total``: malformed envelopes, each answered at most
    once (under its id when it has a usable one, else null).
    """

    strict: Counter[Any] = attrs.field(factory=Counter)
    strict_null: int = 0
    maybe: Counter[Any] = attrs.field(factory=Counter)
    maybe_total: int = 0
    got: Counter[Any] = attrs.field(factory=Counter)
    frames: list[dict[str, Any]] = attrs.field(factory=list)

    def sent(self, text: str) -> None:
        try:
            msg = json.loads(text)
        except (ValueError, RecursionError):
            self.strict_null += 1
            return
        if isinstance(msg, list):
            self.maybe_total += 1  # a batch: not part of the protocol
            return
        if not isinstance(msg, dict):
            self.strict_null += 1  # a JSON scalar: Invalid Request, id null
            return
        has_id = "id" in msg
        raw_id = msg.get("id")
        method = msg.get("method")
        if msg.get("jsonrpc") == "2.0" and isinstance(method, str):
            if not has_id:
                return  # a notification is never answered
            if _valid_id(raw_id):
                if raw_id is None:
                    self.strict_null += 1
                else:
                    self.strict[raw_id] += 1
                return
        elif (
            msg.get("jsonrpc") == "2.0"
            and method is None
            and has_id
            and ("result" in msg or "error" in msg)
        ):
            return  # a response (to an id we never used): never answered
        self.maybe_total += 1
        if has_id and _valid_id(raw_id) and raw_id is not None:
            self.maybe[raw_id] += 1

    def received(self, frame: Any) -> None:
        assert isinstance(frame, dict), frame
        assert "method" not in frame, f"the host sent a request or notification: {frame}"
        assert frame.get("jsonrpc") == "2.0", frame
        assert ("result" in frame) != ("error" in frame), frame
        assert "id" in frame and _valid_id(frame["id"]), frame
        if "error" in frame:
            error = frame["error"]
            assert isinstance(error, dict) and isinstance(error.get("code"), int), frame
            assert isinstance(error.get("message"), str), frame
            assert error["code"] != -32603, f"an internal error reached the wire: {frame}"
        self.got[frame["id"]] += 1
        self.frames.append(frame)

    def satisfied(self) -> bool:
        """Every frame that must be answered has been."""
        return self.got[None] >= self.strict_null and all(
            self.got[rid] >= n for rid, n in self.strict.items()
        )

    def check(self) -> None:
        """Nothing was answered more often than allowed (or at all, if never asked)."""
        for rid, n in self.got.items():
            if rid is None:
                assert n <= self.strict_null + self.maybe_total, f"{n} null-id responses"
            else:
                assert self.strict[rid] <= n <= self.strict[rid] + self.maybe[rid], (
                    f"id {rid!r} answered {n} times for {self.strict[rid]} request(s)"
                )


@attrs.define
class Fuzzer:
    """Sends junk and probes over one live connection, keeping the ledger."""

    gw: FakeGateway
    ledger: Ledger = attrs.field(factory=Ledger)
    probes: int = 0

    def send(self, text: str, *, binary: bool = False, raw: bytes | None = None) -> None:
        self.ledger.sent(text)
        if binary:
            ws = self.gw.ws
            ws._proto.send_binary(raw if raw is not None else text.encode())
            ws._pull_output()
        else:
            self.gw.send_text(text)

    async def pump(self) -> None:
        """Read until everything that must be answered has been."""
        while not self.ledger.satisfied():
            self.ledger.received(await self.gw.recv())

    async def probe(self) -> None:
        """A valid request with a fresh id must succeed on the same connection."""
        self.probes += 1
        rid = f"probe-{self.probes}"
        self.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "method": "actions/invoke",
                    "params": {
                        "name": "echo",
                        "invocationId": f"probe-inv-{self.probes}",
                        "input": {"probe": self.probes},
                    },
                }
            )
        )
        await self.pump()
        answer = next(f for f in self.ledger.frames if f["id"] == rid)
        assert answer.get("result") == {
            "invocationId": f"probe-inv-{self.probes}",
            "output": {"probe": self.probes},
        }, answer

    async def finish(self) -> None:
        """A last probe, then a barrier answered in order by the read loop itself."""
        await self.probe()
        self.send('{"jsonrpc":"2.0","id":"barrier","method":"fuzz/barrier"}')
        await self.pump()
        self.ledger.check()


@contextmanager
def error_logs() -> Iterator[list[logging.LogRecord]]:
    """ERROR records from the library's loggers while the block runs."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                records.append(record)

    handler = Keep()
    logger = logging.getLogger("toolnexus_trio")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


async def fuzz(batches: list[list[tuple[str, bool, bytes | None]]], *, pre_welcome: bool) -> None:
    """Serve a fresh host; send each batch, then a probe; then check the ledger."""
    with trio.fail_after(20), error_logs() as errors, TaskCensus() as census:
        async with serving(fuzz_app()) as host, dial(host) as gw:
            f = Fuzzer(gw)
            hello = await gw.recv()
            assert hello["method"] == "tesseron/hello"
            if not pre_welcome:
                gw.respond(hello["id"], welcome())
            for i, batch in enumerate(batches):
                for text, binary, raw in batch:
                    if pre_welcome and i == 0 and _answers_the_hello(text):
                        continue  # that would (rightly) be taken as the welcome
                    f.send(text, binary=binary, raw=raw)
                if pre_welcome and i == 0:
                    gw.respond(hello["id"], welcome())
                await f.probe()
            await f.finish()
            assert host.connected
        census.assert_no_new_tasks()
    assert [r.getMessage() for r in errors] == []


def _answers_the_hello(text: str) -> bool:
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(msg, dict) and msg.get("id") == 1 and msg.get("id") is not True


# -- strategies -----------------------------------------------------------------------------


def texts(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    """Text that may hold lone surrogates: JSON can carry them as "\\ud800" escapes."""
    chars = st.characters() | st.integers(0xD800, 0xDFFF).map(chr)
    return st.lists(chars, min_size=min_size, max_size=max_size).map("".join)


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts(12)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts(8), kids, max_size=4),
    max_leaves=16,
)
ids = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | texts(10)
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(texts(3), st.integers(), max_size=2)
)
GATEWAY_REQUESTS = [
    "actions/invoke",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
]
OTHER_METHODS = [
    "actions/cancel",
    "tesseron/claimed",
    "tesseron/hello",
    "tesseron/resume",
    "tesseron/bind",
    "actions/progress",
    "sampling/request",
    "elicitation/request",
    "log",
    "actions/list_changed",
    "rpc.discover",
    "",
]
methods = st.sampled_from(GATEWAY_REQUESTS + OTHER_METHODS) | texts(12)


def frame(**fields: Any) -> st.SearchStrategy[str]:
    return st.fixed_dictionaries(fields).map(json.dumps)


def optional(**fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


wrong_invokes = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["echo", "missing", "", "Echo"]) | json_values,
        "invocationId": texts(8) | json_values,
        "input": json_values,
        "client": json_values | optional(route=json_values, origin=json_values),
    },
)
claimed_params = optional(
    agent=json_values | optional(id=json_values, name=json_values),
    claimedAt=json_values,
    agentCapabilities=json_values
    | st.dictionaries(
        st.sampled_from(["sampling", "elicitation", "streaming", "subscriptions"]), json_values
    ),
)


@st.composite
def duplicate_invocations(draw: st.DrawFn) -> list[str]:
    """A running invocation, a second invoke reusing its id, then its cancel."""
    inv = "dup-" + draw(texts(6))
    first, second = draw(st.lists(texts(6, min_size=1), min_size=2, max_size=2, unique=True))
    return [
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "d1-" + first,
                "method": "actions/invoke",
                "params": {"name": HOLD, "invocationId": inv, "input": None},
            }
        ),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "d2-" + second,
                "method": "actions/invoke",
                "params": {"name": "echo", "invocationId": inv, "input": 1},
            }
        ),
        json.dumps({"jsonrpc": "2.0", "method": "actions/cancel", "params": {"invocationId": inv}}),
    ]


def nested(depth: int, leaf: str = "0") -> str:
    return "[" * depth + leaf + "]" * depth


depths = st.integers(min_value=1, max_value=50) | st.integers(min_value=900, max_value=5000)


single_envelopes = st.one_of(
    # Known and unknown methods with garbage params.
    frame(jsonrpc=st.just("2.0"), id=ids, method=methods, params=json_values),
    # actions/invoke with wrong types and missing fields.
    frame(
        jsonrpc=st.just("2.0"),
        id=ids,
        method=st.just("actions/invoke"),
        params=wrong_invokes | json_values,
    ),
    # Notifications with garbage params; actions/cancel for unknown invocations.
    frame(jsonrpc=st.just("2.0"), method=methods, params=json_values),
    frame(
        jsonrpc=st.just("2.0"),
        method=st.just("actions/cancel"),
        params=optional(invocationId=texts(8) | json_scalars),
    ),
    frame(jsonrpc=st.just("2.0"), method=st.just("tesseron/claimed"), params=claimed_params),
    # Responses to ids the host never sent (or to the hello, long answered).
    frame(jsonrpc=st.just("2.0"), id=ids, result=json_values),
    frame(
        jsonrpc=st.just("2.0"),
        id=ids,
        error=json_values | optional(code=json_values, message=json_values, data=json_values),
    ),
    # Wrong or missing version; no method; method of the wrong type.
    st.fixed_dictionaries(
        {"id": ids},
        optional={
            "jsonrpc": st.sampled_from(["1.0", "2", 2.0, None]),
            "method": methods,
            "params": json_values,
        },
    ).map(json.dumps),
    frame(
        jsonrpc=st.just("2.0"), id=ids, method=json_values.filter(lambda m: not isinstance(m, str))
    ),
    # Nested garbage, also deeper than the JSON decoder's recursion limit.
    st.builds(
        lambda rid, depth: (
            f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"method":"actions/invoke","params":{nested(depth)}}}'
        ),
        ids,
        depths,
    ),
    depths.map(nested),
).map(lambda text: [text])
envelopes = single_envelopes | duplicate_invocations()


def as_text(texts: list[str]) -> list[tuple[str, bool, bytes | None]]:
    return [(t, False, None) for t in texts]


# -- 1. fuzz ----------------------------------------------------------------------------------


@FUZZ_SETTINGS
@given(
    st.lists(
        st.lists(st.tuples(st.binary(max_size=96), st.booleans()), min_size=1, max_size=6),
        min_size=1,
        max_size=3,
    )
)
async def test_random_bytes_never_break_the_connection(
    batches: list[list[tuple[bytes, bool]]],
) -> None:
    """Random bytes as text frames (decoded with errors="replace") and as binary frames
    (which the host decodes the same way) get parse errors, never a dropped connection."""
    await fuzz(
        [
            [(data.decode(errors="replace"), binary, data) for data, binary in batch]
            for batch in batches
        ],
        pre_welcome=False,
    )


@FUZZ_SETTINGS
@given(
    st.lists(
        st.lists(
            json_values.map(json.dumps)
            | st.dictionaries(
                st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]),
                json_values | st.just("2.0") | methods,
            ).map(json.dumps),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
async def test_random_json_never_breaks_the_connection(
    batches: list[list[str]], binary: bool
) -> None:
    await fuzz([[(t, binary, None) for t in batch] for batch in batches], pre_welcome=False)


@FUZZ_SETTINGS
@given(
    st.lists(
        st.lists(envelopes, min_size=1, max_size=6).map(lambda b: [t for e in b for t in e]),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
async def test_valid_but_wrong_envelopes_never_break_the_connection(
    batches: list[list[str]], pre_welcome: bool
) -> None:
    """Wrong param types, unknown methods, stray responses, garbage notifications,
    cancels of unknown invocations, duplicate invocation ids, huge and odd ids, nested
    garbage; with ``pre_welcome`` the first batch arrives while the hello is pending."""
    await fuzz([as_text(batch) for batch in batches], pre_welcome=pre_welcome)


async def test_the_ledger_catches_a_missing_or_doubled_answer() -> None:
    """Guard for the guard: the ledger's checks are not vacuous."""
    ledger = Ledger()
    ledger.sent('{"jsonrpc":"2.0","id":7,"method":"x"}')
    ledger.sent("{oops")
    ledger.sent('{"jsonrpc":"2.0","method":"actions/cancel","params":{}}')
    assert not ledger.satisfied()
    ledger.received({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "m"}})
    ledger.received({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "m"}})
    assert ledger.satisfied()
    ledger.check()
    ledger.received({"jsonrpc": "2.0", "id": 7, "result": None})
    with pytest.raises(AssertionError, match="answered 2 times"):
        ledger.check()
    with pytest.raises(AssertionError, match="internal error"):
        ledger.received({"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": "m"}})


# A bug the fuzzing found (an unhashable cancel id used to log an ERROR traceback).


async def test_unhashable_cancel_id_is_ignored_quietly() -> None:
    with trio.fail_after(10), error_logs() as errors:
        async with serving(fuzz_app()) as host, gateway(host) as gw:
            gw.cancel(["not", "hashable"])  # type: ignore[arg-type]
            assert (await gw.call("echo", 1))["result"]["output"] == 1
    assert [r.getMessage() for r in errors] == []


# -- 2. drop at every step ----------------------------------------------------------------------

STEPS = [
    "after-invoke",  # the invoke is on the wire; nothing has come back
    "at-progress",  # actions/progress arrived
    "at-confirm",  # the confirm's elicitation/request arrived, unanswered
    "after-confirm",  # answered, and the socket dropped right behind the answer
    "at-sample",
    "after-sample",
    "at-elicit",
    "after-elicit",
    "after-response",  # the invoke was answered: a drop between invocations
]
# The steps where the handler is parked on a request: it must see -32010, and nothing else.
PARKED = {"at-confirm": 1, "at-sample": 2, "at-elicit": 3}


def workflow_app(outcomes: list[tuple[Any, ...]]) -> TesseronApp:
    app = TesseronApp("flow", "Flow")

    @app.action("workflow")
    async def workflow(input: Any, ctx: ActionContext) -> Any:
        steps: list[Any] = []
        try:
            await ctx.progress(10, "starting")
            steps.append("progress")
            confirmed = await ctx.confirm("Go ahead?")
            steps.append(("confirm", confirmed))
            sampled = await ctx.sample(SampleRequest("Name a colour"))
            steps.append(("sample", sampled))
            elicited = await ctx.elicit(ElicitRequest("Favourite colour?"))
            steps.append(("elicit", elicited))
        except ActionError as exc:
            outcomes.append(("error", int(exc.code), tuple(steps)))
            raise
        except trio.Cancelled:
            outcomes.append(("cancelled", tuple(steps)))
            raise
        outcomes.append(("returned", tuple(steps)))
        return {
            "run": input["run"],
            "confirmed": confirmed,
            "sampled": sampled,
            "elicited": elicited,
        }

    return app


async def drive_workflow(gw: FakeGateway, run: int, drop_at: str | None) -> dict[str, Any] | None:
    """Play the gateway's side of one workflow invocation; return early at *drop_at*."""
    rid = gw.invoke("workflow", {"run": run}, invocation_id=f"inv-{run}")
    if drop_at == "after-invoke":
        return None
    progress = await gw.expect_method("actions/progress")
    assert progress["params"] == {
        "invocationId": f"inv-{run}",
        "percent": 10,
        "message": "starting",
    }
    if drop_at == "at-progress":
        return None
    answers = {
        "confirm": {"action": "accept"},
        "sample": {"content": "teal"},
        "elicit": {"action": "accept", "value": {"response": "blue"}},
    }
    methods = {
        "confirm": "elicitation/request",
        "sample": "sampling/request",
        "elicit": "elicitation/request",
    }
    for step in ("confirm", "sample", "elicit"):
        request = await gw.expect_method(methods[step])
        assert request["params"]["invocationId"] == f"inv-{run}"
        if drop_at == f"at-{step}":
            return None
        gw.respond(request["id"], answers[step])
        if drop_at == f"after-{step}":
            return None
    response = await gw.response(rid)
    return response


def reset(gw: FakeGateway) -> None:
    """Make the next close of the gateway's socket a TCP reset (no close frame, no FIN)."""
    sock = gw.ws._stream.socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("step", STEPS)
async def test_a_drop_at_any_step_then_resume(step: str, how: str) -> None:
    outcomes: list[tuple[Any, ...]] = []
    app = workflow_app(outcomes)
    with trio.fail_after(20), TaskCensus() as census:
        async with serving(app) as host:
            # First connection: hello, a claimed session with resume credentials.
            async with dial(host) as gw:
                hello = await gw.recv()
                assert hello["method"] == "tesseron/hello"
                gw.respond(hello["id"], welcome(session_id="s_drop", resume_token="rt_1"))
                gw.notify(
                    "tesseron/claimed",
                    {"agent": {"id": "claude", "name": "Claude"}, "claimedAt": 1},
                )
                await wait_until(
                    lambda: host.welcome is not None and host.welcome.claim_code is None
                )
                response = await drive_workflow(gw, 1, step)
                if how == "reset":
                    reset(gw)
                    await gw.ws._stream.aclose()
            await wait_until(lambda: not host.connected)
            await trio.testing.wait_all_tasks_blocked()  # the interrupted handler has ended

            # What the interrupted handler saw.
            if step == "after-invoke" and how == "reset":
                # A reset may discard the invoke unread: then no handler ran at all.
                assert len(outcomes) <= 1, outcomes
            else:
                assert len(outcomes) == 1, outcomes
            kind, *rest = outcomes[0] if outcomes else ("never-ran",)
            if kind == "never-ran":
                pass
            elif step == "after-response":
                assert response is not None and response["result"]["output"]["elicited"] == {
                    "response": "blue"
                }
                assert outcomes[0] == (
                    "returned",
                    (
                        "progress",
                        ("confirm", True),
                        ("sample", "teal"),
                        ("elicit", {"response": "blue"}),
                    ),
                )
            elif step in PARKED:
                # Parked on a request when the drop came: TRANSPORT_CLOSED, exactly.
                assert kind == "error" and rest[0] == -32010, outcomes
                assert len(rest[1]) == PARKED[step], outcomes
            elif step == "after-elicit":
                # The last answer may have made it in before the drop.
                assert kind in ("error", "cancelled", "returned"), outcomes
                assert kind != "error" or rest[0] == -32010, outcomes
            else:
                assert kind in ("error", "cancelled"), outcomes
                assert kind != "error" or rest[0] == -32010, outcomes

            # The next dial is accepted and resumes the claimed session.
            async with dial(host) as gw:
                resume = await gw.recv()
                assert resume["method"] == "tesseron/resume", resume
                assert resume["params"]["sessionId"] == "s_drop"
                assert resume["params"]["resumeToken"] == "rt_1"
                gw.respond(
                    resume["id"], welcome(session_id="s_drop", resume_token="rt_2", claim_code=None)
                )
                response = await drive_workflow(gw, 2, None)
                assert response is not None
                assert response["result"] == {
                    "invocationId": "inv-2",
                    "output": {
                        "run": 2,
                        "confirmed": True,
                        "sampled": "teal",
                        "elicited": {"response": "blue"},
                    },
                }
                assert outcomes[-1][0] == "returned"
                assert host.welcome is not None and host.welcome.resume_token == "rt_2"
        census.assert_no_new_tasks()


# -- 3. load ------------------------------------------------------------------------------------

LOAD = 1000
SHORT_TIMEOUT_MS = 2250  # deadlines at x.25 s, completions at whole seconds, cancels at x.5


@attrs.frozen
class Job:
    n: int
    action: str  # "work" (60 s timeout) or "short" (2.25 s timeout)
    done_at: int  # the handler returns after this many (virtual) seconds
    cancel_at: float | None  # when the gateway sends actions/cancel, if it does
    cancel_twice: bool

    @property
    def rid(self) -> str:
        return f"r{self.n}"

    @property
    def inv(self) -> str:
        return f"inv{self.n}"

    def predicted(self) -> int | None:
        """The error code the schedule implies (None: a result)."""
        events: list[tuple[float, int | None]] = [(float(self.done_at), None)]
        if self.action == "short":
            events.append((SHORT_TIMEOUT_MS / 1000, -32002))
        if self.cancel_at is not None:
            events.append((self.cancel_at, -32001))
        return min(events, key=lambda e: e[0])[1]


def schedule(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for n in range(LOAD):
        cancel_at = rng.choice([None, None, None, 0.0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5])
        jobs.append(
            Job(
                n,
                "short" if rng.random() < 0.25 else "work",
                rng.randint(1, 5),
                cancel_at,
                cancel_twice=rng.random() < 0.1,
            )
        )
    return jobs


def load_app() -> TesseronApp:
    app = TesseronApp("load", "Load")

    async def body(input: Any, ctx: ActionContext) -> Any:
        await trio.sleep(input["s"])
        return input["n"]

    app.action("work")(body)
    app.action("short", timeout_ms=SHORT_TIMEOUT_MS)(body)
    return app


async def test_a_thousand_concurrent_invocations_with_cancels_and_timeouts(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    jobs = schedule(seed=20240611)
    by_rid = {job.rid: job for job in jobs}
    responses: defaultdict[Any, list[dict[str, Any]]] = defaultdict(list)
    # For each cancelled job: had its response arrived when the (first) cancel went out?
    answered_before_cancel: dict[str, bool] = {}
    all_answered = trio.Event()
    with trio.fail_after(120), TaskCensus() as census:
        async with serving(load_app()) as host, gateway(host) as gw:
            t0 = trio.current_time()

            async def read() -> None:
                while True:
                    frame = await gw.recv()
                    assert "method" not in frame, frame
                    responses[frame["id"]].append(frame)
                    if frame["id"] == "barrier":
                        return
                    if len(responses) == LOAD:
                        all_answered.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                for job in jobs:
                    gw.invoke(job.action, {"s": job.done_at, "n": job.n}, job.inv, id=job.rid)
                cancels = sorted(
                    (j for j in jobs if j.cancel_at is not None), key=lambda j: j.cancel_at
                )  # type: ignore[arg-type, return-value]
                for job in cancels:
                    assert job.cancel_at is not None
                    await trio.sleep_until(t0 + job.cancel_at)
                    answered_before_cancel[job.rid] = job.rid in responses
                    gw.cancel(job.inv)
                    if job.cancel_twice:
                        gw.cancel(job.inv)
                    gw.cancel(f"unknown-{job.n}")
                await all_answered.wait()
                await trio.sleep_until(t0 + 10)  # long after every deadline
                gw.request("load/barrier", None, id="barrier")
            assert host.connected
        census.assert_no_new_tasks()

    # Exactly one response per invoke id, and nothing else but the barrier's.
    assert set(responses) == set(by_rid) | {"barrier"}
    doubled = {rid: frames for rid, frames in responses.items() if len(frames) != 1}
    assert doubled == {}
    outcome: dict[str, int | None] = {}
    for rid, job in by_rid.items():
        frame = responses[rid][0]
        if "error" in frame:
            outcome[rid] = frame["error"]["code"]
        else:
            assert frame["result"] == {"invocationId": job.inv, "output": job.n}
            outcome[rid] = None
    # A cancel sent before any response for its id gets -32001, never a result.
    for rid, answered in answered_before_cancel.items():
        if not answered:
            assert outcome[rid] == -32001, (by_rid[rid], responses[rid])
    # And every outcome is the one the schedule predicts (cancel, timeout or result).
    wrong = {
        rid: (outcome[rid], job.predicted())
        for rid, job in by_rid.items()
        if outcome[rid] != job.predicted()
    }
    assert wrong == {}
    # The schedule really exercised every path.
    kinds = Counter(outcome.values())
    assert kinds[None] > 100 and kinds[-32001] > 100 and kinds[-32002] > 50, kinds
    assert sum(answered_before_cancel.values()) > 50  # cancels that came too late: ignored
