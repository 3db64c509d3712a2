"""Prometheus metrics of the webhook, served on /metrics of the HTTPS port and of the plain
HTTP metrics port (`aux_port.serve_aux`, `--metrics-bind-address`/`--metrics-port`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from karmadaquota.kube.status_cas import StatusWriteMetrics
from karmadaquota.runtime_metrics import LATENCY_TOP, program_registry
from karmadaquota.serving.certs import CertificateError, not_after

log = logging.getLogger("karmadaquota.webhook")

# Fine at the low end, where a review's own work lies (p50/p99 at 50-200 reviews/s can be read
# to a quarter millisecond), coarse above 10 ms, where the API server's writes dominate.
_LATENCY_BUCKETS = (
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.00125,
    0.0015,
    0.002,
    0.0025,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.015,
    *LATENCY_TOP,
)


class WebhookMetrics:
    """One set per process; a registry of its own keeps tests independent."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = program_registry(registry)

        def review_latency(name: str, documentation: str) -> Histogram:
            # both observed at once with one operation and result (`observe_decision`)
            labels = ["operation", "result"]
            return Histogram(name, documentation, labels, buckets=_LATENCY_BUCKETS, registry=r)

        self.admission_duration = review_latency(
            "karmadaquota_admission_duration_seconds",
            "Time from receiving an AdmissionReview to answering it (server side).",
        )
        self.own_duration = review_latency(
            "karmadaquota_admission_own_duration_seconds",
            "Review latency minus the time its namespace spent in KarmadaQuota API calls "
            "(status writes, re-reads) while it was in flight: the webhook's own share.",
        )
        self.decisions = Counter(
            "karmadaquota_admission_decisions_total",
            "Admission decisions by result and reason.",
            ["result", "reason"],
            registry=r,
        )
        self.queued = Counter(
            "karmadaquota_queued_total",
            "New ResourceBindings created suspended in a quota's queue (onExceed: Queue), by "
            "reason: Exceeded (did not fit) or BehindQueue (StrictFIFO, others queued ahead).",
            ["reason"],
            registry=r,
        )
        self.conflicts = Counter(
            "karmadaquota_status_write_conflicts_total",
            "KarmadaQuota status writes that lost the compare-and-swap and were re-checked.",
            registry=r,
        )
        self.status_write = StatusWriteMetrics(
            r,
            "KarmadaQuota status writes by result.",
            "Duration of one KarmadaQuota status write (one per changed quota per batch).",
            _LATENCY_BUCKETS,
        )
        self.batch_size = Histogram(
            "karmadaquota_admission_batch_size",
            "Reviews evaluated together in one per-namespace batch.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.connections = Counter(
            "karmadaquota_webhook_connections_total",
            "Client connections by event: opened (each one a TLS handshake), refused over the "
            "connection limit, timed_out waiting for a request.",
            ["event"],
            registry=r,
        )
        self.cache_synced = Gauge(
            "karmadaquota_quota_cache_synced",
            "1 once the KarmadaQuota watch cache has listed every quota.",
            registry=r,
        )
        self._decision_children: dict[
            tuple[str, str, str], tuple[Histogram, Histogram, Counter]
        ] = {}
        self.cache_quotas = Gauge(
            "karmadaquota_quota_cache_objects", "KarmadaQuotas in the watch cache.", registry=r
        )
        self.serving_cert_expiry = Gauge(
            "karmadaquota_webhook_serving_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate last loaded (the earliest of the certificates "
            "in --tls-cert-file), as seconds since the epoch; set at start and on each reload.",
            registry=r,
        )

    def watch_pending(self, overdue: Callable[[], tuple[float, int]]) -> None:
        """Export, at each scrape, what `overdue()` says of the pending charges in the quota
        store (`QuotaStore.overdue`): what KarmadaQuotaPendingNotConfirmed alerts on."""
        memo: list[tuple[float, int]] = []  # one store walk per scrape, for both gauges

        def seconds() -> float:
            memo[:] = [overdue()]
            return memo[0][0]

        def charges() -> float:
            return float((memo.pop() if memo else overdue())[1])

        Gauge(
            "karmadaquota_pending_overdue_seconds",
            "How long the oldest pending charge in this webhook's quota store has been past its "
            "expiry without the controller counting it in used or disproving it (0: none is). "
            "Charges never lapse: with no controller this grows and the quotas fill.",
            registry=self.registry,
        ).set_function(seconds)
        Gauge(
            "karmadaquota_pending_overdue_charges",
            "Pending charges in this webhook's quota store past their expiry, neither counted "
            "nor disproved by the controller yet.",
            registry=self.registry,
        ).set_function(charges)

    def observe_decision(
        self, operation: str, allowed: bool, reason: str, seconds: float, own: float
    ) -> None:
        """One answered review (label children cached: `labels()` costs a lock and a lookup)."""
        result = "allowed" if allowed else "denied"
        key = (operation, result, reason)
        children = self._decision_children.get(key)
        if children is None:
            children = (
                self.admission_duration.labels(operation, result),
                self.own_duration.labels(operation, result),
                self.decisions.labels(result, reason),
            )
            self._decision_children[key] = children
        children[0].observe(seconds)
        children[1].observe(own)
        children[2].inc()

    def connection(self, event: str) -> None:
        self.connections.labels(event).inc()

    def observe_write(self, result: str, seconds: float | None) -> None:
        self.status_write.observe(result, seconds)

    def serving_certificate_loaded(self, cert_file: str) -> None:
        """The serving certificate was (re)loaded from `cert_file`: publish its expiry."""
        try:
            self.serving_cert_expiry.set(not_after(cert_file))
        except (OSError, CertificateError) as e:
            # the TLS context has the new certificate; only its expiry is not known
            log.warning("serving certificate expiry not read", extra={"error": str(e)})
