"""The one mapping between §10 :class:`Request`/:class:`Answer` and MCP elicitation.

Both directions use it (pure data, no SDK import, so it is testable alone):

- **MCP source** (a server elicits while we call its tool, SPEC §2): an
  ``elicitation/create`` becomes a :class:`Request` for the toolkit's ``wait_for``
  (:func:`request_from_elicitation`) and its :class:`Answer` becomes the MCP result
  (:func:`elicit_result_from_answer`).
- **MCP serve** (a tool we serve suspends, SPEC §10): the :class:`Request` becomes an
  ``elicitation/create`` for the client (:func:`elicitation_from_request`) and the
  client's result becomes the :class:`Answer` the tool is re-run with
  (:func:`answer_from_elicit_result`).

Form mode carries ``question``/``input``/``approval``; URL mode carries
``authorization`` (a secret is entered out of band, never through a form).
Everything read from the other side is checked strictly and a bad value is a
:class:`ValueError` saying which field and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from .._wire import Answer, Request

ACTIONS: Final = ("accept", "decline", "cancel")
"""The three MCP elicitation outcomes."""

EMPTY_FORM: Final[dict[str, Any]] = {"type": "object", "properties": {}}
"""The confirm shape: a form with no fields (accept = yes)."""

_URL_SCHEMES: Final = ("https://", "http://")

RELAY_FORM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "output": {"type": "string", "title": "Output", "description": "What the call returned"},
        "isError": {"type": "boolean", "title": "Failed", "description": "True if the call failed"},
    },
    "required": ["output"],
}
"""The form a served relay tool asks its MCP client to fill: the call's result, in the
single-call shorthand of SPEC §10 (``Answer.data.output`` / ``isError``)."""


def _is_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def _check_url(url: object, where: str) -> str:
    if not isinstance(url, str) or not url.lower().startswith(_URL_SCHEMES):
        raise ValueError(f"{where} must be an http(s) URL, got {url!r:.60}")
    return url


# ---------------------------------------------------------------------------
# Source side: a server's elicitation -> Request; our Answer -> its result
# ---------------------------------------------------------------------------


def request_from_elicitation(params: Mapping[str, Any]) -> Request:
    """The :class:`Request` for an ``elicitation/create``'s params (wire keys).

    Form mode (``mode`` absent or ``"form"``) gives ``kind="input"`` with the
    ``requestedSchema`` in ``data["schema"]``; URL mode gives ``kind="authorization"``
    with the ``url`` (and ``data["elicitationId"]`` when the server sent one).
    """
    mode = params.get("mode", "form")
    message = params.get("message")
    if not isinstance(message, str):
        raise ValueError(f"elicitation message must be a string, got {message!r:.60}")
    if mode == "url":
        url = _check_url(params.get("url"), "elicitation url")
        eid = params.get("elicitationId")
        if eid is not None and not isinstance(eid, str):
            raise ValueError(f"elicitationId must be a string, got {eid!r:.60}")
        return Request(
            kind="authorization",
            prompt=message,
            url=url,
            data=None if eid is None else {"elicitationId": eid},
        )
    if mode != "form":
        raise ValueError(f"unknown elicitation mode {mode!r:.40}")
    schema = params.get("requestedSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError("elicitation requestedSchema must be an object schema")
    return Request(kind="input", prompt=message, data={"schema": schema})


def elicit_result_from_answer(answer: Answer, *, url_mode: bool) -> dict[str, Any]:
    """The ``elicitation/create`` result for *answer* (SPEC §2 mapping).

    ``ok`` is ``accept`` (form mode sends ``answer.data`` as the content), a
    ``"declined"`` reason is ``decline`` and anything else ``cancel``. Content must be
    a flat object of strings, numbers, booleans, nulls or string lists (the MCP form
    shape); anything else is a :class:`ValueError`.
    """
    if not answer.ok:
        return {"action": "decline" if answer.reason == "declined" else "cancel"}
    if url_mode or answer.data is None:
        return {"action": "accept"}
    content: dict[str, Any] = {}
    for key, value in answer.data.items():
        if _is_scalar(value) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            content[key] = value
        else:
            raise ValueError(
                f"answer data {key!r} is {type(value).__name__}: an elicitation form takes "
                "strings, numbers, booleans, null or string lists"
            )
    return {"action": "accept", "content": content}


# ---------------------------------------------------------------------------
# Serve side: a served tool's Request -> elicitation; the client's result -> Answer
# ---------------------------------------------------------------------------


def _question_schema(questions: list[Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for i, q in enumerate(questions, 1):
        q = q if isinstance(q, dict) else {"question": str(q)}
        options = [o for o in q.get("options") or () if isinstance(o, str)]
        prop: dict[str, Any] = {"type": "string"}
        if options and q.get("multiple") is True:
            prop = {"type": "array", "items": {"type": "string", "enum": options}}
        elif options:
            prop["enum"] = options
        header = q.get("header")
        prop["title"] = header if isinstance(header, str) and header else f"Question {i}"
        prop["description"] = str(q.get("question", ""))
        properties[f"answer_{i}"] = prop
    return {"type": "object", "properties": properties, "required": list(properties)}


def _form_schema(request: Request) -> dict[str, Any]:
    data = request.data or {}
    questions = data.get("questions")
    if request.kind == "question" and isinstance(questions, list) and questions:
        return _question_schema(questions)
    schema = data.get("schema")
    if isinstance(schema, dict) and schema.get("type") == "object":
        return schema
    if request.kind == "input":
        return {
            "type": "object",
            "properties": {"value": {"type": "string", "description": request.prompt}},
            "required": ["value"],
        }
    return dict(EMPTY_FORM)


def elicitation_from_request(
    request: Request, *, url_supported: bool, with_id: bool = True, relay: bool = False
) -> dict[str, Any]:
    """The ``elicitation/create`` params (wire keys) asking a client for *request*.

    A request with a ``url`` (``authorization`` and the like) uses URL mode when the
    client supports it (``elicitationId`` is ``request.id``, sent when *with_id*);
    otherwise, and for every other kind, form mode: ``question`` becomes one field per
    question (``answer_1``...), ``input`` its ``data["schema"]`` (or one ``value``
    string), and ``approval`` (or any other kind) a confirm form with no fields. With
    *relay* (the request of a relay tool, which the client is to run itself): the
    :data:`RELAY_FORM` (``output``, ``isError``), with a message naming the call and
    its arguments.
    """
    if request.url is not None and url_supported:
        params: dict[str, Any] = {"mode": "url", "message": request.prompt, "url": request.url}
        if with_id:
            params["elicitationId"] = request.id
        return params
    if relay:
        return {"mode": "form", "message": _relay_message(request), "requestedSchema": RELAY_FORM}
    message = request.prompt if request.url is None else f"{request.prompt}\n{request.url}"
    return {"mode": "form", "message": message, "requestedSchema": _form_schema(request)}


def _relay_message(request: Request) -> str:
    # A relay call asks the client to run the call itself: say which, with what.
    calls = (request.data or {}).get("calls")
    first = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else {}
    name, arguments = first.get("name"), first.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        return request.prompt
    return (
        f"Run the tool {name} with the arguments {arguments} on your side and give its "
        "output (and whether it failed)."
    )


def answer_from_elicit_result(request: Request, result: Mapping[str, Any]) -> Answer:
    """The :class:`Answer` to *request* for a client's elicitation result (wire keys).

    ``accept`` is ``ok`` with the form content as ``data`` (for a ``question``,
    ``{"answers": [...]}`` in question order); ``decline`` is ``reason="declined"`` and
    ``cancel`` ``reason="cancelled"``. Another action is a :class:`ValueError`.
    """
    action = result.get("action")
    if action == "decline":
        return Answer(request.id, False, reason="declined")
    if action == "cancel":
        return Answer(request.id, False, reason="cancelled")
    if action != "accept":
        raise ValueError(f"elicitation action must be one of {ACTIONS}, got {action!r:.40}")
    content = result.get("content")
    if content is not None and not isinstance(content, dict):
        raise ValueError(f"elicitation content must be an object, got {type(content).__name__}")
    questions = (request.data or {}).get("questions")
    if request.kind == "question" and isinstance(questions, list) and questions:
        given = content or {}
        return Answer(
            request.id,
            True,
            {"answers": [given.get(f"answer_{i}") for i in range(1, len(questions) + 1)]},
        )
    return Answer(request.id, True, dict(content) if content else None)
