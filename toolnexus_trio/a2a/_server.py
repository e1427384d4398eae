"""A toolkit as an A2A agent (SPEC §7B): the agent card and the JSON-RPC endpoint, as a
small ASGI app that ``Toolkit.serve`` mounts beside ``/mcp`` on its hypercorn-Trio
server.

- ``GET /.well-known/agent-card.json``: the card, with the SPEC's defaults; its skills
  are the toolkit's skills (SKILL.md), never its raw tools.
- ``POST /``: ``SendMessage`` answers a ``submitted`` task at once and runs the task in
  the server's nursery (``working``, ``client.run``, then ``completed`` with one text
  artifact or ``failed`` with the error); ``GetTask``; ``CancelTask`` cancels that run's
  cancel scope (``canceled``). The SPEC's method names and the a2a-sdk's both work:
  ``message/send``, ``tasks/get``, ``tasks/cancel`` (0.3) and the 1.0 shapes (the
  ``A2A-Version: 1.0`` header, ``TASK_STATE_*``, parts without ``kind``).
- Bounded: a request body over ``max_request_bytes`` gets 413; at most
  ``max_in_flight`` tasks run at once (past that, a JSON-RPC error that says so);
  ``Host`` and ``Origin`` are checked as on ``/mcp``; finished tasks expire from the
  in-memory store.
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import trio

from .. import _tracing
from .._groups import collapse_groups
from ._store import TaskStore, resolve_store
from ._wire import (
    BUSY,
    CARD_PATH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    TERMINAL,
    VERSION_HEADER,
    data_of,
    dumps,
    is_text,
    part_texts,
    task_v1,
    text_parts,
)

if TYPE_CHECKING:
    from .._toolkit import Toolkit

logger = logging.getLogger("toolnexus_trio.a2a.serve")

DEFAULT_MAX_REQUEST_BYTES: Final = 1024 * 1024
DEFAULT_MAX_IN_FLIGHT: Final = 64
MAX_CONTEXT_ID_CHARS: Final = 1024
"""The longest ``contextId`` a ``SendMessage`` may give (longer is refused)."""
SAVE_GRACE: Final = 2.0
"""Seconds the last save of a cancelled task may take."""
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
_SEND = frozenset({"SendMessage", "message/send"})
_GET = frozenset({"GetTask", "tasks/get"})
_CANCEL = frozenset({"CancelTask", "tasks/cancel"})


class TaskClient(Protocol):
    """What fulfils a task: the agent loop's client (``Client.run``)."""

    async def run(self, prompt: str, toolkit: Any = None, /) -> Any:
        """Run *prompt* with *toolkit*; the result's ``text`` is the answer."""
        ...


@attrs.frozen
class TaskInfo:
    """What ``on_task`` gets when a served task ends: its ``id``, ``skill`` (``None``:
    the message names none), the ``task`` text, the client's ``result`` (its
    ``RunResult``, with tokens, tool calls and turns; ``None`` when it failed or was
    cancelled) and the final ``state``."""

    id: str
    skill: str | None
    task: str
    result: Any
    state: str


OnTask = Callable[[TaskInfo], "Awaitable[None] | None"]


def _check_provider(_: object, __: object, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or set(value) != {"organization", "url"}:
        raise ValueError("provider is {'organization': ..., 'url': ...}")


@attrs.frozen
class A2AServeConfig:
    """The A2A profile of ``Toolkit.serve`` (SPEC §7B ``A2AConfig``).

    ``name`` (default ``"toolnexus-agent"``), ``description`` (``""``), ``version``
    (``"0.1.0"``) and ``provider`` (``{"organization", "url"}``, only on the card when
    set) describe the agent; ``skills`` keeps only those skill names on the card;
    ``store`` is a :class:`TaskStore`, ``"memory"`` (default) or ``"file:<dir>"``.
    ``max_in_flight`` and ``max_request_bytes`` bound the server.
    """

    name: str | None = None
    description: str | None = None
    version: str | None = None
    provider: Mapping[str, str] | None = attrs.field(default=None, validator=_check_provider)
    skills: Sequence[str] | None = None
    store: TaskStore | str | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> A2AServeConfig:
        """The profile a config file's ``a2a`` block gives (``name``, ``description``,
        ``version``, ``provider``, ``skills``, ``store``, ``maxInFlight``,
        ``maxRequestBytes``); another key, or a value of the wrong kind, is a
        :class:`ValueError`."""
        keys = {"name": "name", "description": "description", "version": "version",
                "provider": "provider", "skills": "skills", "store": "store",
                "maxInFlight": "max_in_flight", "maxRequestBytes": "max_request_bytes"}  # fmt: skip
        unknown = sorted(set(block) - set(keys))
        if unknown:
            raise ValueError(f"a2a: unknown key {unknown[0]!r} ({', '.join(keys)})")
        for key in ("name", "description", "version", "store"):
            if block.get(key) is not None and not isinstance(block[key], str):
                raise ValueError(f"a2a.{key} must be a string")
        skills = block.get("skills")
        if skills is not None and not (
            isinstance(skills, list) and all(isinstance(n, str) for n in skills)
        ):
            raise ValueError("a2a.skills must be an array of skill names")
        for key in ("maxInFlight", "maxRequestBytes"):
            value = block.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"a2a.{key} must be an integer")
        return cls(**{keys[k]: v for k, v in block.items() if v is not None})


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Rpc(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class A2AServer:
    """The A2A face of a toolkit: an ASGI app plus the nursery its tasks run in.

    Start :meth:`run` in a nursery (``Toolkit.serve`` does), then call :meth:`bound`
    with the server's base URL.
    """

    def __init__(
        self,
        toolkit: Toolkit | None,
        client: TaskClient,
        config: A2AServeConfig,
        on_task: OnTask | None = None,
        *,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        if not callable(getattr(client, "run", None)):
            raise TypeError("serve(a2a=...) needs client=, a client with run(prompt, toolkit)")
        self.toolkit = toolkit
        self.client = client
        self.config = config
        self.on_task = on_task
        self.store = resolve_store(config.store)
        self.base_url = ""
        bound = f"[{host.strip('[]')}]" if ":" in host else host
        self._hosts = {n.lower() for n in (bound, *LOOPBACK_NAMES)}
        self._extra_hosts = list(allowed_hosts)
        local = [n for n in self._hosts if n in LOOPBACK_NAMES or is_loopback(host)]
        self._origins = {f"http://{n}" for n in local}
        self._extra_origins = list(allowed_origins)
        self._nursery: trio.Nursery | None = None
        self._running: dict[str, tuple[trio.CancelScope, trio.Event]] = {}
        # Tasks (of those running) whose message named its contextId: only they continue
        # a stored conversation, so a caller without one writes no thread per task.
        self._threaded: set[str] = set()

    @property
    def url(self) -> str:
        """The JSON-RPC endpoint: ``<base>/``."""
        return self.base_url + "/"

    @property
    def card_url(self) -> str:
        """``<base>/.well-known/agent-card.json``."""
        return self.base_url + CARD_PATH

    def bound(self, base_url: str) -> None:
        """Tell the server its base URL (``http://HOST:PORT``), for the card's ``url``."""
        self.base_url = base_url.rstrip("/")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the nursery the tasks run in, until cancelled (which cancels them)."""
        with collapse_groups():
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()

    # ------------------------------------------------------------------ the card

    def card(self) -> dict[str, Any]:
        """The agent card (SPEC §7B's defaults)."""
        cfg = self.config
        skills = self.card_skills()
        if cfg.skills is not None:
            wanted = set(cfg.skills)
            skills = [s for s in skills if s["name"] in wanted]
        card: dict[str, Any] = {
            "name": cfg.name if cfg.name is not None else self.default_name,
            "description": cfg.description if cfg.description is not None else "",
            "version": cfg.version if cfg.version is not None else "0.1.0",
            "protocolVersion": "0.3.0",
        }
        if cfg.provider is not None:
            card["provider"] = {
                "organization": cfg.provider["organization"],
                "url": cfg.provider["url"],
            }
        card.update(
            {
                "capabilities": {"streaming": False, "pushNotifications": False},
                "defaultInputModes": ["text"],
                "defaultOutputModes": ["text"],
                "skills": skills,
                "url": self.url,
            }
        )
        return card

    @property
    def default_name(self) -> str:
        """The card's ``name`` when the config sets none."""
        return "toolnexus-agent"

    def card_skills(self) -> list[dict[str, str]]:
        """The card's skills before the config's filter: the toolkit's skills (SKILL.md)."""
        catalog = None if self.toolkit is None else self.toolkit._skills
        found = [] if catalog is None else sorted(catalog.skills.values(), key=lambda s: s.name)
        return [{"id": s.name, "name": s.name, "description": s.description or ""} for s in found]

    async def run_task(self, task: dict[str, Any], text: str, skill: str | None) -> Any:
        """Fulfil one task: ``client.run(text, toolkit)`` (its result's ``status`` and
        ``text`` decide the task's end). When the message named a ``contextId`` and the
        client has ``ask`` (a loop client), the conversation kept under that id continues
        instead: ``client.ask(text, toolkit, id=contextId)``, as toolnexus 0.21 serves.
        *task* is the task being fulfilled (a subclass may save states on the way, as
        ``input-required``)."""
        ask = getattr(self.client, "ask", None)
        if task["id"] in self._threaded and callable(ask):
            return await ask(text, self.toolkit, id=task["contextId"])
        return await self.client.run(text, self.toolkit)

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app (HTTP only)."""
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._host_ok(headers.get("host", "")):
            await _respond(send, 421, b"Invalid Host header", "text/plain")
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            await _respond(send, 403, b"Invalid Origin header", "text/plain")
            return
        path, method = scope["path"], scope["method"]
        if path == CARD_PATH and method == "GET":
            await _respond(send, 200, dumps(self.card()))
        elif path == "/" and method == "POST":
            body = await _read_body(receive, self.config.max_request_bytes)
            if body is None:
                await _respond(send, 413, b"request body too large", "text/plain")
                return
            v1 = headers.get(VERSION_HEADER.lower(), "").startswith("1.")
            # A task sent here starts once its answer is on the wire: the caller gets the
            # "submitted" task at once, not after the fulfilment's first steps.
            sent = trio.Event()
            try:
                # The caller's trace context: a task started here runs under its span.
                with _tracing.attached(_tracing.extract(headers)):
                    reply = await self.rpc(body, v1=v1, sent=sent)
                await _respond(send, 200, dumps(reply))
            finally:
                sent.set()
        elif path in (CARD_PATH, "/"):
            await _respond(send, 405, b"method not allowed", "text/plain")
        else:
            await _respond(send, 404, b"not found", "text/plain")

    def _host_ok(self, host: str) -> bool:
        if host in self._extra_hosts:
            return True
        name = host.lower()
        if name.startswith("["):
            name = name[: name.find("]") + 1]
        elif name.count(":") == 1:
            name = name.split(":")[0]
        return name in self._hosts or f"{name}:*" in self._extra_hosts

    def _origin_ok(self, origin: str) -> bool:
        if origin in self._extra_origins:
            return True
        scheme, _, rest = origin.lower().partition("://")
        name = rest[: rest.find("]") + 1] if rest.startswith("[") else rest.split(":")[0]
        base = f"{scheme}://{name}"
        return base in self._origins or f"{base}:*" in self._extra_origins

    # ------------------------------------------------------------------ JSON-RPC

    async def rpc(self, body: bytes, *, v1: bool, sent: trio.Event | None = None) -> dict[str, Any]:
        """One JSON-RPC request's reply; a task it creates waits for *sent*, if given."""
        try:
            request = json.loads(body, parse_constant=_not_json)
        except (ValueError, RecursionError):
            # RecursionError: valid JSON nested deeper than the parser goes (a body of
            # "[[[[..." under the size cap) is refused as unparsable, not a 500.
            return _error(None, PARSE_ERROR, "Parse error")
        if not isinstance(request, dict):
            return _error(None, INVALID_REQUEST, "Invalid Request: not a JSON-RPC object")
        rid = request.get("id")
        if not _valid_id(rid):
            # JSON-RPC ids are a string, a number or null: anything else (an object,
            # a huge float that parsed as infinity) is not echoed, and a lone
            # surrogate could not be.
            return _error(None, INVALID_REQUEST, "Invalid Request: bad id")
        method = request.get("method")
        params = request.get("params")
        if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return _error(rid, INVALID_REQUEST, "Invalid Request")
        if not isinstance(params, dict):
            params = {}
        try:
            if method in _SEND:
                task = await self._send(params, sent)
                result: Any = {"task": task_v1(task)} if v1 else task
            elif method in _GET:
                task = await self._get(params)
                result = task_v1(task) if v1 else task
            elif method in _CANCEL:
                task = await self._cancel(params)
                result = task_v1(task) if v1 else task
            else:
                raise _Rpc(METHOD_NOT_FOUND, f"Method not found: {method}")
        except _Rpc as exc:
            return _error(rid, exc.code, str(exc))
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _send(self, params: dict[str, Any], sent: trio.Event | None) -> dict[str, Any]:
        message = params.get("message")
        if not isinstance(message, dict):
            raise _Rpc(INVALID_PARAMS, "SendMessage needs params.message")
        texts = part_texts(message.get("parts"))
        if not texts:
            raise _Rpc(INVALID_PARAMS, "the message has no text part")
        if self._nursery is None:
            raise _Rpc(BUSY, "the server is not running")
        if len(self._running) >= self.config.max_in_flight:
            raise _Rpc(
                BUSY,
                f"too many A2A tasks in flight ({self.config.max_in_flight}); try again later",
            )
        text = "\n".join(texts)
        context = message.get("contextId")
        # Checked before anything is saved or started: the reply carries contextId, and
        # a task whose reply cannot be written would run with its caller never told
        # its id (a retry would run the work twice).
        if context is not None and not _valid_context(context):
            raise _Rpc(
                INVALID_PARAMS,
                f"message.contextId must be text of at most {MAX_CONTEXT_ID_CHARS} "
                "characters, without control characters or lone surrogates",
            )
        task: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "contextId": context if isinstance(context, str) and context else str(uuid.uuid4()),
            "status": {"state": "submitted"},
            "kind": "task",
        }
        await self.store.save(task)
        skill = (
            params.get("metadata", {}).get("skill")
            if isinstance(params.get("metadata"), dict)
            else None
        )
        scope, done = trio.CancelScope(), trio.Event()
        self._running[task["id"]] = (scope, done)
        if isinstance(context, str) and context:
            self._threaded.add(task["id"])
        skill = skill if isinstance(skill, str) else None
        self._nursery.start_soon(self._fulfil, dict(task), text, skill, scope, done, sent)
        return task

    async def _get(self, params: dict[str, Any]) -> dict[str, Any]:
        task_id = params.get("id")
        task = await self.store.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise _Rpc(TASK_NOT_FOUND, f"Task not found: {task_id}")
        return task

    async def _cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        task = await self._get(params)
        running = self._running.get(task["id"])
        if running is None:
            if task["status"].get("state") in TERMINAL:
                raise _Rpc(
                    TASK_NOT_CANCELABLE,
                    f"Task cannot be canceled: {task['id']} is {task['status']['state']}",
                )
            raise _Rpc(TASK_NOT_CANCELABLE, f"Task cannot be canceled: {task['id']} runs elsewhere")
        scope, done = running
        scope.cancel()
        with trio.move_on_after(SAVE_GRACE):
            await done.wait()
        return await self._get(params)

    # ------------------------------------------------------------------ fulfilment

    async def _fulfil(
        self,
        task: dict[str, Any],
        text: str,
        skill: str | None,
        scope: trio.CancelScope,
        done: trio.Event,
        sent: trio.Event | None = None,
    ) -> None:
        result: Any = None
        try:
            try:
                with scope:
                    if sent is not None:
                        await sent.wait()
                    task["status"] = {"state": "working"}
                    await self.store.save(task)
                    result = await self.run_task(task, text, skill)
                    status = getattr(result, "status", "done")
                    answer = str(getattr(result, "text", result))
                    if status == "done":
                        task["status"] = {"state": "completed"}
                        parts = text_parts(answer, "0.3")
                        output = getattr(result, "output", None)
                        if output is not None:  # a typed result: its JSON as a data part
                            parts.append({"kind": "data", "data": data_of(output)})
                        task["artifacts"] = [{"artifactId": str(uuid.uuid4()), "parts": parts}]
                    elif status == "pending":
                        # A run that waits for an answer: the host answers it (its
                        # client's answer(), under the contextId) and no artifact yet.
                        task["status"] = _agent_status("input-required", answer)
                    else:
                        task["status"] = _failed(
                            f"the run ended {status}" + (f": {answer}" if answer else "")
                        )
                if scope.cancelled_caught:
                    task["status"] = {"state": "canceled"}
            except trio.Cancelled:
                # The server is stopping: record it, bounded, then go.
                task["status"] = {"state": "canceled"}
                with trio.move_on_after(SAVE_GRACE, shield=True):
                    await self._finish(task, text, skill, None)
                raise
            except Exception as exc:
                logger.warning("A2A task %s failed: %s", task["id"], exc)
                task["status"] = _failed(str(exc) or type(exc).__name__)
            kept = task["status"]["state"] in ("completed", "input-required")
            await self._finish(task, text, skill, result if kept else None)
        finally:
            self._running.pop(task["id"], None)
            self._threaded.discard(task["id"])
            done.set()

    async def _finish(
        self, task: dict[str, Any], text: str, skill: str | None, result: Any
    ) -> None:
        try:
            await self.store.save(task)
        except Exception:
            logger.exception("A2A task %s: the store failed to save it", task["id"])
        if self.on_task is None:
            return
        info = TaskInfo(task["id"], skill, text, result, task["status"]["state"])
        try:
            out = self.on_task(info)
            if inspect.isawaitable(out):
                await out
        except Exception:
            logger.exception("on_task raised; the task is not affected")


def _failed(text: str) -> dict[str, Any]:
    return _agent_status("failed", text)


def _agent_status(state: str, text: str) -> dict[str, Any]:
    return {
        "state": state,
        "message": {
            "role": "agent",
            "messageId": str(uuid.uuid4()),
            "parts": text_parts(text, "0.3"),
            "kind": "message",
        },
    }


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _valid_context(context: object) -> bool:
    # The stores' id rule (a lower floor cannot import it): no C0 control, DEL or lone
    # surrogate, and bounded.
    return (
        is_text(context)
        and isinstance(context, str)
        and len(context) <= MAX_CONTEXT_ID_CHARS
        and not any(c < " " or c == "\x7f" for c in context)
    )


def _valid_id(rid: object) -> bool:
    if rid is None or (isinstance(rid, int) and not isinstance(rid, bool)):
        return True
    if isinstance(rid, float):
        return math.isfinite(rid)
    return is_text(rid)


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request body, or ``None`` once it passes *limit* bytes (not read further)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _respond(send: Any, status: int, body: bytes, kind: str = "application/json") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
