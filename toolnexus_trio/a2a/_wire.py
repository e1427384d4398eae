"""The A2A wire: the handful of JSON shapes §7A/§7B use, in both protocol versions.

Two shapes meet on the wire:

- **0.3** (the SPEC's wire): a card with a top-level ``url`` and ``protocolVersion``
  ``"0.3.0"``; parts carry ``"kind": "text"``; states are lower-case (``submitted``,
  ``working``, ``completed``, ...); ``SendMessage`` returns the task itself. The SPEC
  names the methods ``SendMessage``/``GetTask``; a 0.3 SDK client says
  ``message/send``/``tasks/get``/``tasks/cancel``.
- **1.0** (a2a-sdk 1.x): a card with ``supportedInterfaces[].url``; the client sends
  the ``A2A-Version: 1.0`` header; parts have no ``kind``; roles are ``ROLE_USER`` /
  ``ROLE_AGENT``; states are ``TASK_STATE_*``; ``SendMessage`` returns
  ``{"task": {...}}`` (or ``{"message": {...}}``).

Tasks are kept inside the package in the 0.3 shape (plain JSON mappings) and turned
into the 1.0 shape only at the edge (:func:`task_v1`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from .._converter import payloads

Version = Literal["0.3", "1.0"]

VERSION_HEADER: Final = "A2A-Version"
CARD_PATH: Final = "/.well-known/agent-card.json"

TERMINAL: Final = frozenset({"completed", "failed", "canceled", "rejected"})
"""States after which a task never changes (``rejected`` is A2A's, beyond the SPEC's three)."""
INTERRUPTED: Final = frozenset({"input-required", "auth-required"})
"""States that wait for the caller: a tool cannot answer them, so the call ends there."""
STATES: Final = frozenset({"submitted", "working", "unknown"}) | TERMINAL | INTERRUPTED

_V1_STATES: Final = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_UNSPECIFIED": "unknown",
}
_TO_V1: Final = {v: k for k, v in _V1_STATES.items()}

# JSON-RPC error codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
BUSY: Final = -32000
"""Our "server busy" (tasks in flight at the cap): a server-defined JSON-RPC code."""


class A2AError(Exception):
    """A JSON-RPC error from an A2A peer (or a reply that is not A2A)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def dumps(value: Any) -> bytes:
    """Compact JSON, UTF-8, keys in the order given (the SPEC's order).

    Never anything that is not JSON: ``NaN`` and the infinities are refused
    (:class:`ValueError`), and a string UTF-8 cannot encode (a lone surrogate) is
    written as ASCII escapes instead of failing.
    """
    try:
        return json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def is_text(value: object) -> bool:
    """Whether *value* is a string UTF-8 can encode (no lone surrogate)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def state_of(raw: object) -> str:
    """A wire state in the 0.3 spelling; a 1.0 ``TASK_STATE_*`` is mapped. Unknown
    spellings raise :class:`A2AError` (strict parsing: a typo never polls forever)."""
    if isinstance(raw, str):
        state = _V1_STATES.get(raw, raw)
        if state in STATES:
            return state
    raise A2AError(f"not an A2A task state: {raw!r}")


def state_v1(state: str) -> str:
    """A 0.3 state in the 1.0 spelling."""
    return _TO_V1.get(state, "TASK_STATE_UNSPECIFIED")


def part_texts(parts: object) -> list[str]:
    """The texts of the text parts of *parts*: ``{"kind": "text", "text": ...}`` (0.3)
    or ``{"text": ...}`` (1.0, no ``kind``); other kinds (file, data) are skipped."""
    if not isinstance(parts, list):
        return []
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("kind")
        text = part.get("text")
        if (kind is None or kind == "text") and isinstance(text, str):
            texts.append(text)
    return texts


def message_text(message: object) -> str:
    """The text parts of a message, joined by ``\\n`` (empty for anything else)."""
    if not isinstance(message, Mapping):
        return ""
    return "\n".join(part_texts(message.get("parts")))


def is_agent_role(role: object) -> bool:
    """``"agent"`` (0.3) or ``"ROLE_AGENT"`` (1.0)."""
    return role in ("agent", "ROLE_AGENT")


def task_from_result(result: object) -> dict[str, Any]:
    """The task in a ``SendMessage``/``GetTask``/``CancelTask`` result: the result itself
    (0.3, the SPEC), or its ``task`` (1.0's ``SendMessageResponse``). A bare agent
    ``message`` reply (1.0 allows one instead of a task) becomes a completed task
    without an id, holding that message in its history."""
    if isinstance(result, Mapping):
        inner = result.get("task")
        if isinstance(inner, Mapping) and "status" in inner:
            return dict(inner)
        if "status" in result and "id" in result:
            return dict(result)
        message = result.get("message")
        if isinstance(message, Mapping) and "status" not in result:
            return {"id": "", "status": {"state": "completed"}, "history": [dict(message)]}
        if result.get("kind") == "message" or ("messageId" in result and "parts" in result):
            return {"id": "", "status": {"state": "completed"}, "history": [dict(result)]}
    raise A2AError(f"the A2A reply holds no task: {str(result)[:200]}")


def task_state(task: Mapping[str, Any]) -> str:
    """The (0.3-spelled) state of a wire task."""
    status = task.get("status")
    if not isinstance(status, Mapping):
        raise A2AError("the A2A task has no status")
    return state_of(status.get("state"))


def completed_text(task: Mapping[str, Any]) -> str:
    """SPEC §7A: every text part across ``artifacts[].parts[]`` joined by ``\\n``; with
    none, the text of the last agent message of the history (or the status message)."""
    texts: list[str] = []
    artifacts = task.get("artifacts")
    if isinstance(artifacts, list):
        for artifact in artifacts:
            if isinstance(artifact, Mapping):
                texts.extend(part_texts(artifact.get("parts")))
    if texts:
        return "\n".join(texts)
    history = task.get("history")
    if isinstance(history, list):
        for message in reversed(history):
            if isinstance(message, Mapping) and is_agent_role(message.get("role")):
                return message_text(message)
    status = task.get("status")
    if isinstance(status, Mapping):
        return message_text(status.get("message"))
    return ""


def status_text(task: Mapping[str, Any]) -> str:
    """The text of ``status.message`` (empty when there is none)."""
    status = task.get("status")
    return message_text(status.get("message")) if isinstance(status, Mapping) else ""


# -- requests ------------------------------------------------------------------------


def send_message(request_id: str, message_id: str, text: str, version: Version) -> dict[str, Any]:
    """The ``SendMessage`` request: the SPEC's body for 0.3, the 1.0 shape otherwise."""
    if version == "0.3":
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "SendMessage",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": message_id,
                    "parts": [{"kind": "text", "text": text}],
                },
                "configuration": {"blocking": False},
            },
        }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]},
            "configuration": {"returnImmediately": True},
        },
    }


def by_id(request_id: str, method: str, task_id: str) -> dict[str, Any]:
    """``GetTask`` / ``CancelTask``: ``{"jsonrpc","id","method","params":{"id"}}``."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"id": task_id}}


# -- tasks (server side) -------------------------------------------------------------


def data_of(output: Any) -> dict[str, Any]:
    """A typed result as a data part's ``data`` (an object: other values go under
    ``"result"``, as the final-result tool wraps them)."""
    data = output if isinstance(output, bool | int | float | str) else payloads.unstructure(output)
    return data if isinstance(data, dict) else {"result": data}


def text_parts(text: str, version: Version) -> list[dict[str, Any]]:
    """One text part in either shape."""
    return [{"kind": "text", "text": text}] if version == "0.3" else [{"text": text}]


def task_v1(task: Mapping[str, Any]) -> dict[str, Any]:
    """A stored (0.3-shaped) task in the 1.0 shape: ``TASK_STATE_*``, ``ROLE_*``, parts
    without ``kind``, no ``kind: "task"``."""

    def message(m: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in m.items() if k not in ("kind", "parts", "role")}
        out["role"] = "ROLE_AGENT" if is_agent_role(m.get("role")) else "ROLE_USER"
        out["parts"] = [{"text": t} for t in part_texts(m.get("parts"))]
        return out

    status = dict(task["status"])
    status["state"] = state_v1(str(status.get("state")))
    if isinstance(status.get("message"), Mapping):
        status["message"] = message(status["message"])
    out: dict[str, Any] = {
        "id": task["id"],
        "contextId": task.get("contextId", ""),
        "status": status,
    }
    if task.get("artifacts"):
        out["artifacts"] = [
            {
                "artifactId": a.get("artifactId", ""),
                "parts": [{"text": t} for t in part_texts(a.get("parts"))]
                + [
                    {"data": p["data"]}
                    for p in a.get("parts") or ()
                    if isinstance(p, Mapping) and p.get("kind") == "data"
                ],
            }
            for a in task["artifacts"]
        ]
    if task.get("history"):
        out["history"] = [message(m) for m in task["history"]]
    return out
