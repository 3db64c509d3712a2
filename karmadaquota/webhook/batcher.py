"""Per-namespace batching with a single writer — the webhook's concurrency core.

Reviews for one namespace queue up while the previous batch is being written. A batch is
evaluated in arrival order against a running copy of the namespace's quotas (each admission
reserves its delta in the copy before the next is checked), then every changed quota gets ONE
compare-and-swap status write that records the admitted deltas as reservations (on the wire,
`status.pending`: one short entry per binding, grouped by charge; see `karmadaquota.pending`).

A first pass that would refuse reads the refusing quotas live before it answers: a newer
copy (room another writer gave back that the watch has not delivered) is evaluated again, as
the batch's first pass. On a lost compare-and-swap the quota is read again and only the
requests that charged it are re-checked, in order, against the fresh copy. Requests denied in
the first pass are never re-evaluated, so a retry can turn an admission into a denial but never
the reverse. What a refused review reserved is taken back before it is answered.

The batcher is the only writer of a quota's status in the webhook process, and owns when it
writes: the waiting list's changes (`WaitingSource`, the refusal recorder: a ledger) ride the
same write. A batch carries whatever changes are pending for the quotas it charges, recomputed
from each version it writes over (a lost compare-and-swap re-applies them to the fresh one);
changes no batch carries get a pass of their own (`noted`: at most once per namespace per
`interval`, on a `call_later` timer; `kick` runs one now) that writes every quota with pending
changes, admitted reviews or not (a storm of refusals).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import aiohttp
from pydantic import ValidationError

from karmadaquota import resources
from karmadaquota.api import (
    BINDING_API_VERSION,
    BINDING_KIND,
    ClusterKarmadaQuota,
    KarmadaQuota,
    ObjectReference,
    Reservation,
    WaitingWorkload,
)
from karmadaquota.charge import Charge
from karmadaquota.evaluate import (
    ALLOW,
    REASON_EXCEEDED,
    REASON_FORBIDDEN,
    Decision,
    LimitedResource,
    QuotaView,
    charges_nothing,
    evaluate,
)
from karmadaquota.kube.client import JSON, KubeError, NotFound
from karmadaquota.kube.quotas import UnreadableQuota
from karmadaquota.kube.retry import Backoff, ConflictsExhausted
from karmadaquota.kube.status_cas import Observe, timed_cas
from karmadaquota.pending import (
    append_within,
    without_refused,
)
from karmadaquota.quantity import QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.times import format_time

log = logging.getLogger("karmadaquota.batcher")

REASON_CONFLICT = "Conflict"
REASON_INTERNAL = "InternalError"
REASON_TOO_MANY = "TooManyRequests"

# A status write must fit etcd's request limit (1.5 MiB by default) together with the rest of
# the object (spec, used, conditions, metadata): `status.pending` gets at most this much of it.
DEFAULT_RESERVATION_BYTES = 512 * 1024


class QuotaBackend(Protocol):
    """What the batcher needs of the API: the cache's view, a fresh read, a CAS status write."""

    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        """The namespace's quotas; raises `UnreadableQuota` when one of them cannot be read
        (admission in that namespace is refused: fail closed)."""
        ...

    def update(self, quota: KarmadaQuota) -> None: ...

    async def get(self, namespace: str, name: str) -> JSON: ...

    async def put_status(self, quota: JSON) -> JSON: ...


class WaitingTake(Protocol):
    """A namespace's waiting-list changes taken for one pass of its writer."""

    @property
    def quotas(self) -> Collection[str]:
        """The quotas these changes are for (each is written even if nothing charges it)."""
        ...

    def wanted(
        self, quota: KarmadaQuota, siblings: Callable[[], Sequence[KarmadaQuota]]
    ) -> list[WaitingWorkload] | None:
        """The waiting list this version of the quota should carry; None if it already does.
        `siblings`: the namespace's quotas as the writer holds them now."""
        ...


class WaitingSource(Protocol):
    """Pending waiting-list changes (the refusal recorder), written by the batcher only: with
    the reservations of a batch, and in a pass of their own when the source asks for one
    (`Batcher.kick`)."""

    def take(self, namespace: str, quotas: Collection[str] | None) -> WaitingTake | None:
        """The changes for `quotas` of the namespace (None: for every quota that has some,
        a pass of their own)."""
        ...

    def settle(self, taken: WaitingTake, written: Collection[str], gone: Collection[str]) -> None:
        """`written`: quotas that now carry the changes (written, or already so); `gone`: quotas
        deleted or unreadable (their changes are dropped). The others' changes are given back."""
        ...


@dataclass(eq=False)
class ChargeRequest:
    """One review waiting for its batch; identity (not value) equality."""

    namespace: str
    name: str
    uid: str
    generation: int
    new: Charge
    old: Charge | None
    dry_run: bool
    # the single writer it queues behind: its namespace's (""), or a cluster quota's name
    key: str = ""
    future: asyncio.Future[Decision] = field(init=False)
    # quota name -> the entry its batch wrote there (what `Batcher.release` takes back)
    written: dict[str, Reservation] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.future = asyncio.get_running_loop().create_future()

    @property
    def queue(self) -> str:
        """The batch queue (and writer) this review waits in."""
        return self.key or self.namespace

    def resolve(self, decision: Decision) -> None:
        if not self.future.done():
            self.future.set_result(decision)


# a batch's lost compare-and-swap is re-read quickly: reviews wait on it (3 s deadline)
BATCH_CONFLICT_BACKOFF = Backoff(0.005, 0.08)
# What a review whose caller gave up mid-write counts as (nobody reads it: only its reservation
# is taken back)
ABANDONED = Decision(False, "the review's caller gave up before its reservation was written")


@dataclass
class BatcherConfig:
    reservation_ttl: timedelta = timedelta(seconds=60)
    max_batch: int = 512
    max_attempts: int = 10
    # after a lost compare-and-swap, wait a random while before re-reading, so that replicas
    # contending for one quota stop colliding in lockstep
    conflict_backoff: Backoff = BATCH_CONFLICT_BACKOFF
    limited: Sequence[LimitedResource] = ()
    # bound on the (estimated) JSON size of one quota's `status.pending`; admissions that
    # would pass it are refused with a retryable 429 until the controller counts some. Pending
    # charges never lapse on a clock, so with no controller this bound (or hard, whichever
    # comes first) is what refuses: it caps what an outage costs the quota object
    max_reservation_bytes: int = DEFAULT_RESERVATION_BYTES


@dataclass
class _Admitted:
    request: ChargeRequest
    charges: dict[str, ResourceList]


class Batcher:
    """One batch queue and writer per key: a namespace's KarmadaQuotas (the key is the
    namespace), or — a second Batcher over `model` ClusterKarmadaQuota — one cluster quota
    (the key is its name), so a cluster quota many namespaces charge at once still has one
    writer per replica and unrelated namespaces never wait for each other."""

    def __init__(
        self,
        store: QuotaBackend,
        config: BatcherConfig | None = None,
        on_batch: Callable[[int], None] | None = None,
        on_conflict: Callable[[], None] | None = None,
        on_write: Observe | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        model: type[KarmadaQuota] = KarmadaQuota,
    ) -> None:
        self._store = store
        self.config = config or BatcherConfig()
        self._model = model
        self._kind = model.__name__
        # a cluster quota's pending groups are per namespace too (pending.encode_pending)
        self._by_namespace = model is ClusterKarmadaQuota
        self._queues: dict[str, deque[ChargeRequest]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        # key -> quota name -> (uid, generation) of reservations to take back (`release`),
        # and the futures told when they are
        self._undo: dict[str, dict[str, list[Reservation]]] = {}
        self._undone: dict[str, list[asyncio.Future[None]]] = {}
        self._closed = False
        # namespaces whose waiting-list changes are due: the next pass writes them all
        self._kicked: set[str] = set()
        self._waiting: WaitingSource | None = None
        self._on_batch = on_batch or (lambda n: None)
        self._on_conflict = on_conflict or (lambda: None)
        self._on_write = on_write or (lambda result, seconds: None)
        self._clock = clock

    async def submit(self, request: ChargeRequest) -> Decision:
        """Queue a review behind the namespace's current batch and wait for its decision.

        An UPDATE whose footprint does not grow (the scheduler placing replicas, a label
        change) has nothing to reserve: it is answered at once instead of waiting for a write.
        """
        if charges_nothing(request.new, request.old):
            return ALLOW
        self._queues.setdefault(request.queue, deque()).append(request)
        self._start(request.queue)
        return await request.future

    def release(self, request: ChargeRequest, quotas: Collection[str]) -> asyncio.Future[None]:
        """Take back what `request` reserved in `quotas` of its key — exactly the entries its
        batch wrote (`Pending.written`) — by its writer before its next batch: another object
        the same review charges refused it (compensation). The future is done once the write
        was made (or given up: what is not taken back holds until the controller's orphan
        audit disproves it), so the refusal is answered after its reservation is gone."""
        undo = self._undo.setdefault(request.queue, {})
        for name in quotas:
            entry = request.written.get(name)
            if entry is not None:
                undo.setdefault(name, []).append(entry)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._undone.setdefault(request.queue, []).append(done)
        self._queues.setdefault(request.queue, deque())
        self._start(request.queue)
        return done

    def attach(self, source: WaitingSource) -> None:
        """Write `source`'s waiting-list changes with the reservations (one writer per quota),
        and in a pass of their own when it asks (`kick`)."""
        self._waiting = source

    def kick(self, namespace: str) -> None:
        """Write the namespace's pending waiting-list changes in its next pass (now if idle)."""
        if self._closed:
            return
        self._kicked.add(namespace)
        self._queues.setdefault(namespace, deque())
        self._start(namespace)

    def _start(self, namespace: str) -> None:
        if namespace not in self._workers:
            self._workers[namespace] = asyncio.create_task(
                self._drain(namespace), name=f"batcher/{namespace}"
            )

    async def close(self) -> None:
        """Stop every worker; what still waits is answered (a review: refused, try again; a
        take-back: given up, the orphan audit disproves it), so no caller hangs."""
        self._closed = True
        for task in list(self._workers.values()):
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        self._workers.clear()
        closing = Decision(
            False, "karmadaquota webhook is shutting down; try again", REASON_INTERNAL
        )
        for queue in self._queues.values():
            for p in queue:
                p.resolve(closing)
        self._queues.clear()
        for futures in self._undone.values():
            for f in futures:
                if not f.done():
                    f.set_result(None)
        self._undone.clear()
        self._undo.clear()

    async def _drain(self, namespace: str) -> None:
        queue = self._queues[namespace]
        try:
            while queue or namespace in self._kicked or namespace in self._undo:
                if namespace in self._undo:
                    await self._released(namespace)
                batch = [queue.popleft() for _ in range(min(len(queue), self.config.max_batch))]
                kicked = namespace in self._kicked
                self._kicked.discard(namespace)
                if batch:
                    self._on_batch(len(batch))
                try:
                    await self._process(namespace, batch, kicked)
                except Exception as e:  # fail closed: never a silent allow
                    log.exception("batch failed", extra={"namespace": namespace})
                    for p in batch:
                        p.resolve(Decision(False, f"quota admission failed: {e}", REASON_INTERNAL))
        finally:
            del self._workers[namespace]
            pending = queue or namespace in self._kicked or namespace in self._undo
            if not pending:
                self._queues.pop(namespace, None)
            elif not self._closed:  # arrived while we were exiting: keep the single writer
                self._workers[namespace] = asyncio.create_task(self._drain(namespace))
            # closed: close() answers what is left

    async def _released(self, key: str) -> None:
        """Write the take-backs `release` queued for `key`, then tell their reviews."""
        undo = self._undo.pop(key)
        done = self._undone.pop(key, [])
        try:
            await self._take_back(key, undo)
        except Exception:  # best effort: the orphan audit disproves what stays
            log.exception("taking back refused reservations failed", extra={"namespace": key})
        finally:
            for f in done:
                if not f.done():
                    f.set_result(None)

    async def _process(
        self, namespace: str, batch: list[ChargeRequest], kicked: bool = False
    ) -> None:
        """Evaluate and write a batch; `kicked`: also write every quota with waiting changes.

        A refusal is confirmed against the refusing quotas read live (each at most once per
        batch, so the passes are bounded by the key's quotas): the
        store may not have seen another writer give room back yet — a replica taking back
        what a refused review reserved, the controller releasing a deleted binding — and a
        caller that saw that answer must not be refused for it."""
        # a review whose caller gave up while it queued (its future cancelled) reserves nothing
        batch = [p for p in batch if not p.future.done()]
        if not batch and not kicked:
            return
        now = self._clock()
        confirmed: set[str] = set()  # quotas read live for this batch
        while True:
            try:
                objects = {q.metadata.name: q for q in self._store.quotas(namespace)}
                views = {name: QuotaView.of(q) for name, q in objects.items()}
            except UnreadableQuota as e:  # fail closed: a quota we cannot read limits nothing
                for p in batch:
                    p.resolve(Decision(False, str(e), REASON_FORBIDDEN))
                return  # waiting-list changes stay with the recorder for a pass that can read
            except QuantityError as e:
                for p in batch:
                    p.resolve(Decision(False, f"a {self._kind} of {namespace} is invalid: {e}"))
                if kicked:
                    await self._commit(namespace, objects, [], now, kicked)
                return
            answered, admitted = self._evaluate(batch, views)
            # a quota refusing after the others' live copies gave room is read live too (each
            # once: bounded by the key's quotas)
            refusing = {
                d.quota for _, d in answered if d.reason == REASON_EXCEEDED and d.quota
            } - confirmed
            if not refusing:
                break
            confirmed |= refusing
            if not await self._confirm(namespace, refusing, objects):
                break
        for p, d in answered:
            p.resolve(d)
        if admitted or kicked:
            await self._commit(namespace, objects, admitted, now, kicked)

    def _evaluate(
        self, batch: list[ChargeRequest], views: dict[str, QuotaView]
    ) -> tuple[list[tuple[ChargeRequest, Decision]], list[_Admitted]]:
        """The batch in arrival order against a running copy of its quotas: those answered
        now (refused, dry run, nothing to reserve), and those admitted if written."""
        answered: list[tuple[ChargeRequest, Decision]] = []
        admitted: list[_Admitted] = []
        for p in batch:
            d = evaluate(list(views.values()), p.new, p.old, self.config.limited)
            if not d.allowed or not d.charges or p.dry_run:
                answered.append((p, d))
                continue
            for name, rl in d.charges.items():
                views[name] = views[name].with_reserved(rl)
            admitted.append(_Admitted(p, dict(d.charges)))
        return answered, admitted

    async def _confirm(
        self, key: str, names: Collection[str], held: Mapping[str, KarmadaQuota]
    ) -> bool:
        """Read the refusing quotas live into the store; whether any was newer than the
        store's copy (the batch is then evaluated again). A read that fails leaves the
        refusal as the store decided it (the stricter side)."""
        newer = False
        for name in sorted(names):
            try:
                fresh = self._model.model_validate(await self._store.get(key, name))
            except (KubeError, aiohttp.ClientError, TimeoutError, ValidationError) as e:
                log.warning(
                    "a refusal could not be confirmed live",
                    extra={"namespace": key, "quota": name, "error": str(e)},
                )
                continue
            self._store.update(fresh)
            before = held.get(name)
            newer = (
                newer
                or before is None
                or fresh.metadata.resourceVersion != (before.metadata.resourceVersion)
            )
        return newer

    async def _commit(
        self,
        namespace: str,
        objects: dict[str, KarmadaQuota],
        admitted: list[_Admitted],
        now: datetime,
        kicked: bool = False,
    ) -> None:
        denied: dict[int, Decision] = {}
        written: dict[str, list[tuple[ChargeRequest, Reservation]]] = {}
        charged = sorted({n for a in admitted for n in a.charges})
        # the waiting list's changes ride these writes: those of the charged quotas always (no
        # extra write), every quota's when the recorder's coalescing interval is up (kicked)
        source, taken = self._waiting, None
        if source is not None:
            taken = source.take(namespace, None if kicked else charged)
        names = sorted(set(charged) | set(taken.quotas if taken is not None else ()))
        carried: dict[str, bool] = {}  # quota -> carries the waiting changes (False: gone)
        try:
            for name in names:
                entries = [(a.request, a.charges[name]) for a in admitted if name in a.charges]
                done = await self._write_quota(
                    namespace, name, objects.get(name), entries, denied, now, taken, carried
                )
                written[name] = done
                for p, r in done:
                    p.written[name] = r
        finally:
            if source is not None and taken is not None:
                source.settle(
                    taken,
                    [n for n, ok in carried.items() if ok],
                    [n for n, ok in carried.items() if not ok],
                )
        abandoned = 0
        for a in admitted:
            if a.request.future.cancelled() and id(a.request) not in denied:
                # its caller gave up while this batch was writing (the review was answered
                # 'try again', so the binding will not be created): take its reservation back
                # like a refused one's, before the next batch is evaluated
                denied[id(a.request)] = ABANDONED
                abandoned += 1
        if abandoned:
            log.info(
                "reservations of reviews answered before their write completed taken back",
                extra={"namespace": namespace, "count": abandoned},
            )
        for a in admitted:  # the admitted are answered at once ...
            if id(a.request) not in denied:
                a.request.resolve(Decision(True, charges=a.charges))
        # ... the refused once what they reserved is taken back: a caller told 'no' finds the
        # room free
        await self._compensate(namespace, written, denied)
        for a in admitted:
            if id(a.request) in denied:
                a.request.resolve(denied[id(a.request)])

    async def _write_quota(
        self,
        namespace: str,
        name: str,
        obj: KarmadaQuota | None,
        entries: list[tuple[ChargeRequest, ResourceList]],
        denied: dict[int, Decision],
        now: datetime,
        taken: WaitingTake | None = None,
        carried: dict[str, bool] | None = None,
    ) -> list[tuple[ChargeRequest, Reservation]]:
        """Record `entries` (and `taken`'s waiting list, if any) in one quota with CAS; re-check
        on conflict. Returns who was written, with the entry written for each; `carried[name]`
        says how the waiting list fared."""
        carried = carried if carried is not None else {}
        entries = [(p, rl) for p, rl in entries if id(p) not in denied]
        sent: KarmadaQuota | None = None  # the quota as the last write sent it
        made: dict[int, Reservation] = {}  # review identity -> the entry the last write sent

        async def read() -> KarmadaQuota:
            nonlocal entries
            fresh = self._model.model_validate(await self._store.get(namespace, name))
            self._store.update(fresh)
            entries = _recheck(fresh, entries, denied)
            return fresh

        def mutate(version: KarmadaQuota) -> JSON | None:
            nonlocal entries, sent
            # a caller that gave up meanwhile (a lost compare-and-swap and its backoff take
            # time) is not written at all
            entries = [(p, rl) for p, rl in entries if not p.future.cancelled()]
            # recomputed from every version written over: nothing lost or counted twice
            wanted = (
                taken.wanted(version, lambda: self._store.quotas(namespace))
                if taken is not None
                else None
            )
            if not entries and wanted is None:
                return None
            made.clear()
            sent, overflow = _with_reservations(
                version,
                entries,
                now + self.config.reservation_ttl,
                self.config,
                made,
                self._by_namespace,
            )
            if wanted is not None:
                status = sent.status.model_copy(update={"waiting": wanted})
                sent = sent.model_copy(update={"status": status})
            body = _dump(sent)
            if overflow:
                message = full_message(name, len(sent.status.reservations), self.config)
            for p, _ in overflow:
                denied[id(p)] = Decision(False, message, REASON_TOO_MANY)
            entries = [(p, rl) for p, rl in entries if id(p) not in denied]
            return body if entries or wanted is not None else None

        try:
            result = await self._cas(read, mutate, obj)
        except NotFound:
            carried[name] = False
            return []  # the quota is gone: nothing left to charge against it
        except ValidationError as e:
            carried[name] = False
            for p, _ in entries:
                denied[id(p)] = Decision(False, f"{self._kind} {name} is unreadable: {e}")
            return []
        except ConflictsExhausted:
            for p, _ in entries:
                denied[id(p)] = Decision(
                    False,
                    f"{self._kind} {name} is being updated concurrently; try again",
                    REASON_CONFLICT,
                )
            return []
        carried[name] = True  # written, or nothing to write: the list is as it should be
        if result is None or sent is None:
            return []
        self._store.update(_stored(sent, result))
        return [(p, made[id(p)]) for p, _ in entries]

    async def _cas(
        self,
        read: Callable[[], Awaitable[KarmadaQuota]],
        mutate: Callable[[KarmadaQuota], JSON | None],
        first: KarmadaQuota | None = None,
    ) -> JSON | None:
        """The writer's one compare-and-swap of a quota's status, for every change it makes
        (pending charges with the waiting list, take-backs): `mutate` on `first` or the version
        `read`, PUT on its resourceVersion, re-read and retried on conflict; each write timed
        and counted."""

        return await timed_cas(
            read,
            mutate,
            self._store.put_status,
            first=first,
            attempts=self.config.max_attempts,
            backoff=self.config.conflict_backoff,
            observe=self._on_write,
            on_conflict=self._on_conflict,
        )

    async def _compensate(
        self,
        namespace: str,
        written: dict[str, list[tuple[ChargeRequest, Reservation]]],
        denied: dict[int, Decision],
    ) -> None:
        """Take back the reservations of requests that a later quota of the same batch refused,
        or whose caller gave up while they were being written: each exactly once, by what it
        wrote (uid, generation, charge, expiry) — the binding's other charges (an earlier
        generation, another replica's) are untouched.

        Best effort: whatever is not taken back here holds until the controller's orphan audit
        proves its binding was never created (or never reached that generation).
        """
        undo = {
            name: [r for p, r in pendings if id(p) in denied] for name, pendings in written.items()
        }
        await self._take_back(namespace, undo)

    async def _take_back(self, key: str, undo: Mapping[str, Sequence[Reservation]]) -> None:
        """Remove exactly the entries `undo` names (per quota: the entries written, matched by
        uid, generation, charge and expiry second) from the key's quotas, by their writer.
        Best effort: what stays holds until the controller's orphan audit disproves it."""
        for name, gone in undo.items():
            if not gone:
                continue

            async def read(name: str = name) -> KarmadaQuota:
                return self._model.model_validate(await self._store.get(key, name))

            def without(obj: KarmadaQuota, gone: Sequence[Reservation] = gone) -> JSON:
                kept = without_refused(obj.status.reservations, gone)
                status = obj.status.model_copy(update={"reservations": kept})
                return _dump(obj.model_copy(update={"status": status}))

            try:
                result = await self._cas(read, without)
            except (
                KubeError,
                ConflictsExhausted,
                aiohttp.ClientError,
                TimeoutError,
                ValidationError,
            ) as e:
                log.warning(
                    "refused reservations not taken back (the orphan audit will)",
                    extra={"namespace": key, "quota": name, "count": len(gone), "error": str(e)},
                )
                continue
            if result is not None:
                self._store.update(self._model.model_validate(result))
                log.info(
                    "refused reservations taken back",
                    extra={"namespace": key, "quota": name, "count": len(gone)},
                )


def _recheck(
    obj: KarmadaQuota,
    entries: list[tuple[ChargeRequest, ResourceList]],
    denied: dict[int, Decision],
) -> list[tuple[ChargeRequest, ResourceList]]:
    """Re-evaluate, in order, the requests that charged this quota against its fresh state."""
    try:
        view = QuotaView.of(obj)
    except QuantityError as e:
        for p, _ in entries:
            denied[id(p)] = Decision(False, f"KarmadaQuota {obj.metadata.name} is invalid: {e}")
        return []
    kept: list[tuple[ChargeRequest, ResourceList]] = []
    for p, _ in entries:
        d = evaluate([view], p.new, p.old)
        if not d.allowed:
            denied[id(p)] = d
            continue
        rl = d.charges.get(view.name, {})
        if rl:
            view = view.with_reserved(rl)
            kept.append((p, rl))
    return kept


def _stored(sent: KarmadaQuota, answer: JSON) -> KarmadaQuota:
    """What the server stored for a status write it accepted: what we sent, at the version it
    answered. The compare-and-swap guarantees the rest is the version we wrote over (a status
    write changes nothing else we model), so the answer — the whole quota with every
    reservation — is not parsed again: that was the batch's costliest step at hundreds of
    reservations."""
    rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
    meta = sent.metadata.model_copy(update={"resourceVersion": rv})
    return sent.model_copy(update={"metadata": meta})


def full_message(name: str, held: int, config: BatcherConfig) -> str:
    """Why an admission that would pass the size bound of `status.pending` is refused."""
    return (
        f"KarmadaQuota {name} holds {held} pending charges the quota controller has not yet "
        f"counted, the most its status can carry ({config.max_reservation_bytes} bytes); "
        "admission resumes as the controller counts them (is karmadaquota-controller "
        "running?); try again"
    )


def _with_reservations(
    obj: KarmadaQuota,
    entries: list[tuple[ChargeRequest, ResourceList]],
    expires: datetime,
    config: BatcherConfig,
    written: dict[int, Reservation] | None = None,
    by_namespace: bool = False,
) -> tuple[KarmadaQuota, list[tuple[ChargeRequest, ResourceList]]]:
    """The quota with our reservations appended, ready for PUT status, and the entries that
    did not fit `config.max_reservation_bytes` (not written; `pending.append_within`).
    `written` gets each written entry by its review's identity (what compensation takes
    back).

    Shallow copies only: the cached quota is never mutated, and a deep copy of hundreds of
    reservations per write was the webhook's largest CPU cost under load.
    """
    stamp = format_time(expires)
    made = [
        (
            p,
            rl,
            Reservation(
                reservedBy=ObjectReference(
                    apiVersion=BINDING_API_VERSION,
                    kind=BINDING_KIND,
                    name=p.name,
                    namespace=p.namespace,
                    uid=p.uid,
                ),
                reserved=resources.format_resource_list(rl),
                expirationTime=stamp,
                generation=p.generation,
            ),
        )
        for p, rl in entries
    ]
    keep, fits = append_within(
        obj.status.reservations,
        [r for _, _, r in made],
        config.max_reservation_bytes,
        by_namespace,
    )
    overflow: list[tuple[ChargeRequest, ResourceList]] = []
    for (p, rl, r), fit in zip(made, fits, strict=True):
        if not fit:
            overflow.append((p, rl))
        elif written is not None:
            written[id(p)] = r
    status = obj.status.model_copy(update={"reservations": keep})
    return obj.model_copy(update={"status": status}), overflow


def _dump(obj: KarmadaQuota) -> JSON:
    body: JSON = obj.model_dump(mode="json", exclude_none=True)
    return body
