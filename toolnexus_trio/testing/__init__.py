"""Test helpers for users of toolnexus-trio: a real, scripted model server.

:class:`FakeProvider` is a small HTTP/1.1 server on loopback that speaks the wire
styles of :func:`toolnexus_trio.create_client` (OpenAI ``/chat/completions``,
Anthropic ``/messages``, the OpenAI Responses API ``/responses`` and Gemini
``/models/{model}:generateContent``, JSON and SSE), plays scripted answers and faults, and keeps
every request it received. Tests get a real socket and the real wire, not a mock::

    async with open_fake_provider([{"text": "hi"}]) as provider:
        async with create_client(ClientOptions(
            base_url=provider.base_url, style="openai", model="m", api_key="k",
        )) as client:
            result = await client.run("hello")
        assert provider.requests[0].json["model"] == "m"

As a process (for benchmarks): ``python -m toolnexus_trio.testing serve --port N
--script FILE.json [--cycle]`` prints its base URL on the first line of stdout.
"""

from ._script import ScriptedCall as ScriptedCall
from ._script import Step as Step
from ._script import load_script as load_script
from ._server import FakeProvider as FakeProvider
from ._server import ReceivedRequest as ReceivedRequest
from ._server import open_fake_provider as open_fake_provider

__all__ = [
    "FakeProvider",
    "ReceivedRequest",
    "ScriptedCall",
    "Step",
    "load_script",
    "open_fake_provider",
]
