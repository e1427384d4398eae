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
from ._http import DEFAULT_RETRYABLE_STATUSES as DEFAULT_RETRYABLE_STATUSES
from ._http import MAX_ERROR_BODY as MAX_ERROR_BODY
from ._http import ErrorInfo as ErrorInfo
from ._http import capped_error_body as capped_error_body
from ._http import safe_error_body as safe_error_body
from ._options import ClientOptions as ClientOptions

__all__ = [
    "DEFAULT_RETRYABLE_STATUSES",
    "MAX_ERROR_BODY",
    "ClientOptions",
    "ErrorInfo",
    "capped_error_body",
    "create_client",
    "safe_error_body",
]
