"""``create_client``: the one agent loop with a model over HTTP."""

from __future__ import annotations

from ..loop._client import Client
from ._options import ClientOptions
from ._source import HttpTurns


def create_client(options: ClientOptions) -> Client:
    """A :class:`~toolnexus_trio.Client` whose model is an OpenAI- or Anthropic-style
    HTTP endpoint.

    The same loop as :func:`~toolnexus_trio.create_in_process_client`: hooks, tools,
    suspension, metrics and results behave alike. ``RunResult.messages`` is
    OpenAI-shaped for both styles (the Anthropic wire gets it translated on every call),
    so a transcript can be passed back as ``history`` to either. Close the client
    (``async with`` or :meth:`Client.aclose`) to release its connections.
    """
    return Client(options, HttpTurns(options))
