"""Where threads and pending approvals are kept: the store protocols and the stores.

:class:`ConversationStore` keeps a thread's transcript; :class:`PendingStore` adds the
pending state that :meth:`~toolnexus_trio.Client.answer` continues, exactly once, in any
process. :class:`InMemoryConversationStore` is the default; :class:`SqliteConversationStore`
keeps everything in one SQLite file shared by processes;
:class:`PostgresConversationStore` (the ``[postgres]`` extra) in one PostgreSQL database
shared by many machines. Each of them is a :class:`CheckpointStore` too: crash-durable
runs (checkpoints and owner leases).
"""

from ._base import CheckpointStore as CheckpointStore
from ._base import ConversationStore as ConversationStore
from ._base import PendingState as PendingState
from ._base import PendingStore as PendingStore
from ._base import RunCheckpoint as RunCheckpoint
from ._memory import InMemoryConversationStore as InMemoryConversationStore
from ._postgres import PostgresConversationStore as PostgresConversationStore
from ._sqlite import SqliteConversationStore as SqliteConversationStore

__all__ = [
    "CheckpointStore",
    "ConversationStore",
    "InMemoryConversationStore",
    "PendingState",
    "PendingStore",
    "PostgresConversationStore",
    "RunCheckpoint",
    "SqliteConversationStore",
]
