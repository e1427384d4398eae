"""Tesseron wire types and JSON-RPC 2.0 envelopes (pure data: no trio import).

Payloads are frozen attrs classes with snake_case fields; the package's one
converter (:data:`toolnexus_trio._converter.wire`) writes them with camelCase keys and
leaves out ``None`` fields. Fields without a default are always written, which is
how ``subscribable: false`` and ``output: null`` reach the wire.

Envelopes are built here as JSON text, encoded once per frame (see "JSON on the hot
path" below for how).
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from .._converter import payloads as payloads
from .._converter import wire
from ._errors import ActionError, TesseronErrorCode

PROTOCOL_VERSION: Final = "1.2.0"
"""The protocol version this host speaks."""

RequestId = str | int | None
"""A JSON-RPC id: string, number or null."""


# ---------------------------------------------------------------------------
# Shared payloads
# ---------------------------------------------------------------------------


@attrs.frozen
class Agent:
    """The agent on the other side of the gateway."""

    id: str
    """Stable identifier (``"pending"`` until a claim)."""
    name: str
    """Display name."""


@attrs.frozen
class Capabilities:
    """Negotiated capabilities: what the handler may use."""

    streaming: bool
    """``actions/progress`` is forwarded."""
    subscriptions: bool
    """The agent may subscribe to resources."""
    sampling: bool
    """:meth:`ActionContext.sample` may be used."""
    elicitation: bool
    """:meth:`ActionContext.confirm` and :meth:`ActionContext.elicit` may be used."""


ALL_CAPABILITIES: Final = Capabilities(
    streaming=True, subscriptions=True, sampling=True, elicitation=True
)


@attrs.frozen
class AppInfo:
    """``app`` in ``tesseron/hello``."""

    id: str
    name: str
    origin: str
    description: str | None = None
    version: str | None = None


@attrs.frozen
class ActionManifest:
    """One action as published in hello, resume and ``actions/list_changed``."""

    name: str
    description: str
    input_schema: dict[str, Any]
    timeout_ms: int
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


@attrs.frozen
class ResourceManifest:
    """One resource as published in hello, resume and ``resources/list_changed``."""

    name: str
    description: str
    subscribable: bool


@attrs.frozen
class HelloParams:
    """Params of ``tesseron/hello``."""

    protocol_version: str
    app: AppInfo
    actions: list[ActionManifest]
    resources: list[ResourceManifest]
    capabilities: Capabilities


@attrs.frozen
class ResumeParams:
    """Params of ``tesseron/resume``: hello's params plus the stored credentials."""

    protocol_version: str
    app: AppInfo
    actions: list[ActionManifest]
    resources: list[ResourceManifest]
    capabilities: Capabilities
    session_id: str
    resume_token: str


@attrs.frozen
class Welcome:
    """The result of ``tesseron/hello`` / ``tesseron/resume`` (also a host event).

    ``claim_code`` is what the user types into the agent; it is cleared when the
    session is claimed. ``resume_token`` rotates on every successful resume.
    """

    session_id: str
    """Opaque session id minted by the gateway."""
    protocol_version: str
    """The gateway's protocol version."""
    capabilities: Capabilities
    """Negotiated capabilities (updated by ``tesseron/claimed``)."""
    agent: Agent
    """The agent (``pending`` until claimed)."""
    claim_code: str | None = None
    """The claim code to show the user, or ``None`` once claimed or after a resume."""
    resume_token: str | None = None
    """Credential for the next ``tesseron/resume``."""


@attrs.frozen
class Claimed:
    """``tesseron/claimed`` (also a host event): an agent claimed the session."""

    agent: Agent
    """The agent that claimed the session."""
    claimed_at: int | None = None
    """Milliseconds since the epoch."""
    agent_capabilities: Capabilities | None = None
    """The agent's capabilities, when the gateway learned them after the welcome."""


@attrs.frozen
class ProgressParams:
    """Params of ``actions/progress``."""

    invocation_id: str
    message: str | None = None
    percent: int | None = None
    data: Any = None


@attrs.frozen
class LogParams:
    """Params of the bare ``log`` notification."""

    level: str
    message: str
    invocation_id: str | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen
class SamplingParams:
    """Params of ``sampling/request``."""

    invocation_id: str
    prompt: str
    schema: dict[str, Any] | None = None
    max_tokens: int | None = None


@attrs.frozen
class ElicitationParams:
    """Params of ``elicitation/request``."""

    invocation_id: str
    question: str
    schema: dict[str, Any]


# ---------------------------------------------------------------------------
# Envelopes (JSON text out)
# ---------------------------------------------------------------------------


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _unstructure_leaf(value: Any) -> Any:
    """The encoder's ``default``: what JSON cannot write goes through :data:`payloads`."""
    data = payloads.unstructure(value)
    if data is value:  # a type the converter does not know either
        _not_serializable(value)
    return data


def _make_encoder(default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """``json.dumps(ensure_ascii=False, separators=(",", ":"), default=default)``, faster.

    ``JSONEncoder.encode`` builds a new C encoder for every call; building it once
    takes an invoke answer from 1.9 to 0.6 us and a progress frame from 1.7 to 1.0 us
    (the bench machine). Without the C accelerator (not CPython) the plain encoder is
    used. Circular data is not checked for separately: it ends in ``RecursionError``
    (``ValueError`` with the plain encoder), and frames only ever carry trees.
    """
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is not None:
        try:
            encoder = c_make_encoder(
                None, default, json.encoder.encode_basestring, None, ":", ",", False, False, True
            )
            join = "".join

            def encode(value: Any) -> str:
                return join(encoder(value, 0))

            if encode({"a": [1.5, "\u00e9", None, True]}) == '{"a":[1.5,"\u00e9",null,true]}':
                return encode
        except TypeError:  # pragma: no cover - another interpreter's signature
            pass
    return json.JSONEncoder(  # pragma: no cover - CPython has the accelerator
        ensure_ascii=False, separators=(",", ":"), default=default
    ).encode


_dumps: Final = _make_encoder(_not_serializable)
"""JSON text of wire data (already JSON-native)."""

_dumps_payload: Final = _make_encoder(_unstructure_leaf)
"""JSON text of user data: JSON-native parts are written as they are, anything else
(attrs instances, datetimes, sets, ...) goes through :data:`payloads`. Unstructuring
the whole value first would rebuild every dict and list of plain data: 1.3 us for a
two-key dict, more than encoding it."""

_json_str: Final = json.encoder.encode_basestring
"""A ``str`` as JSON text (``ensure_ascii=False``), for pre-encoded frame parts."""

# The stub types make_scanner's argument as the scanner class itself; it takes a decoder.
_scan_once: Final[Callable[[str, int], tuple[Any, int]]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def decode(text: str) -> Any:
    """``json.loads(text)``, calling the C scanner directly for the common frame.

    A frame is an object with no surrounding whitespace; ``json.loads`` spends half of
    its 1.7 us on such a frame in Python-level checks. Anything else (whitespace, a
    BOM, trailing data, an error) is handed to ``json.loads`` itself, so results and
    errors are exactly its own.
    """
    if text[:1] == "{":
        try:
            value, end = _scan_once(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _payload_json(value: Any) -> str:
    """User data as JSON text, as ``json.dumps(payloads.unstructure(value))`` writes it."""
    try:
        return _dumps_payload(value)
    except (TypeError, ValueError):
        # E.g. a dict key the converter turns into a string: the full conversion first.
        return _dumps(payloads.unstructure(value))


def unstructure(value: Any) -> Any:
    """A wire object as JSON data (camelCase keys, ``None`` fields omitted)."""
    return wire.unstructure(value)


def request_frame(id: int, method: str, params: Any) -> str:
    """A request envelope; *params* is already JSON data."""
    return _dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


def notification_frame(method: str, params: Any) -> str:
    """A notification envelope; *params* is already JSON data."""
    return _dumps({"jsonrpc": "2.0", "method": method, "params": params})


def result_frame(id: RequestId, result: Any) -> str:
    """A success response (``result: null`` for an empty answer)."""
    return _dumps({"jsonrpc": "2.0", "id": id, "result": result})


def error_frame(id: RequestId, error: ActionError) -> str:
    """An error response carrying *error*'s code, message and data."""
    return _dumps({"jsonrpc": "2.0", "id": id, "error": error.to_wire()})


# ---------------------------------------------------------------------------
# Inbound classification
# ---------------------------------------------------------------------------


@attrs.frozen
class Request:
    """An inbound request (it carries an ``id``, possibly null)."""

    id: RequestId
    method: str
    params: Any


@attrs.frozen
class Notification:
    """An inbound notification (no ``id``)."""

    method: str
    params: Any


@attrs.frozen
class Response:
    """An inbound response to one of our own requests."""

    id: RequestId
    result: Any = None
    error: ActionError | None = None


@attrs.frozen
class Invalid:
    """A frame that cannot be handled; ``reply`` is the error to send, if any."""

    id: RequestId
    error: ActionError
    reply: bool


Inbound = Request | Notification | Response | Invalid


def is_request_id(value: Any) -> bool:
    """Whether *value* is a usable JSON-RPC id: a string, an integer or null."""
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


def parse_frame(text: str) -> Inbound:
    """Classify one text frame (see the JSON-RPC rules in the module docs).

    - Not JSON: ``-32700`` with id null.
    - Not an object (batches are not part of the protocol), or no ``"jsonrpc": "2.0"``:
      ``-32600``, echoing the id when there is a usable one.
    - Unknown shapes are answered only when they carry an id.
    """
    try:
        msg = decode(text)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return Invalid(None, ActionError(TesseronErrorCode.PARSE_ERROR, "Parse error"), True)
    return classify(msg)


def classify(msg: Any) -> Inbound:
    """Classify one decoded frame (:func:`parse_frame` after the JSON decoding)."""
    if not isinstance(msg, dict):
        return Invalid(
            None, ActionError(TesseronErrorCode.INVALID_REQUEST, "Invalid Request"), True
        )
    has_id = "id" in msg
    raw_id = msg.get("id")
    id_ok = has_id and is_request_id(raw_id)
    method = msg.get("method")
    if msg.get("jsonrpc") != "2.0":
        return Invalid(
            raw_id if id_ok else None,
            ActionError(TesseronErrorCode.INVALID_REQUEST, "Invalid Request: jsonrpc must be 2.0"),
            reply=has_id and method is not None,
        )
    if isinstance(method, str):
        if not has_id:
            return Notification(method, msg.get("params"))
        if not id_ok:
            return Invalid(
                None,
                ActionError(TesseronErrorCode.INVALID_REQUEST, "Invalid Request: bad id"),
                True,
            )
        return Request(raw_id, method, msg.get("params"))
    if method is None and has_id and ("result" in msg or "error" in msg):
        error = msg.get("error")
        if error is not None:
            return Response(raw_id, error=_error_from_wire(error))
        return Response(raw_id, result=msg.get("result"))
    return Invalid(
        raw_id if id_ok else None,
        ActionError(TesseronErrorCode.INVALID_REQUEST, "Invalid Request"),
        reply=has_id,
    )


def _error_from_wire(error: Any) -> ActionError:
    if isinstance(error, Mapping):
        code = error.get("code")
        message = error.get("message")
        return ActionError(
            code if isinstance(code, int) else TesseronErrorCode.INTERNAL_ERROR,
            message if isinstance(message, str) else "Unknown error",
            error.get("data"),
        )
    return ActionError(TesseronErrorCode.INTERNAL_ERROR, "Malformed error response")


LogLevel = Literal["debug", "info", "warn", "error"]
"""The levels of the ``log`` notification."""


def major_version(version: str) -> int | None:
    """The major part of ``"1.2.0"``, or ``None`` when it does not parse."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


# ---------------------------------------------------------------------------
# Hot-path frames, built without the converter (a test pins them to the wire types)
# ---------------------------------------------------------------------------


def invoke_result_frame(id: RequestId, invocation_id: str, output: Any) -> str:
    """The success answer to ``actions/invoke``: ``{invocationId, output}``.

    *output* is the handler's return value as it is: JSON data, or anything
    :data:`payloads` can unstructure. Built from pre-encoded parts around the encoded
    output (0.6 us against 1.1 us for encoding the whole envelope as a dict).
    """
    rid = str(id) if type(id) is int else _dumps(id)
    return (
        f'{{"jsonrpc":"2.0","id":{rid},"result":{{"invocationId":{_json_str(invocation_id)}'
        f',"output":{_payload_json(output)}}}}}'
    )


def progress_frame(invocation_id: str, percent: int | None, message: str | None, data: Any) -> str:
    """An ``actions/progress`` notification, equal to :class:`ProgressParams` unstructured.

    *data* may be anything :data:`payloads` can unstructure.
    """
    params: dict[str, Any] = {"invocationId": invocation_id}
    if message is not None:
        params["message"] = message
    if percent is not None:
        params["percent"] = percent
    if data is not None:
        params["data"] = data
    return '{"jsonrpc":"2.0","method":"actions/progress","params":' + _payload_json(params) + "}"


_PROGRESS_HEAD: Final = '{"jsonrpc":"2.0","method":"actions/progress","params":{"invocationId":'
PERCENT_TAILS: Final = tuple(f',"percent":{p}}}}}' for p in range(101))
"""The end of a bare-percent progress frame, for each percent 0..100."""


def progress_head(invocation_id: str) -> str:
    """The start of *invocation_id*'s progress frames, up to its id."""
    return _PROGRESS_HEAD + _json_str(invocation_id)


def percent_frame(invocation_id: str, percent: int) -> str:
    """``progress_frame(invocation_id, percent, None, None)`` for *percent* in 0..100.

    The progress storm's frame, from pre-encoded parts: 0.15 us against 1.0 us.
    """
    return progress_head(invocation_id) + PERCENT_TAILS[percent]


# ---------------------------------------------------------------------------
# Rules both sides apply
# ---------------------------------------------------------------------------

APP_ID_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED_APP_IDS: Final = frozenset({"tesseron", "mcp", "system"})


def app_id_problem(app_id: object) -> str | None:
    """Why *app_id* is not a valid Tesseron app id, or ``None`` when it is."""
    if not isinstance(app_id, str) or not APP_ID_PATTERN.fullmatch(app_id):
        return f"invalid Tesseron app id {app_id!r}: must match ^[a-z][a-z0-9_]*$"
    if app_id in RESERVED_APP_IDS:
        return f"Tesseron app id {app_id!r} is reserved"
    return None


def clamp_percent(value: Any, floor: int) -> int | None:
    """A progress percent as an int in ``floor..100``, or ``None`` when not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    clamped = 0 if value < 0 else 100 if value > 100 else int(value)
    return max(clamped, floor)
