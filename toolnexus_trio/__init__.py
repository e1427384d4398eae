"""toolnexus-trio: Trio-native tool calling and agent loop, plus a Tesseron host SDK.

Every turn of the agent loop is a Trio nursery whose cancel scope is the turn's
:class:`CancelToken`; the tool calls of one model message run concurrently in it.
The Tesseron host SDK lives in :mod:`toolnexus_trio.tesseron`, the gateway that
turns a host's actions into tools in :mod:`toolnexus_trio.gateway`.
"""

import types as _types
import typing as _typing

import attrs as _attrs

from ._cancel import CancelToken as CancelToken
from ._content import ContentPart as ContentPart
from ._content import ContentPartError as ContentPartError
from ._content import UnsupportedPartError as UnsupportedPartError
from ._content import audio as audio
from ._content import describe_part as describe_part
from ._content import file as file
from ._content import get_max_part_bytes as get_max_part_bytes
from ._content import image as image
from ._content import load_part as load_part
from ._content import part as part
from ._content import set_max_part_bytes as set_max_part_bytes
from ._content import summarize as summarize
from ._content import text as text
from ._relay import relay_tool as relay_tool
from ._sampling import Sampler as Sampler
from ._sampling import SamplingLimits as SamplingLimits
from ._sampling import SamplingMessage as SamplingMessage
from ._sampling import SamplingRequest as SamplingRequest
from ._sampling import SamplingResult as SamplingResult
from ._schema import SchemaError as SchemaError
from ._schema import empty_schema as empty_schema
from ._toolkit import Toolkit as Toolkit
from ._toolkit import ToolkitOptions as ToolkitOptions
from ._toolkit import create_toolkit as create_toolkit
from ._toolkit import open_toolkit as open_toolkit
from ._tools import RetryTool as RetryTool
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolHints as ToolHints
from ._tools import ToolResult as ToolResult
from ._tools import ToolSource as ToolSource
from ._tools import define_tool as define_tool
from ._tools import pending as pending
from ._tools import pending_of as pending_of
from ._tools import tool as tool
from ._version import __version__ as __version__
from ._wire import Answer as Answer
from ._wire import Request as Request
from ._wire import answer_declined as answer_declined
from ._wire import answer_output as answer_output
from .builtins import BuiltinsConfig as BuiltinsConfig
from .skills import SkillDef as SkillDef
from .skills import SkillInfo as SkillInfo
from .skills import SkillInventory as SkillInventory
from .skills import SkillSkip as SkillSkip
from .skills import SkipReason as SkipReason
from .skills import list_skills as list_skills

__all__ = [
    "RUN_STATUSES",
    "Agent",
    "AgentDef",
    "AlreadyAnswered",
    "Answer",
    "Budget",
    "BuiltinsConfig",
    "CancelToken",
    "Client",
    "ClientOptions",
    "ContentPart",
    "ContentPartError",
    "Conversation",
    "ConversationStore",
    "ErrorInfo",
    "GenerateError",
    "GenerateRequest",
    "HookError",
    "Hooks",
    "InMemoryConversationStore",
    "InProcessOptions",
    "InProcessResponse",
    "InProcessToolCall",
    "PendingExpired",
    "PendingState",
    "PendingStore",
    "PostgresConversationStore",
    "ProviderError",
    "Request",
    "RetryOutput",
    "RetryTool",
    "RunError",
    "RunResult",
    "RunTimeout",
    "Sampler",
    "SamplingLimits",
    "SamplingMessage",
    "SamplingRequest",
    "SamplingResult",
    "SchemaError",
    "SkillDef",
    "SkillInfo",
    "SkillInventory",
    "SkillSkip",
    "SkipReason",
    "SqliteConversationStore",
    "SuspendedCall",
    "TaskResult",
    "Tool",
    "ToolCallRecord",
    "ToolContext",
    "ToolHints",
    "ToolResult",
    "ToolSource",
    "Toolkit",
    "ToolkitOptions",
    "TranslateResult",
    "TranslatedToolCall",
    "UnsupportedPartError",
    "agent",
    "answer_declined",
    "answer_output",
    "audio",
    "compactor",
    "create_client",
    "create_in_process_client",
    "create_toolkit",
    "define_tool",
    "describe_part",
    "empty_schema",
    "estimate_tokens",
    "file",
    "get_max_part_bytes",
    "http_tool",
    "image",
    "list_skills",
    "load_part",
    "open_agent_runtime",
    "open_toolkit",
    "part",
    "pending",
    "pending_of",
    "relay_tool",
    "sampler_from_client",
    "sampler_from_generate",
    "set_max_part_bytes",
    "summarize",
    "text",
    "tool",
]

if _typing.TYPE_CHECKING:
    from .agents import Agent as Agent
    from .agents import AgentDef as AgentDef
    from .agents import Budget as Budget
    from .agents import TaskResult as TaskResult
    from .agents import agent as agent
    from .agents import open_agent_runtime as open_agent_runtime
    from .http_tools import http_tool as http_tool
    from .loop import RUN_STATUSES as RUN_STATUSES
    from .loop import AlreadyAnswered as AlreadyAnswered
    from .loop import Client as Client
    from .loop import Conversation as Conversation
    from .loop import GenerateError as GenerateError
    from .loop import GenerateRequest as GenerateRequest
    from .loop import HookError as HookError
    from .loop import Hooks as Hooks
    from .loop import InProcessOptions as InProcessOptions
    from .loop import InProcessResponse as InProcessResponse
    from .loop import InProcessToolCall as InProcessToolCall
    from .loop import PendingExpired as PendingExpired
    from .loop import ProviderError as ProviderError
    from .loop import RetryOutput as RetryOutput
    from .loop import RunError as RunError
    from .loop import RunResult as RunResult
    from .loop import RunTimeout as RunTimeout
    from .loop import SuspendedCall as SuspendedCall
    from .loop import ToolCallRecord as ToolCallRecord
    from .loop import TranslatedToolCall as TranslatedToolCall
    from .loop import TranslateResult as TranslateResult
    from .loop import compactor as compactor
    from .loop import create_in_process_client as create_in_process_client
    from .loop import estimate_tokens as estimate_tokens
    from .loop import sampler_from_client as sampler_from_client
    from .loop import sampler_from_generate as sampler_from_generate
    from .models import ClientOptions as ClientOptions
    from .models import ErrorInfo as ErrorInfo
    from .models import create_client as create_client
    from .stores import ConversationStore as ConversationStore
    from .stores import InMemoryConversationStore as InMemoryConversationStore
    from .stores import PendingState as PendingState
    from .stores import PendingStore as PendingStore
    from .stores import PostgresConversationStore as PostgresConversationStore
    from .stores import SqliteConversationStore as SqliteConversationStore

_AGENT_NAMES = frozenset(
    ("Agent", "AgentDef", "Budget", "TaskResult", "agent", "open_agent_runtime")
)
"""Names whose family is imported on first use: a process that only runs a loop never
needs the sub-agent runtime (a quarter of the package's own import time)."""

_HTTP_NAMES = frozenset(("ClientOptions", "ErrorInfo", "create_client", "http_tool"))
"""Names imported on first use with the HTTP stack (httpx2, httpcore2, h11, h2): a
process that serves tools (``serve --stdio``, ``gateway --mcp``, which an MCP client
spawns per session) or runs an in-process model never loads it (issue 39)."""


_LOOP_NAMES = frozenset(
    (
        "RUN_STATUSES",
        "AlreadyAnswered",
        "Client",
        "Conversation",
        "GenerateError",
        "GenerateRequest",
        "HookError",
        "Hooks",
        "InProcessOptions",
        "InProcessResponse",
        "InProcessToolCall",
        "PendingExpired",
        "ProviderError",
        "RetryOutput",
        "RunError",
        "RunResult",
        "RunTimeout",
        "SuspendedCall",
        "ToolCallRecord",
        "TranslatedToolCall",
        "TranslateResult",
        "compactor",
        "create_in_process_client",
        "estimate_tokens",
        "sampler_from_client",
        "sampler_from_generate",
    )
)
"""The agent loop's names, imported on first use: a process that only serves tools
(``serve --stdio``, ``gateway --mcp``) never loads the loop (issue 39)."""

_STORE_NAMES = frozenset(
    (
        "ConversationStore",
        "InMemoryConversationStore",
        "PendingState",
        "PendingStore",
        "PostgresConversationStore",
        "SqliteConversationStore",
    )
)
"""The conversation and pending stores' names (sqlite3 among them), on first use."""

_LAZY_PREFIXES = ("toolnexus_trio.models._", "toolnexus_trio.loop._", "toolnexus_trio.stores._")


def __getattr__(name: str) -> object:
    # Plain imports, so that the import graph tests/test_layout.py reads sees them.
    module: _types.ModuleType
    if name in _HTTP_NAMES:
        from . import http_tools, models

        module = http_tools if name == "http_tool" else models
    elif name in _LOOP_NAMES:
        from . import loop

        module = loop
    elif name in _STORE_NAMES:
        from . import stores

        module = stores
    elif name in _AGENT_NAMES:
        from . import agents

        module = agents
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    if isinstance(value, type) and _attrs.has(value):
        _attrs.resolve_types(value)  # as the loop below does for the eager names
    if getattr(value, "__module__", "").startswith(_LAZY_PREFIXES):
        value.__module__ = __name__  # as the loop below does for the eager names
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_AGENT_NAMES, *_HTTP_NAMES, *_LOOP_NAMES, *_STORE_NAMES})


# Tracebacks and docs show the public module, as trio does. Annotations are resolved
# first, while the defining module is still known (cattrs reads them later).
for _name in __all__:
    if (
        _name in _AGENT_NAMES
        or _name in _HTTP_NAMES
        or _name in _LOOP_NAMES
        or _name in _STORE_NAMES
    ):
        continue  # resolved when first used (__getattr__); their modules stay theirs
    _obj = globals()[_name]
    if isinstance(_obj, type) and _attrs.has(_obj):
        _attrs.resolve_types(_obj)
    if getattr(_obj, "__module__", "").startswith(
        (
            "toolnexus_trio._",
            "toolnexus_trio.loop._",
            "toolnexus_trio.stores._",
            "toolnexus_trio.models._",
            "toolnexus_trio.skills._",
        )
    ):
        _obj.__module__ = __name__
del _name, _obj
