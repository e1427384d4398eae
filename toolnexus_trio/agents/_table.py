"""The handle table: the runtime's tree of handles, by id, and what a closed one leaves.

One object that the runtime (spawn, close, the verbs' walks), the snapshot (what a resume
needs) and the durable tree share. It keeps a long-lived runtime flat: live children are
counted, never walked; a closed handle stays (viewable, waitable) only until
:data:`CLOSED_KEPT` more recent ones have closed, unless a halted run of its parent may
still reattach to it; and every walk is iterative, so a tree deeper than Python's stack
(a model that keeps delegating to its own agent) is walked without a ``RecursionError``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Final

from ._types import Handle

CLOSED_KEPT: Final = 256
"""How many closed handles stay in the table (for ``list``, ``handle`` and ``inspect``)
once nothing needs them; older ones are forgotten, so a long-lived runtime stays flat.
A closed child its parent's halted run may reattach to is kept until that run ends."""


def pinned(h: Handle) -> bool:
    """Whether *h* is the child a ``task`` call of its (open) parent's run made: a
    replay of that run reattaches to it, so it stays in the table until the run ends."""
    parent = h.parent
    return (
        parent is not None
        and parent.state != "closed"
        and h.task_key is not None
        and parent.task_children.get(h.task_key) is h
    )


class HandleTable:
    """The handles of one runtime, from *root*; *on_forget(id)* is called for each
    handle the table forgets (the runtime drops its own copy of the transcript)."""

    def __init__(self, root: Handle, on_forget: Callable[[str], None] | None = None) -> None:
        self.root = root
        self._by_id: dict[str, Handle] = {root.id: root}
        # Closed handles still in the table, oldest first.
        self._closed: collections.OrderedDict[str, Handle] = collections.OrderedDict()
        self._on_forget = on_forget

    def __getitem__(self, id: str) -> Handle:
        return self._by_id[id]

    def add(self, h: Handle) -> None:
        """Put *h* (new, or restored in any state) under its parent."""
        parent = h.parent
        assert parent is not None
        parent.children.append(h)
        self._by_id[h.id] = h
        if h.state == "closed":
            self._closed[h.id] = h
        else:
            parent.live_children += 1

    def subtree(self, h: Handle, *, into_closed: bool = True) -> Iterator[Handle]:
        """*h* and its descendants, parents before children, without recursion. With
        ``into_closed=False`` a closed handle's (closed) subtree is not walked."""
        stack = [h]
        while stack:
            node = stack.pop()
            yield node
            if into_closed or node.state != "closed":
                stack.extend(reversed(node.children))

    def closed(self, h: Handle) -> None:
        """*h* has just closed: it no longer counts as live, and older closed handles
        past :data:`CLOSED_KEPT` may go."""
        h.task_children.clear()  # a closed handle never replays
        h.toolkit = h.client = None
        if h.parent is not None:
            h.parent.live_children -= 1
            self._closed[h.id] = h
        self.forget_closed()

    def forget_closed(self) -> None:
        """Forget the oldest closed handles past :data:`CLOSED_KEPT` that nothing may
        reattach to: out of the table and out of their parent's ``children``."""
        while len(self._closed) > CLOSED_KEPT:
            old = next((c for c in self._closed.values() if not pinned(c)), None)
            if old is None:
                return
            assert old.parent is not None
            old.parent.children.remove(old)
            for node in list(self.subtree(old)):
                self._closed.pop(node.id, None)
                self._by_id.pop(node.id, None)
                if self._on_forget is not None:
                    self._on_forget(node.id)

    def kept(self) -> Iterator[Handle]:
        """The handles a resume needs, parents first (the root excluded): every open one,
        and a closed one only while its parent's halted run may reattach to it."""
        for h in self.subtree(self.root, into_closed=False):
            if h is not self.root and (h.state != "closed" or pinned(h)):
                yield h
