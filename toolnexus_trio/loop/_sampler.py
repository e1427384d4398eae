"""Samplers for MCP servers' sampling requests, built from a client or a ``generate``.

A :data:`~toolnexus_trio.Sampler` answers an MCP server's ``sampling/createMessage``
(``ToolkitOptions(sample=...)``). These make one from what a host already has: a
:class:`~toolnexus_trio.Client` (its model, its retries; the call runs in the
requesting tool call's task, so cancelling the call cancels it) or an in-process
``generate``. One model call, no tools; the request's system prompt opens the
transcript and its ``max_tokens`` (already capped by the toolkit) is passed on.
"""

from __future__ import annotations

from typing import Any

from .._sampling import Sampler, SamplingRequest, SamplingResult
from ._client import Client, create_in_process_client
from ._results import Generate, GenerateRequest, InProcessOptions


def sampling_messages(request: SamplingRequest) -> list[dict[str, Any]]:
    """The OpenAI-shaped transcript of *request*: its system prompt, then its messages."""
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    messages += [{"role": m.role, "content": m.text} for m in request.messages]
    return messages


def sampler_from_client(client: Client, *, model: str | None = None) -> Sampler:
    """A sampler that asks *client*'s model (or *model* on it): one call, no tools.

    The call is the client's own (its retries, its ``llm`` metric in
    ``client.metrics()``), made in the task of the tool call the request belongs to:
    cancelling that call cancels the model request. The answer carries the model's
    completion tokens.
    """

    async def sample(request: SamplingRequest) -> SamplingResult:
        call = GenerateRequest(
            model=model or client.options.model,
            messages=sampling_messages(request),
            tools=None,
            turn=0,
            max_tokens=request.max_tokens,
        )
        produced = await client._call_model(call)
        return SamplingResult(
            produced.response.content,
            model=call.model,
            tokens=produced.usage.get("completion_tokens"),
        )

    return sample


def sampler_from_generate(generate: Generate, *, model: str = "in-process") -> Sampler:
    """A sampler over an in-process ``generate`` (as :class:`InProcessOptions` takes it:
    async or plain, returning an ``InProcessResponse`` or a dict); *model* names it."""
    return sampler_from_client(create_in_process_client(InProcessOptions(model, generate)))
