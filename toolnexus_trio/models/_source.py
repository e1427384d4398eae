"""The HTTP :class:`~toolnexus_trio.loop._turns.TurnSource`: one model turn over a wire style.

A turn builds the style's body, applies ``request_params`` then ``body_transform``,
posts it with retries (:mod:`._http`) and parses the answer. When the loop streams,
the SSE body is read and parsed in the run's own task: each text delta is awaited into
the consumer's channel before the next bytes are read, so a slow consumer slows the
socket (TCP backpressure) and nothing is queued or dropped.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Mapping
from types import ModuleType
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2
import trio

from .. import _tracing
from .._http_client import body_chunks, close_response, redact, safe_url, split_credentials
from .._toolkit import Toolkit
from ..loop._output import TOOL_ARGS_DELTA
from ..loop._results import GenerateError, GenerateRequest, TranslatedToolCall, TranslateResult
from ..loop._turns import (
    Emit,
    TranslateCall,
    Turn,
    encode_arguments,
    finish_reason_for,
    reasoning_delta,
)
from . import _anthropic, _gemini, _openai, _responses
from ._http import MAX_RESPONSE_BYTES, Poster, read_bounded
from ._options import ClientOptions
from ._shape import Parsed, decode_json
from ._sse import SSEDecoder

logger = logging.getLogger("toolnexus_trio")

_FORBIDDEN_PARAMS = ("messages", "tools", "stream", "input", "contents")
_WIRES: dict[str, ModuleType] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "responses": _responses,
    "gemini": _gemini,
}
_PIECE = 64 * 1024
"""The most bytes handed to the SSE decoder at once."""
END_GRACE = 0.5
"""After a stream's terminal event, how long the rest of the body (normally just its
end, sent with that event or right after it) is waited for before the response is
closed. Read to its end, the connection goes back to the pool; a server that keeps the
body open only costs the turn this long, and its connection."""
_END_BYTES = 64 * 1024
"""After the terminal event, the most bytes read while waiting for the body's end."""


def api_key_for(options: ClientOptions) -> str | None:
    """The explicit key, else the style's environment variable (SPEC §8)."""
    if options.api_key is not None:
        return options.api_key
    if options.style == "anthropic":
        names = ["ANTHROPIC_API_KEY"]
    elif options.style == "gemini":
        names = ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
    elif "openrouter.ai" in (urlsplit(options.base_url).hostname or ""):
        names = ["OPENROUTER_API_KEY", "OPENAI_API_KEY"]
    else:
        names = ["OPENAI_API_KEY", "OPENROUTER_API_KEY"]
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _clean_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    cleaned = dict(params or {})
    for key in _FORBIDDEN_PARAMS:
        if key in cleaned:
            del cleaned[key]
            logger.warning("toolnexus_trio: request_params may not set %r; it was dropped", key)
    return cleaned


async def _finish_body(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows a stream's terminal event, briefly: its end, normally.

    Bounded by :data:`END_GRACE` and :data:`_END_BYTES`, and whatever happens (a
    server that keeps the body open, sends more, or breaks it) the answer already
    had is the result: the caller closes the response, dropping its connection
    unless the body did end.
    """
    extra = 0
    with trio.move_on_after(END_GRACE):
        try:
            async for chunk in chunks:
                extra += len(chunk)
                if extra > _END_BYTES:
                    return
        except httpx2.HTTPError:
            return  # the answer is complete; only its connection is lost


# gen_ai.provider.name's well-known values, by wire style.
_PROVIDER_NAMES: Final = {
    "openai": "openai",
    "responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
}


class HttpTurns:
    """Model turns over HTTP in one wire style (one per :class:`Client`)."""

    def __init__(self, options: ClientOptions) -> None:
        if options.style not in _WIRES:
            raise ValueError(
                f"style must be one of {', '.join(map(repr, _WIRES))}, not {options.style!r}"
            )
        scheme = urlsplit(options.base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL, not {safe_url(options.base_url)!r}")
        if options.retries < 0 or options.retry_base_ms < 0:
            raise ValueError("retries and retry_base_ms must not be negative")
        limit = options.max_retry_after
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int | float)
            or not 0 <= limit < math.inf
        ):
            raise ValueError(
                f"max_retry_after must be a finite number of seconds >= 0, "
                f"not {options.max_retry_after!r}"
            )
        cap = options.max_connections
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"max_connections must be None or an int >= 1, not {cap!r}")
        self.wire: ModuleType = _WIRES[options.style]
        self.model = options.model
        # Credentials in the URL go as basic auth, and never into a message or a log.
        self._per_model = options.style == "gemini"  # the model is part of the URL
        base = options.base_url if self._per_model else self.wire.endpoint(options.base_url)
        self.url, credentials = split_credentials(base)
        self._base = self.url.rstrip("/")
        self._urls: dict[tuple[str, bool], str] = {}
        self.secret = api_key_for(options)
        self.headers = {
            "content-type": "application/json",
            **self.wire.auth_headers(self.secret),
            **{k.lower(): v for k, v in (options.headers or {}).items()},
        }
        # The chat spans' provider and server (OpenTelemetry GenAI conventions).
        where = urlsplit(self.url)
        self.trace_attributes = {
            "gen_ai.provider.name": _PROVIDER_NAMES[options.style],
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
        }
        self.params = _clean_params(options.request_params)
        # Only the Anthropic wire needs breakpoints; the others cache on their own.
        cached = options.prompt_cache and options.style == "anthropic"
        self._body_options: dict[str, Any] = {"prompt_cache": True} if cached else {}
        self.transform = options.body_transform
        if options.on_unsupported_part not in ("error", "text"):
            given = options.on_unsupported_part
            raise ValueError(f"on_unsupported_part must be 'error' or 'text', not {given!r}")
        self.on_unsupported_part = options.on_unsupported_part
        self.max_part_bytes = options.max_part_bytes
        self.poster = Poster(
            http_client=options.http_client,
            retries=options.retries,
            retry_base_ms=options.retry_base_ms,
            retryable_statuses=options.retryable_statuses,
            on_error=options.on_error,
            secret=self.secret,
            credentials=credentials,
            max_retry_after=options.max_retry_after,
            max_connections=options.max_connections,
        )

    def tools_for(self, toolkit: Toolkit | None) -> list[dict[str, Any]]:
        """``to_openai()`` or ``to_anthropic()``, by style."""
        tools: list[dict[str, Any]] = self.wire.tools_for(toolkit)
        return tools

    async def turn(
        self,
        request: GenerateRequest,
        emit: Emit | None,
        on_head: Callable[[], None] | None = None,
    ) -> Turn:
        """One model call; streamed (SSE) when *emit* is set.

        *on_head* (hedging) is called once the provider's answer has begun: its 2xx
        status line is in, before its body is read.
        """
        stream = emit is not None
        body = self.wire.body(
            request.model,
            request.messages,
            request.tools or (),
            max_tokens=request.max_tokens,
            stream=stream,
            tool_parts=request.parts,
            on_unsupported_part=self.on_unsupported_part,
            max_part_bytes=self.max_part_bytes,
            **self._body_options,
        )
        if request.response_format is not None:
            # Native typed output: the style's own JSON-schema answer format, merged one
            # level deep (Gemini's goes inside a generationConfig the body may have).
            for key, value in self.wire.response_format(request.response_format).items():
                if isinstance(value, dict) and isinstance(body.get(key), dict):
                    body[key] = {**body[key], **value}
                else:
                    body[key] = value
        content = await self._encode(body)
        # The wire body (the transcript in the wire's shapes) is not held while the
        # answer streams: only its encoded bytes are sent.
        del body
        url = self._url(request.model, stream)
        if emit is None:
            parsed = await self._call(content, url, on_head)
            return Turn(parsed.response, parsed.usage, parsed.raw, extra=parsed.extra)
        parsed = await self._stream(content, request.model, emit, url, on_head)
        return Turn(parsed.response, parsed.usage, parsed.raw, streamed=True, extra=parsed.extra)

    async def translate(self, call: TranslateCall) -> TranslateResult:
        """§11: one non-streamed call, read back into OpenAI shapes."""
        url = self._url(call.model, False)
        parsed = await self._call(await self._encode(self.wire.translate_body(call)), url)
        calls = tuple(
            TranslatedToolCall(tc.id or f"call_{i}", tc.name, encode_arguments(tc.arguments))
            for i, tc in enumerate(parsed.response.tool_calls)
        )
        return TranslateResult(
            text=parsed.response.content,
            tool_calls=calls,
            finish_reason=finish_reason_for(bool(calls), parsed.finish_reason),
            usage=parsed.usage,
            model=call.model,
            raw=parsed.raw,
        )

    async def aclose(self) -> None:
        """Close the connection pool if this client made it."""
        await self.poster.aclose()

    # -- internals ----------------------------------------------------------

    def _url(self, model: str, stream: bool) -> str:
        if not self._per_model:
            return self.url
        key = (model, stream)
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) > 64:  # models come from hooks: keep the cache small
                self._urls.clear()
            url = self._urls[key] = self.wire.endpoint(self._base, model, stream)
        return url

    async def _encode(self, body: dict[str, Any]) -> bytes:
        body.update(self.params)
        if self.transform is not None:
            key = getattr(self.wire, "TRANSCRIPT_KEY", "messages")
            if isinstance(body.get(key), list):
                # The transform may edit the list in place; the run's transcript is not its.
                body[key] = list(body[key])
            try:
                out: Any = self.transform(body)  # a user function: checked below
                if inspect.isawaitable(out):
                    out = await out
            except Exception as exc:
                raise GenerateError(f"body_transform raised {type(exc).__name__}: {exc}") from exc
            if out is not None:  # None: the body as it is (edited in place or not)
                if not isinstance(out, dict):
                    kind = type(out).__name__
                    raise GenerateError(f"body_transform returned {kind}, not a dict or None")
                body = out
        try:
            return json.dumps(body, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise GenerateError(f"the request body is not JSON: {exc}") from exc

    async def _call(
        self, content: bytes, url: str, on_head: Callable[[], None] | None = None
    ) -> Parsed:
        try:
            if on_head is None:
                _, raw = await self.poster.post(
                    url, _tracing.with_trace(self.headers), content, stream=False
                )
            else:
                # Hedged: the answer has begun at its status line, before its body.
                response, _ = await self.poster.post(
                    url, _tracing.with_trace(self.headers), content, stream=True
                )
                on_head()
                try:
                    raw = await read_bounded(response)
                except httpx2.HTTPError as exc:
                    raise GenerateError(f"the model's answer broke: {self._detail(exc)}") from exc
                finally:
                    await close_response(response)
        except GenerateError:
            raise
        except Exception as exc:  # e.g. a closed pool: still this model call's failure
            raise self._failure(exc) from exc
        assert raw is not None
        parsed: Parsed = self.wire.parse(decode_json(raw, "the model's answer"))
        return parsed

    async def _stream(
        self,
        content: bytes,
        model: str,
        emit: Emit,
        url: str,
        on_head: Callable[[], None] | None = None,
    ) -> Parsed:
        try:
            response, _ = await self.poster.post(
                url, _tracing.with_trace(self.headers), content, stream=True
            )
        except GenerateError:
            raise
        except Exception as exc:
            raise self._failure(exc) from exc
        if on_head is not None:
            on_head()
        if response.headers.get("content-type", "").startswith("application/json"):
            # A server that ignores "stream": the whole answer at once, one delta.
            try:
                body = await read_bounded(response)
            except httpx2.HTTPError as exc:
                raise GenerateError(f"the model's answer broke: {self._detail(exc)}") from exc
            finally:
                await close_response(response)
            whole: Parsed = self.wire.parse(decode_json(body, "the model's answer"))
            if whole.response.content:
                await emit({"type": "text", "delta": whole.response.content})
            return whole
        assembler = self.wire.StreamAssembler(model)
        decoder = SSEDecoder()
        received = 0
        try:
            async with body_chunks(response) as chunks:
                async for chunk in chunks:
                    received += len(chunk)
                    if received > MAX_RESPONSE_BYTES:
                        raise GenerateError(
                            f"the model's stream is over {MAX_RESPONSE_BYTES} bytes"
                        )
                    # In pieces, so that the events of one (decoded) chunk are never
                    # all held at once, however large the chunk.
                    for start in range(0, len(chunk), _PIECE):
                        piece = chunk if len(chunk) <= _PIECE else chunk[start : start + _PIECE]
                        for event in decoder.feed(piece):
                            delta = assembler.feed(event)
                            if delta:
                                await emit({"type": "text", "delta": delta})
                            fragments = getattr(assembler, "fragments", None)
                            while fragments:
                                index, call_id, name, part = fragments.pop(0)
                                await emit(
                                    {"type": TOOL_ARGS_DELTA, "index": index, "id": call_id,
                                     "name": name, "delta": part}
                                )  # fmt: skip
                            thoughts = getattr(assembler, "thoughts", None)
                            while thoughts:
                                await emit(reasoning_delta(thoughts.pop(0)))
                            if assembler.done:
                                break
                        if assembler.done:
                            break
                    if assembler.done:
                        # The answer is whole at its terminal event ([DONE],
                        # message_stop), whatever the server does with the body next.
                        await _finish_body(chunks)
                        break
        except httpx2.HTTPError as exc:
            # Not retried: deltas may already have reached the consumer.
            raise GenerateError(f"the model's stream broke: {self._detail(exc)}") from exc
        finally:
            await close_response(response)
        parsed: Parsed = assembler.result()
        return parsed

    def _detail(self, exc: Exception) -> str:
        # Every secret the poster hides: the key, and a URL's password and basic token.
        return f"{type(exc).__name__}: {redact(str(exc), self.poster.hidden)}"

    def _failure(self, exc: Exception) -> GenerateError:
        return GenerateError(f"POST {self.url} failed: {self._detail(exc)}")
