"""Options of :func:`~toolnexus_trio.create_client` (SPEC §8)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
import httpx2

from .._http_client import safe_url
from ..loop._cost import Prices
from ..loop._output import OutputMode, OutputValidator
from ..loop._results import (
    GenerateError,
    HookFn,
    Hooks,
    InDoubtPolicy,
    OnMetric,
    WaitFor,
    timeout_alias,
)
from ..stores._base import ConversationStore
from ._http import OnError

Style = Literal["openai", "anthropic", "responses", "gemini"]
BodyTransform = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any] | None] | None]
"""Gets the assembled request body (after ``request_params``); returns the body to send,
or ``None`` to send the body it got (edited in place or not), as toolnexus 0.21 does."""


@attrs.frozen
class ClientOptions:
    """Options of :func:`~toolnexus_trio.create_client`: a model behind an HTTP endpoint.

    - ``base_url``, ``style`` (``"openai"`` posts to ``{base_url}/chat/completions``;
      ``"anthropic"`` to ``{base_url}/messages``, adding ``/v1`` when the URL does not
      end in it; ``"responses"`` (the OpenAI Responses API) to
      ``{base_url}/responses``; ``"gemini"`` to
      ``{base_url}/models/{model}:generateContent``, or
      ``:streamGenerateContent?alt=sse`` when streaming), ``model`` (sent verbatim on
      every call). Credentials in the URL
      (``http://user:password@host/v1``) are sent as basic auth, and the password
      never appears in a repr, an error message or a log line.
    - ``api_key``: when ``None``, read once from ``ANTHROPIC_API_KEY`` (anthropic style),
      ``GEMINI_API_KEY`` then ``GOOGLE_API_KEY`` (gemini style), or ``OPENAI_API_KEY``
      then ``OPENROUTER_API_KEY`` (openai and responses styles; an openrouter.ai
      URL prefers ``OPENROUTER_API_KEY``). No key at all sends no auth header (local
      servers). The key never appears in reprs or error messages.
    - ``headers``: extra request headers (they win over the defaults).
    - ``system_prompt``, ``max_turns``, ``hooks``, ``wait_for``, ``tool_timeout_ms``,
      ``run_timeout_ms`` (or ``timeout_ms``, toolnexus 0.21's name for it), ``on_metric``,
      ``store``: as for :class:`~toolnexus_trio.InProcessOptions`.
    - ``retries`` (default 2) and ``retry_base_ms`` (default 500): a failed call is
      retried on 429/500/502/503/504, on ``retryable_statuses`` and on network errors,
      after ``retry_base_ms * 2**attempt`` ms plus up to 100 ms of jitter, or after
      ``Retry-After`` seconds when the server sends that header in delay-seconds form.
    - ``max_retry_after`` (default 60.0): the longest ``Retry-After`` honoured, in
      seconds. A longer one fails the call at once with a
      :class:`~toolnexus_trio.GenerateError` giving the status and the server's delay
      (waiting would hold the run that long: ``2147483647`` is 68 years).
    - ``on_error(ErrorInfo) -> "retry" | "fail"`` (sync or async) classifies each
      failed attempt instead of that default; a ``"retry"`` is still bounded by
      ``retries``. Cancellation and deadlines are never retried nor classified.
    - ``request_params``: merged into every request body (its keys win);
      ``messages``, ``tools`` and ``stream`` are dropped from it with a warning.
    - ``body_transform(body) -> body | None`` (sync or async): the last word on the
      body; ``None`` sends the body it was given (edited in place or not).
    - ``max_part_bytes``: the most decoded bytes one content part may have (``None``:
      the process-wide :func:`~toolnexus_trio.set_max_part_bytes`, by default no cap).
      A part of the prompt over it fails the run before any request; a tool's part over
      it is sent as ``[unsupported <type> part (<mime>, <n> bytes)]`` (logged once).
    - ``on_unsupported_part``: ``"text"`` (default) sends a tool's part the style cannot
      take (audio to Anthropic) as that placeholder text; ``"error"`` raises
      :class:`~toolnexus_trio.UnsupportedPartError` (or the size's
      :class:`~toolnexus_trio.ContentPartError`) instead, as for the prompt's parts.
    - ``http_client``: an ``httpx2.AsyncClient`` you own (custom transport, proxy,
      mTLS); the client never closes it. Without it the client makes its own, closed
      by :meth:`Client.aclose <toolnexus_trio.Client.aclose>`.
    - ``max_connections`` (default ``None``: no cap): the most connections the client's
      own pool opens at once; a model call beyond it waits for a free one. Without a
      cap, every conversation sharing the client has its call in flight at once (a
      thousand conversations, a thousand connections). Not used with ``http_client``.
    - ``fallback``: other providers (``ClientOptions`` each; their ``base_url``,
      ``style``, ``model``, key, headers, retries and parameters are used, their loop
      options ignored), tried in order when a call fails for good. By default a call
      moves on after a connection error, a 5xx or a 429 (once its own retries are
      spent); ``fallback_on(GenerateError) -> bool`` decides instead. A streamed call
      that has already sent text never moves on. Each attempt is an ``attempt``
      metric event (``model``, ``base_url``, ``index``, ``status``: ``ok``, ``error``
      or ``cancelled``, ``ms``) and, when streaming, an ``attempt`` stream event.
    - ``hedge_after_ms``: with ``fallback``, start the next provider when the current
      one has not begun to answer (its status line) within this many ms; the first
      to answer wins and the others are cancelled, their connections closed.
    - ``prompt_cache``: Anthropic prompt caching: ``cache_control`` breakpoints on the
      system prompt, the tools and the conversation's stable prefix (the last message
      before the newest turn). Cache reads and writes show in ``RunResult.usage``
      (``cache_read_tokens``, ``cache_write_tokens``) and in the metrics.
    - ``prices``: ``{model: {"input", "output", "cache_read", "cache_write"}}`` per
      million tokens (cache prices default to the input price) giving
      ``RunResult.cost`` and a ``cost`` in the ``llm`` and ``run`` metric events;
      a model without a price makes the cost ``None``, never a guess.
    - ``output_type``, ``output_mode``, ``output_retries``, ``output_validators``: the
      defaults of :meth:`Client.run <toolnexus_trio.Client.run>`'s keywords of the same
      names (typed results).
    - ``durable``, ``lease_ms``, ``on_in_doubt``: crash-durable runs, as for
      :class:`~toolnexus_trio.InProcessOptions` (off by default).
    - ``tracer_provider`` / ``meter_provider``: OpenTelemetry providers for this
      client's spans and GenAI metrics instead of the global ones (see :doc:`tracing`);
      ``capture_content`` puts message content, tool arguments and results on the spans
      (also on with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).
    """

    base_url: str = attrs.field(repr=lambda url: repr(safe_url(url)))  # no password shown
    style: Style
    model: str
    api_key: str | None = attrs.field(default=None, repr=False)
    headers: Mapping[str, str] | None = None
    system_prompt: str | None = None
    max_turns: int = 10
    hooks: Hooks | Mapping[str, HookFn] | None = None
    retries: int = 2
    retry_base_ms: int = 500
    retryable_statuses: Sequence[int] | None = None
    max_retry_after: float = 60.0
    on_error: OnError | None = None
    run_timeout_ms: int = 0
    tool_timeout_ms: int = 0
    wait_for: WaitFor | None = None
    store: ConversationStore | None = None
    on_metric: OnMetric | None = None
    request_params: Mapping[str, Any] | None = None
    body_transform: BodyTransform | None = None
    http_client: httpx2.AsyncClient | None = attrs.field(default=None, repr=False)
    max_connections: int | None = None
    fallback: Sequence[ClientOptions] = ()
    fallback_on: Callable[[GenerateError], bool] | None = None
    hedge_after_ms: int | None = None
    prompt_cache: bool = False
    prices: Prices | None = None
    timeout_ms: int | None = None
    """toolnexus 0.21's name for ``run_timeout_ms`` (either may be given)."""
    output_type: Any = None
    output_mode: OutputMode = "tool"
    output_retries: int = 1
    output_validators: Sequence[OutputValidator] = ()
    max_part_bytes: int | None = None
    on_unsupported_part: Literal["error", "text"] = "text"
    durable: bool = False
    lease_ms: int = 30_000
    on_in_doubt: InDoubtPolicy | None = None
    tracer_provider: Any = None
    meter_provider: Any = None
    capture_content: bool = False

    def __attrs_post_init__(self) -> None:
        timeout_alias(self)
