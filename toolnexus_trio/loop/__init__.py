"""The agent loop (SPEC §8): the client, its options, results and errors, conversations
and durable answers.

One loop serves both client kinds: :func:`create_in_process_client` (a Python function
is the model) and :func:`~toolnexus_trio.create_client` (a real model over HTTP, built in
:mod:`toolnexus_trio.models`, the floor above this one: the loop never imports it).
Every turn is a Trio nursery whose cancel scope is the turn's
:class:`~toolnexus_trio.CancelToken`; one model message's tool calls run concurrently in it.

The modules, bottom up: ``_output`` (typed results), ``_results`` (options, results,
errors) and ``_runjson`` (their JSON form), ``_turns`` (the seam a model plugs into),
``_toolcalls`` (one turn's calls), ``_metrics``, ``_compaction`` (the §7F compactor
hook), ``_events`` (typed run events), ``_conversation`` (``ask`` and
:class:`Conversation`), ``_durable``
(``Client.answer``), ``_checkpoint`` (crash-durable runs) and ``_client`` (the loop
itself).
"""

from ._checkpoint import LeaseLost as LeaseLost
from ._checkpoint import RunNotRecoverable as RunNotRecoverable
from ._checkpoint import in_doubt_default as in_doubt_default
from ._client import Client as Client
from ._client import create_in_process_client as create_in_process_client
from ._compaction import compactor as compactor
from ._compaction import estimate_tokens as estimate_tokens
from ._conversation import Conversation as Conversation
from ._durable import AlreadyAnswered as AlreadyAnswered
from ._durable import PendingExpired as PendingExpired
from ._events import AgentFinished as AgentFinished
from ._events import AgentSpawned as AgentSpawned
from ._events import AgentStateChanged as AgentStateChanged
from ._events import ApprovalAnswered as ApprovalAnswered
from ._events import ApprovalRequested as ApprovalRequested
from ._events import ReasoningDelta as ReasoningDelta
from ._events import RunEvent as RunEvent
from ._events import RunFailed as RunFailed
from ._events import RunFinished as RunFinished
from ._events import RunStarted as RunStarted
from ._events import TextDelta as TextDelta
from ._events import ToolCallArgs as ToolCallArgs
from ._events import ToolCallFinished as ToolCallFinished
from ._events import ToolCallStarted as ToolCallStarted
from ._events import TurnFinished as TurnFinished
from ._events import TurnStarted as TurnStarted
from ._events import Usage as Usage
from ._events import answer_events as answer_events
from ._events import stream_events as stream_events
from ._output import RetryOutput as RetryOutput
from ._records import RUN_STATUSES as RUN_STATUSES
from ._records import InDoubtCall as InDoubtCall
from ._records import SuspendedCall as SuspendedCall
from ._records import ToolCallRecord as ToolCallRecord
from ._results import GenerateError as GenerateError
from ._results import GenerateRequest as GenerateRequest
from ._results import HookError as HookError
from ._results import Hooks as Hooks
from ._results import InProcessOptions as InProcessOptions
from ._results import InProcessResponse as InProcessResponse
from ._results import InProcessToolCall as InProcessToolCall
from ._results import ProviderError as ProviderError
from ._results import RunError as RunError
from ._results import RunResult as RunResult
from ._results import RunTimeout as RunTimeout
from ._results import TranslatedToolCall as TranslatedToolCall
from ._results import TranslateResult as TranslateResult
from ._sampler import sampler_from_client as sampler_from_client
from ._sampler import sampler_from_generate as sampler_from_generate

__all__ = [
    "RUN_STATUSES",
    "AgentFinished",
    "AgentSpawned",
    "AgentStateChanged",
    "AlreadyAnswered",
    "ApprovalAnswered",
    "ApprovalRequested",
    "Client",
    "Conversation",
    "GenerateError",
    "GenerateRequest",
    "HookError",
    "Hooks",
    "InDoubtCall",
    "InProcessOptions",
    "InProcessResponse",
    "InProcessToolCall",
    "LeaseLost",
    "PendingExpired",
    "ProviderError",
    "ReasoningDelta",
    "RetryOutput",
    "RunError",
    "RunEvent",
    "RunFailed",
    "RunFinished",
    "RunNotRecoverable",
    "RunResult",
    "RunStarted",
    "RunTimeout",
    "SuspendedCall",
    "TextDelta",
    "ToolCallArgs",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "TranslateResult",
    "TranslatedToolCall",
    "TurnFinished",
    "TurnStarted",
    "Usage",
    "answer_events",
    "compactor",
    "create_in_process_client",
    "estimate_tokens",
    "in_doubt_default",
    "sampler_from_client",
    "sampler_from_generate",
    "stream_events",
]
