"""Remote A2A agents as a tool source (SPEC §7A, source ``"a2a"``): the agent, its
config block, and the card that becomes one tool per skill.

:func:`agent` names a remote agent by its card URL; the toolkit resolves it
(``GET`` the card), and each skill becomes a tool that sends the skill's ``task`` to
the agent and polls for the result (:mod:`._call`). A failing agent gives no tools and
a ``failed`` status (:class:`A2AStatus`), never a failed toolkit.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit

import attrs
import trio

from .._names import sanitize
from .._tools import Tool, ToolContext, ToolResult, ToolSource
from ._call import RemoteAgent, read_capped
from ._wire import A2AError, Version

if TYPE_CHECKING:
    # The HTTP stack is imported on first use (issue 39: start-up); see A2ASource.
    import httpx2

logger = logging.getLogger("toolnexus_trio.a2a")

DEFAULT_TIMEOUT_MS: Final = 300_000
DEFAULT_POLL_EVERY_MS: Final = 1_000
CARD_MAX_BYTES: Final = 1024 * 1024
"""An agent card bigger than this is refused (memory stays bounded whatever a peer sends)."""
CONNECT_TIMEOUT: Final = 10.0
CARD_TIMEOUT: Final = 30.0
"""Seconds one card fetch may take: a hung peer fails its agent, not the toolkit."""

_ENV: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
TASK_SCHEMA: Final = {
    "type": "object",
    "properties": {"task": {"type": "string"}},
    "required": ["task"],
}


def _check_ms(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} is a positive number of milliseconds, not {value!r}")


def _check_headers(_: object, __: object, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("headers maps header names to string values")


def _check_card(_: object, __: object, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"card is the agent card's URL, not {type(value).__name__}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"card must be an absolute http(s) URL, not {value!r}")


@attrs.frozen
class A2AAgent:
    """A remote A2A agent, by its card URL (made by :func:`agent`).

    ``headers`` go with every request (card, send, poll, cancel); ``${ENV}`` in their
    values is expanded on every request and never logged. ``timeout`` and
    ``poll_every`` are milliseconds. ``id`` is the config block's key (the card URL
    when made in code); it names the agent in :meth:`Toolkit.a2a_status`, while the
    tools' prefix comes from the card's ``name``.
    """

    card: str = attrs.field(validator=_check_card)
    headers: Mapping[str, str] | None = attrs.field(default=None, validator=_check_headers)
    timeout: int = attrs.field(default=DEFAULT_TIMEOUT_MS, validator=_check_ms)
    poll_every: int = attrs.field(default=DEFAULT_POLL_EVERY_MS, validator=_check_ms)
    id: str | None = None
    enabled: bool = True

    @property
    def key(self) -> str:
        """The agent's name in the status map: ``id``, else the card URL."""
        return self.id if self.id is not None else self.card


def agent(
    card: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: int = DEFAULT_TIMEOUT_MS,
    poll_every: int = DEFAULT_POLL_EVERY_MS,
) -> A2AAgent:
    """A remote A2A agent (SPEC §7A): *card* is its Agent Card URL
    (``http://host:port/.well-known/agent-card.json``).

    Give it to ``ToolkitOptions(agents=[...])`` or :meth:`Toolkit.add_agent`. *timeout*
    bounds one call (ms, default 300 000); *poll_every* is the ``GetTask`` period (ms,
    default 1 000).
    """
    return A2AAgent(card, headers, timeout, poll_every)


@attrs.frozen
class A2AStatus:
    """One agent's state: ``connected``, ``disabled`` or ``failed`` (with ``error``);
    ``tools`` counts the tools it gave; ``name`` is its card's name once read."""

    state: Literal["connected", "disabled", "failed"]
    error: str | None = None
    tools: int = 0
    name: str | None = None


AgentsInput = Sequence[A2AAgent | str] | Mapping[str, Any]
"""What ``ToolkitOptions.agents`` takes: agents (or card URLs), or the config block."""


def _opt(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = raw.get(key)
    if value is not None and (
        not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool)
    ):
        raise ValueError(f"agents.{where}.{key} must be a {kind.__name__}, not {value!r}")
    return value


def parse_agents_config(block: Mapping[str, Any]) -> list[A2AAgent]:
    """The config file's ``agents`` block (mirrors ``mcpServers``)::

        {"<id>": {"card": URL, "headers": {...}, "timeout": ms, "pollEvery": ms,
                  "enabled": bool, "disabled": bool}}

    ``enabled``/``disabled`` follow MCP's precedence (``disabled: true`` or
    ``enabled: false`` turns it off). Unknown keys and wrong types raise
    :class:`ValueError` naming the entry.
    """
    if not isinstance(block, Mapping):
        raise ValueError("the agents block maps ids to {card, headers?, timeout?, pollEvery?}")
    known = {"card", "headers", "timeout", "pollEvery", "enabled", "disabled"}
    agents: list[A2AAgent] = []
    for key, raw in block.items():
        if not isinstance(key, str) or not isinstance(raw, Mapping):
            raise ValueError(f"agents.{key}: an entry is an object")
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"agents.{key}: unknown keys {sorted(unknown)}")
        card = raw.get("card")
        if not isinstance(card, str):
            raise ValueError(f"agents.{key}.card is the agent card URL (a string)")
        headers = _opt(raw, "headers", dict, key)
        timeout = _opt(raw, "timeout", int, key)
        poll = _opt(raw, "pollEvery", int, key)
        disabled, enabled = _opt(raw, "disabled", bool, key), _opt(raw, "enabled", bool, key)
        try:
            agents.append(
                A2AAgent(
                    card,
                    headers,
                    DEFAULT_TIMEOUT_MS if timeout is None else timeout,
                    DEFAULT_POLL_EVERY_MS if poll is None else poll,
                    id=key,
                    enabled=not (disabled is True or enabled is False),
                )
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"agents.{key}: {exc}") from None
    return agents


def agents_of(value: AgentsInput) -> list[A2AAgent]:
    """``ToolkitOptions.agents`` as a list of agents."""
    if isinstance(value, Mapping):
        return parse_agents_config(value)
    if isinstance(value, str):
        raise TypeError("agents is a list of agent(...) (or card URLs), or the config block")
    out: list[A2AAgent] = []
    for item in value:
        if isinstance(item, str):
            out.append(agent(item))
        elif isinstance(item, A2AAgent):
            out.append(item)
        else:
            raise TypeError(
                f"agents holds agent(...) objects or card URLs, not {type(item).__name__}"
            )
    return out


class Headers:
    """An agent's headers, ``${ENV}`` expanded at each request (a rotated secret is
    picked up); the expanded values are kept as secrets to redact from any error."""

    def __init__(self, raw: Mapping[str, str] | None) -> None:
        self.raw = dict(raw or {})
        self.secrets: list[str] = []

    def expand(self) -> dict[str, str]:
        """The headers to send now."""
        out: dict[str, str] = {}
        for name, value in self.raw.items():
            out[name] = _ENV.sub(self._env, value)
        return out

    def _env(self, match: re.Match[str]) -> str:
        found = os.environ.get(match[1])
        if found is None:
            logger.warning("a2a header: ${%s} is not set", match[1])
            return ""
        if found and found not in self.secrets:
            self.secrets.append(found)
        return found


def _endpoint(card: Mapping[str, Any], card_url: str) -> tuple[str, Version]:
    """The JSON-RPC endpoint and the protocol version a card offers.

    A 1.0 card lists ``supportedInterfaces`` (the first JSON-RPC one with a 1.x
    ``protocolVersion`` wins); otherwise the SPEC's rule: ``card.url``, else the card
    URL's origin, spoken in 0.3 unless the card says ``protocolVersion`` 1.x.
    """
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list):
        for entry in interfaces:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("url"), str):
                continue
            binding = str(entry.get("protocolBinding") or "JSONRPC").upper()
            if binding == "JSONRPC" and str(entry.get("protocolVersion", "")).startswith("1."):
                return entry["url"], "1.0"
    version: Version = "1.0" if str(card.get("protocolVersion", "")).startswith("1.") else "0.3"
    url = card.get("url")
    if isinstance(url, str) and url:
        return url, version
    if isinstance(interfaces, list):
        for entry in interfaces:
            if isinstance(entry, Mapping) and isinstance(entry.get("url"), str):
                return entry["url"], version
    parts = urlsplit(card_url)
    return f"{parts.scheme}://{parts.netloc}", version


def _skills(card: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(id or name, description)`` for each skill of the card."""
    skills = card.get("skills")
    if skills is None:
        return []
    if not isinstance(skills, list):
        raise A2AError("the card's skills is not a list")
    out: list[tuple[str, str]] = []
    for skill in skills:
        if not isinstance(skill, Mapping):
            raise A2AError("a skill of the card is not an object")
        ident = skill.get("id") or skill.get("name")
        if not isinstance(ident, str) or not ident:
            raise A2AError("a skill of the card has neither id nor name")
        description = skill.get("description")
        name = skill.get("name")
        out.append(
            (
                ident,
                description if isinstance(description, str) and description else str(name or ident),
            )
        )
    return out


class A2ASource:
    """The toolkit's remote agents: their clients, tools and statuses.

    One httpx2 client serves every agent (a connection pool per peer); it is closed
    with the toolkit.
    """

    def __init__(self) -> None:
        self._client: httpx2.AsyncClient | None = None
        self.status: dict[str, A2AStatus] = {}

    async def client(self) -> httpx2.AsyncClient:
        """The shared client (made on first use)."""
        if self._client is None:
            # httpx2 and our HTTP client on first use: importing the package does not load the
            # HTTP stack (issue 39: start-up of the commands an MCP client spawns).
            from .._http_client import new_client

            self._client = await new_client(connect_timeout=CONNECT_TIMEOUT)
        return self._client

    async def resolve_all(self, agents: Sequence[A2AAgent]) -> list[Tool]:
        """Every agent's tools, the cards read concurrently, in the agents' order."""
        found: list[list[Tool]] = [[] for _ in agents]

        async def one(i: int, ag: A2AAgent) -> None:
            found[i] = await self.resolve(ag)

        async with trio.open_nursery() as nursery:
            for i, ag in enumerate(agents):
                nursery.start_soon(one, i, ag)
        return [t for tools in found for t in tools]

    async def resolve(self, ag: A2AAgent) -> list[Tool]:
        """One agent's tools; a failure is logged and kept as its status (no tools)."""
        if not ag.enabled:
            self.status[ag.key] = A2AStatus("disabled")
            await trio.lowlevel.checkpoint()
            return []
        headers = Headers(ag.headers)
        try:
            with trio.fail_after(CARD_TIMEOUT):
                card = await self._card(ag, headers)
            endpoint, version = _endpoint(card, ag.card)
            name = card.get("name")
            if not isinstance(name, str) or not name:
                raise A2AError("the card has no name")
            skills = _skills(card)
        except Exception as exc:  # any failure of one agent: logged, no tools, never fatal
            import httpx2  # loaded already: the card was asked for on our client

            from .._http_client import error_text, redact

            if isinstance(exc, httpx2.HTTPError):
                text = error_text(exc)
            elif isinstance(exc, trio.TooSlowError):
                text = f"reading the card took over {CARD_TIMEOUT:g} s"
            else:
                text = str(exc) or type(exc).__name__
            why = redact(text, headers.secrets)
            logger.warning("A2A agent %s failed: %s", ag.key, why)
            self.status[ag.key] = A2AStatus("failed", error=why)
            return []
        remote = RemoteAgent(self, name, endpoint, version, headers, ag.timeout, ag.poll_every)
        tools = [
            Tool(
                name=f"{sanitize(name)}_{sanitize(ident)}",
                description=description,
                input_schema=TASK_SCHEMA,
                source=ToolSource.A2A,
                execute=_executor(remote),
            )
            for ident, description in skills
        ]
        self.status[ag.key] = A2AStatus("connected", tools=len(tools), name=name)
        return tools

    async def _card(self, ag: A2AAgent, headers: Headers) -> Mapping[str, Any]:
        client = await self.client()
        request = client.build_request("GET", ag.card, headers=headers.expand())
        response = await client.send(request, stream=True)
        body = await read_capped(response, CARD_MAX_BYTES)
        if not 200 <= response.status_code < 300:
            raise A2AError(
                f"GET card: HTTP {response.status_code}: {body[:200].decode(errors='replace')}"
            )
        try:
            card = json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
            raise A2AError(f"the agent card is not JSON: {exc}") from None
        if not isinstance(card, Mapping):
            raise A2AError("the agent card is not a JSON object")
        return card

    async def aclose(self) -> None:
        """Close the shared client (bounded, shielded). Idempotent."""
        client, self._client = self._client, None
        if client is not None:
            with trio.move_on_after(1.0, shield=True):
                await client.aclose()


def _executor(remote: RemoteAgent) -> Any:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await remote.run(str(args["task"]), ctx)

    return execute
