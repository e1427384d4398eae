"""Real models over HTTP: the SPEC §8 client wire, OpenAI and Anthropic styles.

:func:`toolnexus_trio.create_client` builds a :class:`~toolnexus_trio.Client` whose
model turns come from here; the loop is the one the in-process client runs. One module
per wire style (``_openai``, ``_anthropic``), the shared POST with retries
(``_http``), an SSE decoder (``_sse``) and the turn source (``_source``). The client's
own httpx2 pool comes from the package's one HTTP client factory
(:mod:`toolnexus_trio._http_client`), on httpx2's own transport.
"""

from ._create import create_client as create_client
from ._http import ErrorInfo as ErrorInfo
from ._options import ClientOptions as ClientOptions

__all__ = ["ClientOptions", "ErrorInfo", "create_client"]
