"""Real models over HTTP: the SPEC §8 client wire, OpenAI and Anthropic styles.

:func:`toolnexus_trio.create_client` builds a :class:`~toolnexus_trio.Client` whose
model turns come from here; the loop is the one the in-process client runs. One module
per wire style (``_openai``, ``_anthropic``), the shared POST with retries
(``_http``), an SSE decoder (``_sse``), the turn source (``_source``), and the HTTP/1.1
transport the client's own httpx2 pool runs on (``_transport``; framing in ``_h1``,
connection I/O and streamed bodies in ``_h1io``).
"""

from ._http import ErrorInfo as ErrorInfo
from ._options import ClientOptions as ClientOptions

__all__ = ["ClientOptions", "ErrorInfo"]
