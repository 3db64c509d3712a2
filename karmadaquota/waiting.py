"""Workloads refused for quota, waiting for room — the list and who to wake (pure, no I/O).

Karmada's resource detector retries a refused binding with exponential backoff (up to about
17 minutes between tries), so a refused workload can wait long after its quota has room. The
webhook records each refusal for quota in the refusing KarmadaQuota's `status.waiting[]`; the
controller's leader picks the entries that fit now and makes Karmada retry them at once.

Rules:

- An entry is keyed by its resource template (uid; apiVersion/kind/name when there is none).
  A workload refused again keeps its place: `firstRefused` stays, the request is refreshed.
- Bounded: a namespace keeps at most `limit` entries; the oldest refusals keep their places and
  the newest are not recorded (they still wait on Karmada's own backoff).
- Selection is best-effort FIFO by first refusal, by the one wait-for-room engine
  (`karmadaquota.room_selection`, which the queue uses too): each entry is evaluated with the
  admission engine against used + reserved plus what was already picked before it; an entry
  that does
  not fit is skipped, not a barrier. What was woken but not yet admitted or refused again is
  charged first, so a wake never counts the same room twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from karmadaquota import resources, room_selection
from karmadaquota.api import BindingResource, KarmadaQuota, ObjectReference, WaitingWorkload
from karmadaquota.charge import Charge
from karmadaquota.evaluate import QuotaView
from karmadaquota.quantity import QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import BindingTraits
from karmadaquota.times import format_time, parse_time

ANNOTATION = "quota.karmada.io/woken-at"
DEFAULT_LIMIT = 50

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def key(ref: ObjectReference | BindingResource) -> str:
    """The identity of a waiting workload: its template's uid (a re-created one is another)."""
    return ref.uid or f"{ref.apiVersion}/{ref.kind}/{ref.name}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A denial for quota as the webhook saw it (`count` denials since `first`, the last `at`)."""

    template: ObjectReference
    binding: str
    binding_uid: str
    requested: ResourceList
    traits: BindingTraits
    quota: str
    at: datetime
    first: datetime | None = None
    count: int = 1

    def again(self, later: Refusal) -> Refusal:
        """This workload refused once more: the latest request, the first time, one more."""
        return replace(later, first=self.first or self.at, count=self.count + later.count)

    def entry(self) -> WaitingWorkload:
        return WaitingWorkload(
            template=self.template,
            binding=self.binding,
            bindingUID=self.binding_uid,
            requested=resources.format_resource_list(self.requested),
            priorityClassName=self.traits.priority_class,
            bestEffort=self.traits.best_effort,
            firstRefused=format_time(self.first or self.at, micro=True),
            lastRefused=format_time(self.at, micro=True),
            refusals=self.count,
        )


def _since(w: WaitingWorkload) -> datetime:
    return parse_time(w.firstRefused) or _EPOCH


def fifo(entries: Iterable[WaitingWorkload]) -> list[WaitingWorkload]:
    """Oldest first refusal first; equal times keep their list order."""
    return sorted(entries, key=_since)


def record(
    waiting: Sequence[WaitingWorkload],
    refusals: Iterable[Refusal],
    limit: int = DEFAULT_LIMIT,
    elsewhere: Collection[str] = (),
) -> list[WaitingWorkload]:
    """`waiting` with `refusals` merged in (in their order), at most `limit` long.

    A known workload keeps its first refusal time and counts one more refusal; a new one is
    appended while the namespace (this list plus the `elsewhere` keys, listed by its other
    quotas) has room.
    """
    out = list(waiting)
    at = {key(w.template): i for i, w in enumerate(out)}
    others = set(elsewhere) - set(at)
    for r in refusals:
        k = key(r.template)
        i = at.get(k)
        if i is not None:
            old = out[i]
            out[i] = r.entry().model_copy(
                update={"firstRefused": old.firstRefused, "refusals": old.refusals + r.count}
            )
        elif len(out) + len(others) < limit:
            at[k] = len(out)
            out.append(r.entry())
    return fifo(out)


def remove(waiting: Sequence[WaitingWorkload], keys: Collection[str]) -> list[WaitingWorkload]:
    return [w for w in waiting if key(w.template) not in keys]


def settled(w: WaitingWorkload, holders: Mapping[str, Collection[str]]) -> bool:
    """Its binding exists as another object than the one refused (`holders`: binding name ->
    uids of existing bindings): a refused create lost to an admitted one — Karmada's detector
    can race itself creating a binding, and the loser of an admitted create is refused for
    quota before the API server would have refused it as AlreadyExists."""
    uids = holders.get(w.binding)
    return bool(w.bindingUID and uids and any(u != w.bindingUID for u in uids))


def of_namespace(quotas: Iterable[KarmadaQuota]) -> list[WaitingWorkload]:
    """Every quota's waiting list as one queue: a workload listed twice waits from its first."""
    first: dict[str, WaitingWorkload] = {}
    for q in quotas:
        for w in q.status.waiting:
            k = key(w.template)
            have = first.get(k)
            if have is None or _since(w) < _since(have):
                first[k] = w
    return fifo(first.values())


def charge_of(w: WaitingWorkload) -> Charge:
    """The refused request as a charge the admission engine evaluates (QuantityError if bad)."""
    requested = resources.parse_resource_list(w.requested, "requested")
    pods = requested.get("pods")
    traits = BindingTraits(
        has_replicas=pods is not None and pods.nanos > 0,
        best_effort=w.bestEffort,
        priority_class=w.priorityClassName,
    )
    return Charge(total=requested, per_cluster={}, traits=traits)


def in_flight(entries: Iterable[WaitingWorkload], woken: Mapping[str, int]) -> set[str]:
    """Woken entries not refused since (`woken` maps key -> refusals seen when woken)."""
    return {k for w in entries if woken.get(k := key(w.template)) == w.refusals}


def select(
    entries: Sequence[WaitingWorkload],
    quotas: Sequence[QuotaView],
    flying: Collection[str] = (),
) -> list[WaitingWorkload]:
    """The waiting workloads to wake now: FIFO, each only if it fits after those before it
    (`room_selection.select`, BestEffortFIFO by first refusal).

    `flying` entries (woken, not yet admitted nor refused again) are charged first where they
    still fit; where they do not, their admission is already in used + reserved.
    """
    ordered = fifo(entries)
    woken = [w for w in ordered if key(w.template) in flying]
    waiting = [w for w in ordered if key(w.template) not in flying]
    candidates: list[room_selection.Candidate[WaitingWorkload]] = []
    for w in woken + waiting:
        try:
            charge = charge_of(w)
        except QuantityError:
            continue  # unreadable entry: never woken; it leaves when its workload is admitted
        candidates.append(room_selection.Candidate(w, charge, held=key(w.template) in flying))
    return room_selection.select(candidates, quotas)
