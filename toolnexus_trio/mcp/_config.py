"""MCP client config (SPEC §2): parsing, names, allowlists, header expansion (pure data).

Accepted shapes: ``{"mcpServers": {...}}``, ``{"servers": {...}}``, ``{"mcp": {...}}``,
or the bare server map, in which the reserved sibling keys ``builtins``, ``agents``,
``a2a`` and ``mcpServer`` are not servers (:class:`McpConfig` keeps the ``builtins``,
``a2a`` and ``mcpServer`` blocks for the toolkit and ``serve``; ``agents`` is the A2A
source's). Every field is checked strictly (``"false"``
is not a boolean) and an error names the server and the field.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from .._names import sanitize as _sanitize
from .._names import sanitize_tool_name
from ._types import MCPServeConfig

logger = logging.getLogger("toolnexus_trio.mcp")

DEFAULT_TIMEOUT_MS: Final = 30_000
"""Each load phase's bound when a server sets no ``timeout`` (SPEC §2)."""

MAX_NAME: Final = 64
"""The longest tool name a provider takes (OpenAI's limit)."""

RESERVED_KEYS: Final = frozenset({"builtins", "agents", "a2a", "mcpServer"})
"""Sibling config sections that a bare server map never treats as servers."""

_WRAPPERS: Final = ("mcpServers", "servers", "mcp")
# A remote `type` naming a transport pins it; plain "remote" (or none) falls back.
_TRANSPORTS: Final[dict[str, Literal["auto", "streamable-http", "sse"]]] = {
    "remote": "auto",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "sse": "sse",
}
SERVER_KEYS: Final = frozenset(
    {"type", "command", "args", "url", "environment", "env", "cwd", "headers"}
    | {"enabled", "disabled", "timeout", "tools"}
)
"""The keys a server entry may have. Another key close to one of them (a typo such as
``comand``) is an error naming both; any other key (another client's own setting, such
as Cline's ``autoApprove``) is ignored with a warning naming it."""

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def sanitize(name: str) -> str:
    """``name`` with every character outside ``[a-zA-Z0-9_-]`` replaced by ``_``
    (SPEC §0.2), cut to 64 characters."""
    return _sanitize(name)[:MAX_NAME]


def mcp_tool_name(server: str, tool: str) -> str:
    """``sanitize(server) + "_" + sanitize(tool)``; a name past 64 characters keeps its
    first 55 and gets ``_`` plus 8 hex digits of its hash, so two long names stay apart
    (the library's one naming rule, :mod:`toolnexus_trio._names`)."""
    return sanitize_tool_name(f"{_sanitize(server)}_{_sanitize(tool)}")


def expand_env(value: str, environ: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${VAR}`` replaced from the environment (missing: empty)."""
    env = os.environ if environ is None else environ
    return _ENV_REF.sub(lambda m: env.get(m.group(1), ""), value)


def _secret_repr(value: object) -> str:
    # Headers and environments carry tokens: show the keys, never the values.
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: '***'" for k in value) + "}"
    return "***"


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One server of an MCP config.

    ``type`` is ``"local"`` (spawn ``command`` and talk over stdio) or ``"remote"``
    (HTTP at ``url``). ``transport`` is how a remote server is reached: ``"auto"``
    (streamable HTTP, falling back to the legacy HTTP+SSE transport when the server
    rejects the streamable ``initialize`` with an HTTP 4xx), ``"streamable-http"`` or
    ``"sse"`` only (config ``type`` ``"http"``/``"streamable-http"`` or ``"sse"``).
    ``timeout_ms`` bounds each load phase (connect,
    ``initialize``, ``tools/list``). ``tools`` filters the server's tools by their
    original names: empty means all, any ``True`` makes an allowlist, only ``False``
    a drop-list. Header and environment values never appear in a repr or a log.
    """

    name: str
    type: Literal["local", "remote"]
    command: tuple[str, ...] = ()
    url: str | None = None
    environment: Mapping[str, str] = attrs.field(factory=dict, repr=_secret_repr)
    cwd: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=_secret_repr)
    enabled: bool = True
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    tools: Mapping[str, bool] = attrs.field(factory=dict)
    transport: Literal["auto", "streamable-http", "sse"] = "auto"

    def expanded_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers with ``${ENV}`` references expanded (missing variables: empty)."""
        return {k: expand_env(v, environ) for k, v in self.headers.items()}


@attrs.frozen
class McpConfig:
    """A parsed MCP config: its servers, in file order, and the file's sibling blocks
    (toolnexus 0.21's config file): ``builtins`` (``true``/``false`` or an object, the
    builtins of a toolkit whose ``ToolkitOptions.builtins`` is unset), ``a2a`` (the
    ``A2AServeConfig`` fields :meth:`Toolkit.serve` uses when given no ``a2a=``) and
    ``mcpServer`` (``{name, version, tools}``: the ``serve`` profile when given no
    ``mcp=``)."""

    servers: tuple[McpServerConfig, ...] = ()
    builtins: bool | Mapping[str, Any] | None = None
    a2a: Mapping[str, Any] | None = None
    mcp_server: Mapping[str, Any] | None = None


McpConfigInput = str | os.PathLike[str] | Mapping[str, Any] | McpConfig
"""What :func:`parse_mcp_config` (and ``ToolkitOptions.mcp``) takes."""


def _fail(server: str, field: str, why: str) -> ValueError:
    return ValueError(f"MCP server {server!r}: {field} {why}")


def _opt_bool(raw: Mapping[str, Any], key: str, server: str) -> bool | None:
    value = raw.get(key)
    if value is None or value is True or value is False:
        return value
    raise _fail(server, key, f"must be true or false, got {value!r:.40}")


def _str_map(raw: object, server: str, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(server, field, "must be an object of strings")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise _fail(server, field, f"must map strings to strings (key {k!r:.40})")
        out[k] = v
    return out


def _command(raw: Mapping[str, Any], server: str) -> tuple[str, ...]:
    command = raw.get("command")
    args = raw.get("args")
    if isinstance(command, str):
        parts = [command]
    elif isinstance(command, list) and all(isinstance(c, str) for c in command):
        parts = list(command)
    else:
        raise _fail(server, "command", "must be a string or an array of strings")
    if args is not None:
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise _fail(server, "args", "must be an array of strings")
        parts += args
    if not parts or not parts[0]:
        raise _fail(server, "command", "is empty")
    return tuple(parts)


def _unknown_keys(raw: Mapping[Any, Any], server: str) -> None:
    for key in raw:
        if key in SERVER_KEYS:
            continue
        close = difflib.get_close_matches(str(key), SERVER_KEYS, n=1, cutoff=0.75)
        if close:  # a typo: its setting would be silently lost, or a wrong error given
            raise ValueError(
                f"MCP server {server!r}: unknown key {key!r:.60} (did you mean {close[0]!r}?)"
            )
        logger.warning("MCP server %r: unknown key %.60r ignored", server, key)


def _server(name: str, raw: object) -> McpServerConfig:
    if not isinstance(raw, Mapping):
        raise ValueError(f"MCP server {name!r}: must be an object")
    _unknown_keys(raw, name)
    kind = raw.get("type")
    if kind not in (None, "local", "remote", "stdio", "http", "streamable-http", "sse"):
        raise _fail(name, "type", f"must be 'local' or 'remote', got {kind!r:.40}")
    if kind is None:
        kind = "remote" if isinstance(raw.get("url"), str) else "local"
    remote = kind in ("remote", "http", "streamable-http", "sse")
    disabled, enabled = _opt_bool(raw, "disabled", name), _opt_bool(raw, "enabled", name)
    timeout = raw.get("timeout", DEFAULT_TIMEOUT_MS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < float("inf")
    ):
        raise _fail(name, "timeout", f"must be a positive number of ms, got {timeout!r:.40}")
    tools = raw.get("tools")
    if tools is not None and (
        not isinstance(tools, Mapping)
        or not all(isinstance(k, str) and isinstance(v, bool) for k, v in tools.items())
    ):
        raise _fail(name, "tools", "must map tool names to true or false")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _fail(name, "cwd", "must be a string")
    common: dict[str, Any] = {
        "name": name,
        "enabled": not (disabled is True or enabled is False),
        "timeout_ms": timeout,
        "tools": dict(tools or {}),
    }
    if remote:
        url = raw.get("url")
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
            raise _fail(name, "url", f"must be an http(s) URL, got {url!r:.60}")
        headers = _str_map(raw.get("headers"), name, "headers")
        transport = _TRANSPORTS[kind]
        return McpServerConfig(
            type="remote", url=url, headers=headers, transport=transport, **common
        )
    environment = raw.get("environment", raw.get("env"))
    return McpServerConfig(
        type="local",
        command=_command(raw, name),
        environment=_str_map(environment, name, "environment"),
        cwd=cwd,
        **common,
    )


def parse_mcp_config(source: McpConfigInput) -> McpConfig:
    """Parse an MCP config from a path (JSON file), a mapping, or pass an
    :class:`McpConfig` through. A malformed file or field raises :class:`ValueError`."""
    if isinstance(source, McpConfig):
        return source
    if isinstance(source, str | os.PathLike):
        try:
            data: Any = json.loads(Path(source).read_text("utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"MCP config {os.fspath(source)!r} is not valid JSON: {exc}") from None
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ValueError("an MCP config must be a JSON object")
    servers: object = None
    for key in _WRAPPERS:
        if key in data:
            servers = data[key]
            break
    else:
        servers = {k: v for k, v in data.items() if k not in RESERVED_KEYS}
    if not isinstance(servers, Mapping):
        raise ValueError("the MCP server map must be a JSON object")
    builtins = data.get("builtins")
    if builtins is not None and not isinstance(builtins, bool | Mapping):
        raise ValueError("the config's builtins must be true, false or an object")
    blocks = {key: data.get(key) for key in ("a2a", "mcpServer")}
    for key, block in blocks.items():
        if block is not None and not isinstance(block, Mapping):
            raise ValueError(f"the config's {key} block must be an object")
    return McpConfig(
        tuple(_server(str(name), raw) for name, raw in servers.items()),
        builtins=builtins,
        a2a=blocks["a2a"],
        mcp_server=blocks["mcpServer"],
    )


def serve_profile(block: Mapping[str, Any], **given: Any) -> MCPServeConfig:
    """The ``serve`` profile from a config's ``mcpServer`` block (``name``, ``version``,
    ``tools``); *given* values that are not ``None`` win over the block's."""
    values = {k: block.get(k) for k in ("name", "version", "tools")}
    values.update({k: v for k, v in given.items() if v is not None})
    unknown = sorted(set(block) - {"name", "version", "tools"})
    if unknown:
        raise ValueError(f"mcpServer: unknown key {unknown[0]!r} (name, version, tools)")
    tools = values["tools"]
    if tools is not None and not (
        isinstance(tools, list | tuple) and all(isinstance(t, str) for t in tools)
    ):
        raise ValueError("mcpServer.tools must be an array of tool names")
    name, version = values["name"] or "toolnexus", values["version"] or "0.1.0"
    if not isinstance(name, str) or not isinstance(version, str):
        raise ValueError("mcpServer.name and mcpServer.version must be strings")
    return MCPServeConfig(name=name, version=version, tools=tools)


def filter_tools(names: Sequence[str], selection: Mapping[str, bool], server: str) -> list[str]:
    """The names *selection* keeps (SPEC §2 Gap 7): empty keeps all, any ``True`` is an
    allowlist, only ``False`` a drop-list; a name the server does not have is ignored
    with a warning."""
    if not selection:
        return list(names)
    for unknown in sorted(set(selection) - set(names)):
        logger.warning("MCP server %r: tools filter names unknown tool %r", server, unknown)
    if any(selection.values()):
        return [n for n in names if selection.get(n) is True]
    return [n for n in names if selection.get(n) is not False]
