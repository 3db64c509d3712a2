"""Prometheus metrics of the webhook (served on /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
)


class WebhookMetrics:
    """One set per process; a registry of its own keeps tests independent."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.admission_duration = Histogram(
            "karmadaquota_admission_duration_seconds",
            "Time from receiving an AdmissionReview to answering it (server side).",
            ["operation", "result"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "karmadaquota_admission_decisions_total",
            "Admission decisions by result and reason.",
            ["result", "reason"],
            registry=r,
        )
        self.conflicts = Counter(
            "karmadaquota_status_write_conflicts_total",
            "KarmadaQuota status writes that lost the compare-and-swap and were re-checked.",
            registry=r,
        )
        self.status_writes = Counter(
            "karmadaquota_status_writes_total",
            "KarmadaQuota status writes by result.",
            ["result"],
            registry=r,
        )
        self.status_write_duration = Histogram(
            "karmadaquota_status_write_duration_seconds",
            "Duration of one KarmadaQuota status write (one per changed quota per batch).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "karmadaquota_admission_batch_size",
            "Reviews evaluated together in one per-namespace batch.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.cache_synced = Gauge(
            "karmadaquota_quota_cache_synced",
            "1 once the KarmadaQuota watch cache has listed every quota.",
            registry=r,
        )
        self.cache_quotas = Gauge(
            "karmadaquota_quota_cache_objects", "KarmadaQuotas in the watch cache.", registry=r
        )

    def observe_write(self, result: str, seconds: float) -> None:
        self.status_writes.labels(result).inc()
        self.status_write_duration.observe(seconds)
