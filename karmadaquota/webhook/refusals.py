"""Remember who was refused for quota: the webhook's side of waking.

Every QuotaExceeded denial (CREATE, or an UPDATE that scales up) becomes an entry in the refusing
quota's `status.waiting[]`; every admission of a listed template removes it. Nothing is written
per denial, and nothing is written here: the recorder is a ledger of a namespace's changes,
written by the batcher — the one writer of a quota's status in the process — in its own
compare-and-swap writes (`Batcher.attach`): with the reservations of any batch that charges
the quota, and in a pass of their own that the recorder asks for (`Batcher.kick`) at most once
per `interval` per namespace (its timers, one per namespace, no polling). Another replica or
the controller writing in between is re-read and the changes are merged again. The list lives
in the quota's status, so it survives a webhook restart and is shared by every replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from karmadaquota import queued, waiting
from karmadaquota.api import KarmadaQuota, ObjectReference, ResourceBinding, WaitingWorkload
from karmadaquota.charge import Charge
from karmadaquota.evaluate import REASON_EXCEEDED, Decision, delta
from karmadaquota.webhook.batcher import Batcher, QuotaBackend, WaitingTake

log = logging.getLogger("karmadaquota.waiting")


@dataclass
class _Changes:
    """A namespace's unwritten changes: the last word per template wins."""

    refused: dict[str, waiting.Refusal] = field(default_factory=dict)
    admitted: set[str] = field(default_factory=set)


def record_refusals(store: QuotaBackend, writer: Batcher, interval: float = 1.0) -> RefusalRecorder:
    """A recorder whose changes `writer` (the Batcher of the namespaces' quotas: each quota
    has one writer) writes: with its batches, and in the passes the recorder asks for."""
    recorder = RefusalRecorder(store, writer.kick, interval)
    writer.attach(recorder)
    return recorder


class RefusalRecorder:
    """A ledger of each namespace's unwritten waiting-list changes, taken by the writer for its
    writes; `pass_due(ns)` asks the writer for a pass of their own, at most once per `interval`
    seconds per namespace (`record_refusals` wires the two).
    """

    def __init__(
        self,
        store: QuotaBackend,
        pass_due: Callable[[str], None],
        interval: float = 1.0,
        per_namespace: int = waiting.DEFAULT_LIMIT,
        unwritten_limit: int = 10_000,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._pass_due = pass_due
        self._interval = interval
        # the passes of their own: one timer per namespace; when one was last asked for and
        # not yet run, and when the last ran (loop times)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._asked: dict[str, float] = {}
        self._last_pass: dict[str, float] = {}
        self._closed = False
        self.per_namespace = per_namespace
        self.unwritten_limit = unwritten_limit
        self._clock = clock
        self._changes: dict[str, _Changes] = {}
        self._unwritten = 0  # refusals in `_changes` (not those taken for a write)
        self._flying: dict[str, _Taken] = {}  # taken for the namespace's write in progress

    def observe(
        self,
        namespace: str,
        binding: ResourceBinding,
        previous: ResourceBinding | None,
        new: Charge,
        old: Charge | None,
        decision: Decision,
    ) -> None:
        """Note an admission decision (never dry-run ones); cheap, never blocks.

        What takes a workload off the list is an admission that carries its template as it
        now is: a create, a growth, or an update Karmada rebuilt from a changed template (a
        scale-down that now fits). An update that only touches the binding (labels, placement)
        says nothing about the refused request and leaves it waiting. A queued binding
        (`karmadaquota.queued`) waits in its queue, not here: its clear is never noted.
        """
        if previous is not None and queued.queued_by(previous):
            return  # the controller clearing a queued binding: refused, it stays queued
        ref = binding.spec.resource
        if decision.reason == REASON_EXCEEDED and decision.quota:
            template = ObjectReference(
                apiVersion=ref.apiVersion,
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace or namespace,
                uid=ref.uid,
            )
            refusal = waiting.Refusal(
                template=template,
                binding=binding.metadata.name,
                binding_uid=binding.metadata.uid,
                requested=delta(new, old),
                traits=new.traits,
                quota=decision.quota,
                at=self._clock(),
            )
            self._refused(namespace, waiting.key(template), refusal)
            return
        if not decision.allowed:
            return
        k = waiting.key(ref)  # the cheap test first: nearly every admission is of no one listed
        if self._listed(namespace, k) and (
            previous is None
            or previous.spec.resource.resourceVersion != ref.resourceVersion
            or delta(new, old)
        ):
            changes = self._changes.setdefault(namespace, _Changes())
            if changes.refused.pop(k, None) is not None:
                self._unwritten -= 1
            changes.admitted.add(k)
            self._noted(namespace)

    def _listed(self, namespace: str, k: str) -> bool:
        changes = self._changes.get(namespace)
        if changes is not None and k in changes.refused:
            return True
        flying = self._flying.get(namespace)
        if flying is not None and any(k in rs for rs in flying.refused.values()):
            return True
        return any(
            waiting.key(w.template) == k
            for q in self._store.quotas(namespace)
            for w in q.status.waiting
        )

    def _refused(self, namespace: str, k: str, refusal: waiting.Refusal) -> None:
        changes = self._changes.setdefault(namespace, _Changes())
        earlier = changes.refused.get(k)
        if earlier is None:
            if self._unwritten >= self.unwritten_limit:
                return  # bounded: the oldest refusals keep their places
            self._unwritten += 1
        changes.admitted.discard(k)
        changes.refused[k] = refusal if earlier is None else earlier.again(refusal)
        self._noted(namespace)

    def _noted(self, namespace: str) -> None:
        """New changes: a pass of their own writes them, unless a batch carries them first."""
        if self._closed or namespace in self._timers or namespace in self._flying:
            return  # on its way; a write in progress looks again when it settles
        loop = asyncio.get_running_loop()
        # a pass asked for and not yet run (the writer is busy with a batch) is not asked
        # again before `interval`: that pass takes what arrives meanwhile
        last = max(self._last_pass.get(namespace, -1e300), self._asked.get(namespace, -1e300))
        delay = max(0.0, last + self._interval - loop.time())
        self._timers[namespace] = loop.call_later(delay, self._due, namespace)

    def _due(self, namespace: str) -> None:
        del self._timers[namespace]
        if self._closed or not self.has_changes(namespace):
            return
        loop = asyncio.get_running_loop()
        due = self._last_pass.get(namespace, -1e300) + self._interval
        if loop.time() < due:  # a pass ran since this was scheduled
            self._timers[namespace] = loop.call_later(due - loop.time(), self._due, namespace)
            return
        self._asked[namespace] = loop.time()
        self._pass_due(namespace)

    # ---- the writer's side ------------------------------------------------------------------

    def has_changes(self, namespace: str) -> bool:
        return namespace in self._changes

    def due(self, namespace: str) -> set[str]:
        """The quotas of the namespace that have changes to carry."""
        return set(self._split(namespace))

    def _split(self, namespace: str) -> dict[str, list[str]]:
        """quota -> keys of the refusals it records; quotas listing an admitted key get []."""
        changes = self._changes.get(namespace)
        if changes is None:
            return {}
        quotas = sorted(self._store.quotas(namespace), key=lambda q: q.metadata.name)
        # a workload already listed by one of the namespace's quotas is recorded there again
        # (keeping its place), wherever the refusal came from this time
        home: dict[str, str] = {}
        for q in quotas:
            for w in q.status.waiting:
                home.setdefault(waiting.key(w.template), q.metadata.name)
        by_quota: dict[str, list[str]] = {}
        for k, r in changes.refused.items():
            by_quota.setdefault(home.get(k, r.quota), []).append(k)
        for q in quotas:
            if any(waiting.key(w.template) in changes.admitted for w in q.status.waiting):
                by_quota.setdefault(q.metadata.name, [])
        return by_quota

    def take(self, namespace: str, quotas: Collection[str] | None) -> _Taken | None:
        """Take the changes for `quotas` (None: all, the coalesced pass) for one write each.

        Admitted keys are applied to every quota written; they stay here only while a quota
        not written now still lists them.
        """
        if quotas is None:  # the pass of their own runs now
            self._asked.pop(namespace, None)
            self._last_pass[namespace] = asyncio.get_running_loop().time()
        changes = self._changes.get(namespace)
        if changes is None or namespace in self._flying:
            return None
        split = self._split(namespace)
        names = set(split) if quotas is None else set(split) & set(quotas)
        taken = _Taken(namespace, self.per_namespace, admitted=set(changes.admitted))
        for name in names:
            taken.refused[name] = {k: changes.refused.pop(k) for k in split[name]}
            self._unwritten -= len(split[name])
        still_listed = {
            waiting.key(w.template)
            for q in self._store.quotas(namespace)
            if q.metadata.name not in names
            for w in q.status.waiting
        }
        changes.admitted &= still_listed
        if not changes.refused and not changes.admitted:
            del self._changes[namespace]
        if not names and not taken.admitted:
            return None
        self._flying[namespace] = taken
        return taken

    def settle(self, taken: WaitingTake, written: Collection[str], gone: Collection[str]) -> None:
        """The writer's pass is over: what was not written goes back (`WaitingSource.settle`)."""
        assert isinstance(taken, _Taken), "settle takes back what `take` gave"
        namespace = taken.namespace
        if self._flying.get(namespace) is taken:
            del self._flying[namespace]
        failed = [n for n in taken.refused if n not in written and n not in gone]
        for name in sorted(written):
            if name in taken.changed:
                log.info(
                    "waiting list written",
                    extra={"namespace": namespace, "quota": name, "waiting": taken.changed[name]},
                )
        if failed:
            log.warning(
                "waiting list not written; retried later",
                extra={"namespace": namespace, "quotas": failed},
            )
            self._give_back(taken, failed)
        if self.has_changes(namespace):  # given back, or noted meanwhile: a pass of their own
            self._noted(namespace)
            return
        since = asyncio.get_running_loop().time() - self._interval
        self._last_pass = {ns: t for ns, t in self._last_pass.items() if t > since}
        self._asked = {ns: t for ns, t in self._asked.items() if t > since}

    def _give_back(self, taken: _Taken, failed: list[str]) -> None:
        """Changes not written go back under the ones noted since (the last word wins)."""
        changes = self._changes.setdefault(taken.namespace, _Changes())
        for name in failed:
            for k, r in taken.refused[name].items():
                if k in changes.admitted:
                    continue  # admitted since
                later = changes.refused.get(k)
                if later is not None:
                    changes.refused[k] = r.again(later)
                elif self._unwritten < self.unwritten_limit:
                    changes.refused[k] = r
                    self._unwritten += 1
        for k in taken.admitted:
            if k not in changes.refused:
                changes.admitted.add(k)
        if not changes.refused and not changes.admitted:
            del self._changes[taken.namespace]

    async def close(self) -> None:
        """No more passes are asked for (the timers go)."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


@dataclass(eq=False)
class _Taken:
    """A namespace's changes taken for one pass of the writer (`batcher.WaitingTake`)."""

    namespace: str
    limit: int  # entries a namespace keeps at most
    refused: dict[str, dict[str, waiting.Refusal]] = field(default_factory=dict)  # by quota
    admitted: set[str] = field(default_factory=set)
    changed: dict[str, int] = field(default_factory=dict)  # quota -> entries, when changed

    @property
    def quotas(self) -> Collection[str]:
        return sorted(self.refused)

    def wanted(
        self, quota: KarmadaQuota, siblings: Callable[[], Sequence[KarmadaQuota]]
    ) -> list[WaitingWorkload] | None:
        """The waiting list this version of the quota should carry (None: it already does),
        within `limit` together with what its `siblings` list.

        Recomputed from each version written over, so a lost compare-and-swap loses nothing and
        counts no refusal twice.
        """
        name = quota.metadata.name
        refusals = self.refused.get(name)
        if refusals is None and not self.admitted:
            return None
        elsewhere = {
            waiting.key(w.template)
            for q in siblings()
            if q.metadata.name != name
            for w in q.status.waiting
        }
        current = quota.status.waiting
        wanted = waiting.remove(
            waiting.record(current, (refusals or {}).values(), self.limit, elsewhere),
            self.admitted,
        )
        if wanted == current:
            self.changed.pop(name, None)
            return None
        self.changed[name] = len(wanted)
        return wanted
