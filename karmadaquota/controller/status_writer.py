"""The controller's one writer of quota status (KarmadaQuota and ClusterKarmadaQuota alike).

Every status the controller writes goes through `StatusWriter.write`: a compare-and-swap
(a JSON patch that tests the controller's own revision, so the webhook's appends of pending
charges do not make it lose, or a whole PUT on resourceVersion: `status.status_write`), retried
on conflict with the version the quota watch has usually delivered by then (`kube.retry`), the
result folded into the store ("fold my own write", as client-go's MutationCache), and the
write timed and counted with its retries (`kube.status_cas`). What to write is the caller's
(`desired`, called again on each fresh version): the recompute, and everything that releases
quota through it (the orphan audit included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from karmadaquota.controller import status as st
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.kube.client import JSON, JSON_PATCH, Api, Conflict, KubeError
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore
from karmadaquota.kube.retry import Backoff
from karmadaquota.kube.status_cas import timed_cas


class WriterConfig(Protocol):
    """The reconciler's configuration the writer reads (each time: tests change it)."""

    write_timeout: float
    max_attempts: int
    conflict_backoff: Backoff


class StatusWriter:
    """`write`: one quota's status, compare-and-swapped; `writes`: how many succeeded."""

    def __init__(self, api: Api, metrics: ControllerMetrics, config: WriterConfig) -> None:
        self.api = api
        self.metrics = metrics
        self.config = config
        self.writes = 0

    async def write(
        self,
        record: QuotaRecord,
        store: QuotaStore,
        path: str,
        desired: Callable[[QuotaRecord], st.StatusWrite | None],
    ) -> JSON | None:
        """Write what `desired(current)` says of the quota at `path` (the object's path); None
        when it says nothing is to be written. Raises `ConflictsExhausted` when every attempt
        lost, `NotFound` when the quota is gone, `KubeError`, a connection error or a
        `TimeoutError` (its deadline passed) otherwise (each counted)."""
        ns, name = record.namespace, record.name
        tried = 0  # resourceVersion of the last version a write was computed from

        async def read() -> QuotaRecord:
            # After a lost CAS (and its backoff) the quota watch has usually delivered the
            # version that won: use it instead of reading the whole object back. The server
            # still decides: a version that is stale again just loses the next CAS.
            held = store.get(ns, name)
            if held is not None and held.rv > tried:
                return held
            return store.fold(await self.api.get(path)) or record

        def mutate(current: QuotaRecord) -> tuple[QuotaRecord, st.StatusWrite] | None:
            nonlocal tried
            tried = current.rv
            change = desired(current)
            return None if change is None else (current, change)

        async def put(change: tuple[QuotaRecord, st.StatusWrite]) -> JSON:
            current, wanted = change
            timeout = self.config.write_timeout
            if wanted.patch is None:  # compare-and-swap on resourceVersion
                body = {**current.raw, "status": wanted.status}
                return await self.api.request("PUT", f"{path}/status", body, timeout=timeout)
            try:  # compare-and-swap on the controller's revision (status.status_write)
                return await self.api.request(
                    "PATCH",
                    f"{path}/status",
                    wanted.patch,
                    timeout=timeout,
                    content_type=JSON_PATCH,
                )
            except KubeError as e:
                if e.status == 422:  # a test of the patch failed: the version moved
                    raise Conflict(e.status, e.reason, e.message) from e
                raise

        result = await timed_cas(
            read,
            mutate,
            put,
            first=record,
            attempts=self.config.max_attempts,
            backoff=self.config.conflict_backoff,
            observe=self.metrics.status_write.observe,
            retries_timed=True,
        )
        if result is not None:
            self.writes += 1
            store.fold(result)
        return result
