"""What ``ask`` lets a model do unasked: see :mod:`toolnexus_trio.builtins._guard` (it
lives with the builtins so that the ACP agent, below the commands, uses it too)."""

from ..builtins._guard import CONFIRMED as CONFIRMED
from ..builtins._guard import approval_request as approval_request
from ..builtins._guard import ask_tools as ask_tools
from ..builtins._guard import confirm_first as confirm_first

__all__ = ["CONFIRMED", "approval_request", "ask_tools", "confirm_first"]
