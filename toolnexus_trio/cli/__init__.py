"""Every ``python -m toolnexus_trio`` command: ``demo``, ``host``, ``gateway`` (and
``gateway --mcp``), ``ask``, ``serve``, ``run`` and ``tools``, the demo and the todo app
it drives, and the Ctrl-C policy they share (one goodbye line, exit code 130).

Nothing in the library imports this package; it sits on the top floor and uses the
families through their facades.
"""

from ._main import main as main

__all__ = ["main"]
