"""Prometheus metrics of the controller (served on /metrics next to /healthz)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from karmadaquota.quantity import Quantity

_RECOMPUTE_BUCKETS = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
)


class ControllerMetrics:
    """One set per process; a registry of its own keeps tests independent."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.recompute_duration = Histogram(
            "karmadaquota_recompute_duration_seconds",
            "Time to recompute one quota's status from scratch (no I/O).",
            buckets=_RECOMPUTE_BUCKETS,
            registry=r,
        )
        self.bindings_indexed = Gauge(
            "karmadaquota_bindings_indexed",
            "ResourceBindings in the controller's index.",
            registry=r,
        )
        self.quota_used = Gauge(
            "karmadaquota_quota_used",
            "Usage of a KarmadaQuota resource, as last computed (base units).",
            ["namespace", "quota", "resource"],
            registry=r,
        )
        self.quota_hard = Gauge(
            "karmadaquota_quota_hard",
            "Hard limit of a KarmadaQuota resource (base units).",
            ["namespace", "quota", "resource"],
            registry=r,
        )
        self.leader = Gauge(
            "karmadaquota_leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self.synced = Gauge(
            "karmadaquota_controller_synced",
            "1 once bindings and quotas have been listed in full.",
            registry=r,
        )
        self.released = Counter(
            "karmadaquota_reservations_released_total",
            "Reservations dropped from quota status, by reason (observed, expired).",
            ["reason"],
            registry=r,
        )
        self.status_writes = Counter(
            "karmadaquota_status_writes_total",
            "KarmadaQuota status writes by this replica, by result.",
            ["result"],
            registry=r,
        )
        self.member_up = Gauge(
            "karmadaquota_member_observed",
            "1 while the member cluster's pods are being watched.",
            ["cluster"],
            registry=r,
        )
        self.member_pods = Gauge(
            "karmadaquota_member_pods",
            "Non-terminal pods indexed for a member cluster.",
            ["cluster"],
            registry=r,
        )
        self.resyncs = Counter(
            "karmadaquota_resyncs_total", "Full relists of bindings and quotas.", registry=r
        )
        self._quota_labels: dict[tuple[str, str], set[str]] = {}
        for reason in ("observed", "expired"):
            self.released.labels(reason)
        for result in ("ok", "conflict", "notfound", "error"):
            self.status_writes.labels(result)

    def set_quota(
        self,
        namespace: str,
        quota: str,
        used: Mapping[str, Quantity],
        hard: Mapping[str, Quantity],
    ) -> None:
        """Publish a quota's figures, dropping resources it no longer tracks."""
        key = (namespace, quota)
        names = set(hard)
        for stale in self._quota_labels.get(key, set()) - names:
            self.quota_used.remove(namespace, quota, stale)
            self.quota_hard.remove(namespace, quota, stale)
        for name in names:
            self.quota_hard.labels(namespace, quota, name).set(hard[name].as_float())
            q = used.get(name)
            self.quota_used.labels(namespace, quota, name).set(q.as_float() if q else 0.0)
        self._quota_labels[key] = names

    def forget_quota(self, namespace: str, quota: str) -> None:
        for name in self._quota_labels.pop((namespace, quota), set()):
            self.quota_used.remove(namespace, quota, name)
            self.quota_hard.remove(namespace, quota, name)
