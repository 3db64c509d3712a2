"""A queue's flush slots, handed to the keys an event marked before those a sweep marked.

A sweep (every quota recomputed after a list, a member's state or a new leader) marks thousands
of keys at once; each then waits for one of its queue's `concurrency` slots. With one FIFO
semaphore, a namespace marked by an event after that (a binding deleted: quota to release)
waited for every swept key before it — the rest of a cold start, or five thousand recomputes
that change nothing (docs/benchmarks.md, issue 46). Here a key waiting for a slot is urgent or
not, a slot that frees goes to the longest-waiting urgent key first, and a swept key that an
event marks while it waits becomes urgent where it stands.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict


class Slots:
    """At most `n` keys hold a slot at once; urgent waiters are let in first, each class in
    the order it came."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._urgent: OrderedDict[str, asyncio.Future[None]] = OrderedDict()
        self._swept: OrderedDict[str, asyncio.Future[None]] = OrderedDict()

    def waiting(self) -> int:
        return len(self._urgent) + len(self._swept)

    async def acquire(self, key: str, urgent: bool) -> None:
        """Wait for a slot (one waiter per key: a queue flushes each key once at a time)."""
        if self.free > 0 and not self._urgent and (urgent or not self._swept):
            self.free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._swept)[key] = fut
        try:
            await fut
        except asyncio.CancelledError:
            self._urgent.pop(key, None)
            self._swept.pop(key, None)
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            raise

    def promote(self, key: str) -> None:
        """An event marked `key` while it waits: it is urgent now, behind the urgent ones."""
        fut = self._swept.pop(key, None)
        if fut is not None:
            self._urgent[key] = fut

    def release(self) -> None:
        """A holder is done: its slot goes to the next waiter (urgent first), else is free."""
        for waiters in (self._urgent, self._swept):
            while waiters:
                _, fut = waiters.popitem(last=False)
                if not fut.done():
                    fut.set_result(None)
                    return
        self.free += 1
