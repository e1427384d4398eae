"""Real models over HTTP: the SPEC §8 client wire (OpenAI and Anthropic styles) and
issue 38's (the OpenAI Responses API and Gemini).

:func:`toolnexus_trio.create_client` builds a :class:`~toolnexus_trio.Client` whose
model turns come from here; the loop is the one the in-process client runs. One module
per wire style (``_openai``, ``_anthropic``, ``_responses``, ``_gemini``), the shared
POST with retries (``_http``), an SSE decoder (``_sse``), the turn source
(``_source``) and fallback and hedged requests over several sources (``_fallback``). The client's
own httpx2 pool comes from the package's one HTTP client factory
(:mod:`toolnexus_trio._http_client`), on httpx2's own transport.
"""

from ._create import create_client as create_client
from ._http import ErrorInfo as ErrorInfo
from ._options import ClientOptions as ClientOptions

__all__ = ["ClientOptions", "ErrorInfo", "create_client"]
