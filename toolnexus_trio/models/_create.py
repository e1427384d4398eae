"""``create_client``: the one agent loop with a model over HTTP."""

from __future__ import annotations

from ..loop._client import Client
from ._fallback import FallbackTurns
from ._options import ClientOptions
from ._source import HttpTurns


def create_client(options: ClientOptions) -> Client:
    """A :class:`~toolnexus_trio.Client` whose model is an HTTP endpoint of one of the
    wire styles (OpenAI chat completions, Anthropic messages, the OpenAI Responses API,
    Gemini), with fallback providers when ``options.fallback`` names some.

    The same loop as :func:`~toolnexus_trio.create_in_process_client`: hooks, tools,
    suspension, metrics and results behave alike. ``RunResult.messages`` is
    OpenAI-shaped for both styles (the Anthropic wire gets it translated on every call),
    so a transcript can be passed back as ``history`` to either. Close the client
    (``async with`` or :meth:`Client.aclose`) to release its connections.
    """
    if not options.fallback:
        if options.hedge_after_ms is not None:
            raise ValueError("hedge_after_ms needs fallback providers to hedge with")
        return Client(options, HttpTurns(options))
    source = FallbackTurns(options)
    client = Client(options, source)
    source.observe = client.observe_metric
    return client
