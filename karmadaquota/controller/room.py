"""Wait for room: the controller leader's one loop over what waits in a namespace.

Two ways of waiting share it, after each recompute of the namespace: workloads the webhook
refused for quota (`controller.wake`: an annotation on their template makes Karmada retry them
at once) and bindings a quota queued (`controller.dequeue`: clearing their suspension, an UPDATE
the webhook charges). Each pass goes announce (what waits: events, gauges) → select (what fits
now: `karmadaquota.room` against the namespace's quotas) → act (let each pick go) → retry_at
(when to look again). The loop owns what both obey: an unreadable quota refuses everything, so
nothing is selected; a StrictFIFO queue lets nothing past a pick that was not let go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from karmadaquota.api import KarmadaQuota
from karmadaquota.evaluate import QuotaView
from karmadaquota.quantity import QuantityError

P = TypeVar("P")


class Pass(Protocol[P]):
    """One look at one namespace by one way of waiting (it keeps what the look found)."""

    async def announce(self) -> bool:
        """Publish what waits (events, figures); False when nothing does."""
        ...

    async def select(self, views: Sequence[QuotaView]) -> Sequence[P]:
        """What to let go now, in order (`karmadaquota.room.select`)."""
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
