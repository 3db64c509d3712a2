"""Wait for room: which of the workloads waiting in a namespace to let go now (pure, no I/O).

Two things wait for room: workloads the webhook refused for quota (`karmadaquota.waiting`,
woken by annotating their template) and bindings a quota queued instead of refusing
(`karmadaquota.queueing`, admitted by clearing their suspension). Both are one algorithm, as
Kueue's one requeue path for inadmissible workloads: take the entries in their order (each
side says which: first refusal; priority, then age), evaluate each with the admission engine
against used + reserved plus what was let go before it, and reserve what it takes in that
running view. An entry that does not fit is skipped (BestEffortFIFO), or stops its queue
(StrictFIFO). What is already on its way (`held`: woken, not yet admitted nor refused again)
is counted first and not let go twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from karmadaquota.charge import Charge
from karmadaquota.evaluate import QuotaView, evaluate

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Candidate(Generic[T]):
    """One waiting entry as the engine sees it: what it costs, and the queue it waits in."""

    item: T
    charge: Charge
    queue: str = ""  # StrictFIFO stops per queue (the quota that queued it)
    strict: bool = False  # its queue lets nothing past an entry that does not fit
    held: bool = False  # already let go: its room is counted, it is not picked again


def select(candidates: Iterable[Candidate[T]], views: Sequence[QuotaView]) -> list[T]:
    """The items to let go now, in `candidates`' order: each only if it fits after those
    before it (held ones included)."""
    blocked: set[str] = set()
    running = list(views)
    picked: list[T] = []
    for c in candidates:
        if c.queue in blocked:
            continue
        d = evaluate(running, c.charge)
        if not d.allowed:
            if c.strict:
                blocked.add(c.queue)
            continue
        running = [
            v.with_reserved(d.charges[v.name]) if v.name in d.charges else v for v in running
        ]
        if not c.held:
            picked.append(c.item)
    return picked
