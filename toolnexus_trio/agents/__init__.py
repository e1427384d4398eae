"""Agents (SPEC §7D, §7E): the agent runtime and personas.

§7E personas: :func:`compose_soul`, :func:`memory_tool`, :data:`BOOTSTRAP_ORDER`,
:data:`HEARTBEAT_OK`.
"""

from ._memory import memory_tool as memory_tool
from ._soul import BOOTSTRAP_ORDER as BOOTSTRAP_ORDER
from ._soul import HEARTBEAT_OK as HEARTBEAT_OK
from ._soul import compose_soul as compose_soul

__all__ = [
    "BOOTSTRAP_ORDER",
    "HEARTBEAT_OK",
    "compose_soul",
    "memory_tool",
]
