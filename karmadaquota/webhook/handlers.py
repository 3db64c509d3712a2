"""The webhook: every admitted kind's handler over one state, and how it is assembled.

`Webhook` is the handlers of `binding`, `template`, `override`, `queue` and `quota` over
the state they share (`admission.Admission`); `assemble` builds it from a client and the
configuration — the quota store and its writer, the waiting list's recorder, the cluster
quotas and theirs, the templates' pods — as the program runs it (`app.running`) and as the
tests do; `run` keeps its informers fed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.evictions import CLUSTERS_PATH, Readiness
from karmadaquota.kube.client import Api
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.kube.quotas import PARSED_KEPT, QuotaStore
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.webhook.backend import KubeQuotaBackend
from karmadaquota.webhook.batcher import Batcher, BatcherConfig
from karmadaquota.webhook.binding import BindingAdmission
from karmadaquota.webhook.cluster import ClusterQuotas, cluster_store
from karmadaquota.webhook.config import WebhookConfig
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.override import OverrideAdmission
from karmadaquota.webhook.queue import QueueAdmission
from karmadaquota.webhook.quota import QuotaAdmission
from karmadaquota.webhook.refusals import record_refusals
from karmadaquota.webhook.template import TemplateAdmission


class Webhook(
    BindingAdmission, TemplateAdmission, OverrideAdmission, QueueAdmission, QuotaAdmission
):
    """The admission logic behind the HTTP routes (`routes.build_app`)."""

    # feeds `readiness` from the Clusters (None: nothing does; every eviction is charged)
    cluster_watch: Informer | None = None

    async def run(self) -> None:
        """Feed the stores (quotas, cluster quotas and namespace labels, templates) until
        cancelled; the cache-synced gauge is set once the quota caches have listed."""
        jobs = [self.quotas.run(), self._synced_gauge()]
        if self.cluster is not None:
            jobs.append(self.cluster.run())
        if self.templates is not None:
            jobs += [i.run() for i in self.templates.informers]
        if self.cluster_watch is not None:
            jobs.append(self.cluster_watch.run())
        await asyncio.gather(*jobs)

    async def _synced_gauge(self) -> None:
        await self.quotas.synced.wait()
        if self.cluster is not None:
            await self.cluster.store.synced.wait()
            await self.cluster.labels.synced.wait()
        self.metrics.cache_synced.set(1)

    async def close(self) -> None:
        """Answer what still waits in the writers, and stop asking for waiting-list passes."""
        await self.batcher.close()
        if self.cluster is not None:
            await self.cluster.close()
        if self.refusals is not None:
            await self.refusals.close()


class WebhookApi(Api, Lister, Protocol):
    """What the webhook reads, watches and writes through: `KubeClient`, or the tests' fake."""


def assemble(
    client: WebhookApi, config: WebhookConfig, metrics: WebhookMetrics | None = None
) -> Webhook:
    """The webhook as `config` says, over `client` (its stores not yet running: `run`)."""
    metrics = metrics or WebhookMetrics()

    def count(_: object) -> None:
        metrics.cache_quotas.set(len(quotas))

    quotas = QuotaStore(
        client, on_put=count, on_delete=count, on_relisted=count, parsed=PARSED_KEPT
    )
    backend = KubeQuotaBackend(client, quotas)
    metrics.watch_pending(lambda: quotas.overdue(datetime.now(UTC)))
    batcher = Batcher(
        backend,
        BatcherConfig(
            reservation_ttl=config.reservation_ttl,
            limited=config.limited,
            max_reservation_bytes=config.max_reservation_bytes,
        ),
        on_batch=metrics.batch_size.observe,
        on_conflict=metrics.conflicts.inc,
        on_write=metrics.observe_write,
    )
    cluster_quotas = cluster_store(client)
    cluster_backend = KubeQuotaBackend(client, cluster_quotas, cluster=True)
    cluster = ClusterQuotas(
        cluster_quotas,
        NamespaceLabels(client),
        Batcher(
            cluster_backend,
            replace(batcher.config),
            on_batch=metrics.batch_size.observe,
            on_conflict=metrics.conflicts.inc,
            on_write=metrics.observe_write,
            model=ClusterKarmadaQuota,
        ),
        cluster_backend.api_seconds,
    )
    readiness = Readiness(config.evicted_cluster_grace)
    webhook = Webhook(
        quotas,
        batcher,
        metrics,
        backend.api_seconds,
        record_refusals(backend, batcher) if config.record_waiting else None,
        config.writers,
        cluster,
        TemplateStore(client, kinds=config.kinds),
        config.allowed_overrides,
        readiness,
    )
    webhook.cluster_watch = Informer(CLUSTERS_PATH, readiness, client, name="clusters")
    return webhook
