"""Remember who was refused for quota: the webhook's side of requeueing.

Every QuotaExceeded denial (CREATE, or an UPDATE that scales up) becomes an entry in the refusing
quota's `status.waiting[]`; every admission of a listed template removes it. Nothing is written
per denial: changes for a namespace are collected and written together, at most once per
`interval` per namespace, with compare-and-swap (another replica or the controller writing in
between is re-read and merged again). The list lives in the quota's status, so it survives a
webhook restart and is shared by every replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from karmadaquota import waiting
from karmadaquota.api import KarmadaQuota, ObjectReference, ResourceBinding, WaitingWorkload
from karmadaquota.charge import Charge
from karmadaquota.evaluate import REASON_EXCEEDED, Decision, delta
from karmadaquota.kube.client import JSON, KubeError, NotFound
from karmadaquota.kube.retry import ConflictsExhausted, retry_on_conflict
from karmadaquota.webhook.batcher import CONFLICT_BACKOFF, QuotaBackend

log = logging.getLogger("karmadaquota.waiting")


@dataclass
class _Changes:
    """A namespace's unwritten changes: the last word per template wins."""

    refused: dict[str, waiting.Refusal] = field(default_factory=dict)
    admitted: set[str] = field(default_factory=set)


class RefusalRecorder:
    def __init__(
        self,
        store: QuotaBackend,
        interval: float = 1.0,
        per_namespace: int = waiting.DEFAULT_LIMIT,
        pending_limit: int = 10_000,
        max_attempts: int = 10,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        busy: Callable[[str], bool] = lambda namespace: False,
        max_defer: float = 2.0,
    ) -> None:
        self._store = store
        self.interval = interval
        self.per_namespace = per_namespace
        self.pending_limit = pending_limit
        self.max_attempts = max_attempts
        self._clock = clock
        # while admission is writing reservations in a namespace (a storm), the list waits a
        # little: its writes would only make the reservation writes lose their compare-and-swap
        self._busy = busy
        self.max_defer = max_defer
        self._changes: dict[str, _Changes] = {}
        self._pending = 0
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._last_write: dict[str, float] = {}

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
        says nothing about the refused request and leaves it waiting.
        """
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
                self._pending -= 1
            changes.admitted.add(k)
            self._schedule(namespace)

    def _listed(self, namespace: str, k: str) -> bool:
        changes = self._changes.get(namespace)
        if changes is not None and k in changes.refused:
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
            if self._pending >= self.pending_limit:
                return  # bounded: the oldest refusals keep their places
            self._pending += 1
        changes.admitted.discard(k)
        changes.refused[k] = refusal if earlier is None else earlier.again(refusal)
        self._schedule(namespace)

    def _schedule(self, namespace: str) -> None:
        if namespace not in self._tasks:
            self._tasks[namespace] = asyncio.create_task(
                self._flush_later(namespace), name=f"waiting/{namespace}"
            )

    async def _flush_later(self, namespace: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            last = self._last_write.get(namespace)
            if last is not None:
                await asyncio.sleep(max(0.0, last + self.interval - loop.time()))  # coalescing
            for _tick in range(int(self.max_defer / 0.05)):
                if not self._busy(namespace):
                    break
                await asyncio.sleep(0.05)  # let the namespace's admission batches through
            changes = self._changes.pop(namespace, _Changes())
            self._pending -= len(changes.refused)
            self._last_write[namespace] = loop.time()
            try:
                await self._write(namespace, changes)
            except (TimeoutError, KubeError, OSError) as e:
                log.warning(
                    "waiting list not written", extra={"namespace": namespace, "error": str(e)}
                )
        finally:
            del self._tasks[namespace]
            if namespace in self._changes:
                self._schedule(namespace)
            else:
                self._forget_stale(loop.time())

    def _forget_stale(self, now: float) -> None:
        self._last_write = {ns: t for ns, t in self._last_write.items() if t > now - self.interval}

    async def _write(self, namespace: str, changes: _Changes) -> None:
        # a workload already listed by one of the namespace's quotas is recorded there again
        # (keeping its place), wherever the refusal came from this time
        home: dict[str, str] = {}
        for q in sorted(self._store.quotas(namespace), key=lambda q: q.metadata.name):
            for w in q.status.waiting:
                home.setdefault(waiting.key(w.template), q.metadata.name)
        by_quota: dict[str, list[waiting.Refusal]] = {}
        for k, r in changes.refused.items():
            by_quota.setdefault(home.get(k, r.quota), []).append(r)
        for q in self._store.quotas(namespace):
            if q.metadata.name not in by_quota and any(
                waiting.key(w.template) in changes.admitted for w in q.status.waiting
            ):
                by_quota[q.metadata.name] = []
        for name in sorted(by_quota):
            await self._write_quota(namespace, name, by_quota[name], changes.admitted)

    async def _write_quota(
        self, namespace: str, name: str, refusals: list[waiting.Refusal], admitted: set[str]
    ) -> None:
        wanted: list[WaitingWorkload] = []

        async def read() -> KarmadaQuota:
            fresh = KarmadaQuota.model_validate(await self._store.get(namespace, name))
            self._store.update(fresh)
            return fresh

        def mutate(quota: KarmadaQuota) -> JSON | None:
            nonlocal wanted
            elsewhere = {
                waiting.key(w.template)
                for q in self._store.quotas(namespace)
                if q.metadata.name != name
                for w in q.status.waiting
            }
            current = quota.status.waiting
            wanted = waiting.remove(
                waiting.record(current, refusals, self.per_namespace, elsewhere), admitted
            )
            if wanted == current:
                return None
            status = quota.status.model_copy(update={"waiting": wanted})
            return quota.model_copy(update={"status": status}).model_dump(
                mode="json", exclude_none=True
            )

        try:
            result = await retry_on_conflict(
                read,
                mutate,
                self._store.put_status,
                first={q.metadata.name: q for q in self._store.quotas(namespace)}.get(name),
                attempts=self.max_attempts,
                backoff=CONFLICT_BACKOFF,
            )
        except (NotFound, ValidationError):
            return  # the quota is gone (or unreadable): nothing to keep a list on
        except ConflictsExhausted:
            log.warning(
                "waiting list not written: quota updated concurrently",
                extra={"namespace": namespace, "quota": name},
            )
            return
        if result is None:
            return
        self._store.update(KarmadaQuota.model_validate(result))
        log.info(
            "waiting list written",
            extra={"namespace": namespace, "quota": name, "waiting": len(wanted)},
        )

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
