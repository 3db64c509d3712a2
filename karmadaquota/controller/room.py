"""Wait for room: the controller leader's one loop over what waits in a namespace.

Two ways of waiting share it, after each recompute of the namespace: workloads the webhook
refused for quota (`controller.wake`: an annotation on their template makes Karmada retry them
at once) and bindings a quota queued (`controller.dequeue`: clearing their suspension, an UPDATE
the webhook charges). Each pass goes announce (what waits: events, gauges) → select (what fits
now: `karmadaquota.room_selection` against the namespace's quotas) → act (let each pick go) →
retry_at (when to look again). The loop owns what both obey: an unreadable quota refuses
everything, so nothing is selected; a StrictFIFO queue lets nothing past a pick that was not
let go.

`RoomJob` is that loop as one of the jobs that follow a recompute: its own queue (per
namespace), the dequeuer first, then the waker; a template found deleted marks the recompute
(the waiting list is written without it). It drives them through `Admits` and `Wakes`, so
this module imports neither: they import `run`.

Waiting for room, module by module, all from here: this loop and job; the one selection
(`karmadaquota.room_selection`); the waiting list's pure rules (`karmadaquota.waiting`) and
their I/O (`controller.wake`); the queue's pure rules (`karmadaquota.queueing`) and their I/O
(`controller.dequeue`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from karmadaquota import queueing, waiting
from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.evaluate import QuotaView
from karmadaquota.quantity import QuantityError

# admitting queued bindings: after a lost precondition or an error (its queue's rate limiter)
ADMIT_RETRY = 0.5

P = TypeVar("P")


class Pass(Protocol[P]):
    """One look at one namespace by one way of waiting (it keeps what the look found)."""

    async def announce(self) -> bool:
        """Publish what waits (events, figures); False when nothing does."""
        ...

    async def select(self, views: Sequence[QuotaView]) -> Sequence[P]:
        """What to let go now, in order (`karmadaquota.room_selection.select`)."""
        ...

    def strict_queue(self, pick: P) -> str | None:
        """The StrictFIFO queue the pick waits in (None: BestEffortFIFO)."""
        ...

    async def act(self, pick: P) -> bool:
        """Let the pick go; False when it was not (its queue, if strict, stops)."""
        ...

    async def retry_at(self, let_go: Sequence[P]) -> float | None:
        """The loop time to look at the namespace again, if any."""
        ...


async def run(look: Pass[P], quotas: Sequence[KarmadaQuota]) -> float | None:
    """announce → select → act → retry_at; the loop time to come back, if any."""
    if not await look.announce():
        return None
    try:
        views = [QuotaView.of(q) for q in quotas]
    except QuantityError:
        return None  # an unreadable quota refuses everything: nothing can fit
    stopped: set[str] = set()
    let_go: list[P] = []
    for pick in await look.select(views):
        queue = look.strict_queue(pick)
        if queue is not None and queue in stopped:
            continue
        if await look.act(pick):
            let_go.append(pick)
        elif queue is not None:
            stopped.add(queue)
    return await look.retry_at(let_go)


class Admits(Protocol):
    """The queue's way of waiting (`controller.dequeue.Dequeuer`), as the job drives it."""

    def publish(self, namespace: str, entries: Sequence[queueing.QueueEntry]) -> None:
        """Publish the namespace's queue lengths (every replica)."""
        ...

    async def dequeue(
        self,
        namespace: str,
        quotas: Sequence[KarmadaQuota],
        entries: Sequence[queueing.QueueEntry],
        now: datetime,
    ) -> float | None:
        """Admit the queued bindings that fit (`run`); the loop time to come back, if any."""
        ...


class Wakes(Protocol):
    """The waiting list's way of waiting (`controller.wake.Waker`), as the job drives it."""

    async def wake(
        self, namespace: str, quotas: Sequence[KarmadaQuota], now: datetime
    ) -> float | None:
        """Wake the waiting workloads that fit (`run`); the loop time to come back, if any."""
        ...

    def gone(self, namespace: str, key: str) -> bool:
        """The template of this waiting workload no longer exists."""
        ...


class RoomJob:
    """After each recompute of a namespace: publish its queue lengths; on the leader, admit
    the queued bindings that fit (`dequeuer`), then wake the waiting workloads that do
    (`waker`). Either may be None (turned off)."""

    def __init__(
        self,
        quotas: Callable[[str], list[KarmadaQuota]],
        queued: Callable[[str], list[queueing.QueueEntry]],
        dequeuer: Admits | None,
        waker: Wakes | None,
        may_write: Callable[[], bool],
        clock: Callable[[], datetime],
        recompute: Callable[[str], None],
    ) -> None:
        self._quotas = quotas
        self._queued = queued
        self.dequeuer = dequeuer
        self.waker = waker
        self._may_write = may_write
        self._clock = clock
        self._recompute = recompute
        self.queue = DirtyQueue(
            self._wait, quiet=0.0, max_delay=0.0, retry_delay=ADMIT_RETRY, name="room"
        )

    def after_recompute(self, namespace: str, leader: bool) -> None:
        # followers only publish queue lengths
        if self.dequeuer is not None or (leader and self.waker is not None):
            self.queue.mark(namespace)

    def after_cluster_recompute(
        self, name: str, quota: KarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        """A cluster quota never queues; its waiting workloads are its namespaces' (their
        recomputes follow)."""

    async def _wait(self, namespace: str) -> None:
        entries = self._queued(namespace) if self.dequeuer is not None else []
        if self.dequeuer is not None:
            self.dequeuer.publish(namespace, entries)
        if not self._may_write():
            return
        quotas = self._quotas(namespace)
        if self.dequeuer is not None:
            again = await self.dequeuer.dequeue(namespace, quotas, entries, self._clock())
            if again is not None:
                self.queue.mark_at(namespace, again)
        if self.waker is not None:
            again = await self.waker.wake(namespace, quotas, self._clock())
            listed = waiting.of_namespace(quotas)
            if any(self.waker.gone(namespace, waiting.key(w.template)) for w in listed):
                self._recompute(namespace)  # its list is written without the deleted templates
            if again is not None:
                self.queue.mark_at(namespace, again)  # the templates' next audit
