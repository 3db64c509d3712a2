"""Prometheus metrics of the controller (served on /metrics next to /healthz).

Label names never collide with the target labels Prometheus attaches (kubernetes_sd
relabelling, ServiceMonitor and PodMonitor add `namespace`, `pod`, `container`, `service`,
`endpoint`, `job`, `instance`) nor with the external label multi-cluster setups put on every
series (`cluster`): a quota's namespace on karmada-apiserver is `quota_namespace`, a member
cluster `member_cluster`. docs/operations.md explains the choice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from karmadaquota.api import KarmadaQuotaStatus, Reservation
from karmadaquota.kube.status_cas import StatusWriteMetrics
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.runtime_metrics import LATENCY_TOP, program_registry

# The labels of every per-quota series (plus `member_cluster` for the per-member ones).
QUOTA_LABELS = ["quota_namespace", "quota", "resource"]

_RECOMPUTE_BUCKETS = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    *LATENCY_TOP,
)


class ControllerMetrics:
    """One set per process; a registry of its own keeps tests independent."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = program_registry(registry)
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
        # the per-quota series: computed from each quota's last outcome when scraped
        self.quotas = QuotaFigures()
        r.register(self.quotas)
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
        self.status_write = StatusWriteMetrics(
            r,
            "KarmadaQuota status writes by this replica, by result.",
            "Duration of one quota status write by this replica, its retries on conflict "
            "included (how long the controller waits on the API server per quota).",
            _RECOMPUTE_BUCKETS,
        )
        self.loop_lag = Histogram(
            "karmadaquota_event_loop_lag_seconds",
            "How late the event loop ran a timer due every 0.5 s: every request's answer and "
            "the Lease's renewals wait that long too (karmadaquota.loop_lag).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.member_up = Gauge(
            "karmadaquota_member_observed",
            "1 while the member cluster's pods are being watched.",
            ["member_cluster"],
            registry=r,
        )
        self.member_pods = Gauge(
            "karmadaquota_member_pods",
            "Non-terminal pods indexed for a member cluster.",
            ["member_cluster"],
            registry=r,
        )
        self.member_claims = Gauge(
            "karmadaquota_member_claims",
            "PersistentVolumeClaims indexed for a member cluster.",
            ["member_cluster"],
            registry=r,
        )
        self.resyncs = Counter(
            "karmadaquota_resyncs_total", "Full relists of bindings and quotas.", registry=r
        )
        self.guard_rebalances = Counter(
            "karmadaquota_guard_rebalances_total",
            "Rounds that changed some member guard of a KarmadaQuota (leader).",
            ["quota_namespace", "quota"],
            registry=r,
        )
        self.guard_writes = Counter(
            "karmadaquota_guard_writes_total",
            "Requests writing member guards: lower, raise, create, delete, mend (a status.used "
            "the member counted short, restored); result ok or error.",
            ["member_cluster", "operation", "result"],
            registry=r,
        )
        self.guard_restores = Counter(
            "karmadaquota_guard_restores_total",
            "Member guards found deleted or changed by another writer (leader's guard watch); "
            "each is put back at once.",
            ["member_cluster", "change"],
            registry=r,
        )
        self.guards_protected = Gauge(
            "karmadaquota_member_guards_protected",
            "1 while a ValidatingAdmissionPolicy installed by the controller refuses other "
            "writers' changes to the member's guards; 0: watched and restored only.",
            ["member_cluster"],
            registry=r,
        )
        self.waiting = Gauge(
            "karmadaquota_waiting_workloads",
            "Workloads refused for quota and waiting for room (leader; all namespaces).",
            registry=r,
        )
        self.wakeups = Counter(
            "karmadaquota_wakeups_total",
            "Waiting workloads woken (woken), found deleted (gone), or not patched (error).",
            ["result"],
            registry=r,
        )
        # spec.cohort: per quota and resource, what it borrows and lends (docs/cohorts.md)
        self.loans = Gauge(
            "karmadaquota_quota_loans",
            "What a KarmadaQuota borrows from (direction borrowed) or lends to (direction lent) "
            "the other quotas of its cohort, summed (base units).",
            ["quota_namespace", "quota", "cohort", "direction", "resource"],
            registry=r,
        )
        self._loans: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        self.queue_length = Gauge(
            "karmadaquota_queue_length",
            "ResourceBindings a KarmadaQuota queued (onExceed: Queue), waiting suspended.",
            ["quota_namespace", "quota"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "karmadaquota_queue_wait_seconds",
            "Time a queued ResourceBinding waited, from its creation to its admission.",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
            registry=r,
        )
        self.queue_admissions = Counter(
            "karmadaquota_queue_admissions_total",
            "Queued ResourceBindings admitted (suspension cleared) by the leader, by reason: "
            "room (its quota has room), quota_refuse_mode (its quota switched to Refuse and "
            "drains its queue), quota_deleted (its quota is gone).",
            ["reason"],
            registry=r,
        )
        self.queue_attempts = Counter(
            "karmadaquota_queue_admission_attempts_total",
            "Admission attempts of queued ResourceBindings by result: admitted, refused (the "
            "webhook refused the charge: it stays queued), conflict, gone, error.",
            ["result"],
            registry=r,
        )
        for reason in ("observed", "disproved"):
            self.released.labels(reason)
        for result in ("ok", "conflict", "notfound", "error"):
            self.status_write.writes.labels(result)
        for result in ("woken", "gone", "error"):
            self.wakeups.labels(result)
        for reason in ("room", "quota_refuse_mode", "quota_deleted"):
            self.queue_admissions.labels(reason)
        for result in ("admitted", "refused", "conflict", "gone", "error"):
            self.queue_attempts.labels(result)

    def set_quota(
        self,
        namespace: str,
        quota: str,
        used: Mapping[str, Quantity],
        hard: Mapping[str, Quantity],
        status: KarmadaQuotaStatus | None = None,
        cohort: str = "",
    ) -> None:
        """Publish a quota's figures (with `status`: reservations and the per-member
        breakdown too); the series it no longer has go with the next scrape. Only what the
        series read is kept, not the status model (its conditions and entries as objects)."""
        detail = None
        if status is not None:
            members = tuple(
                (c.clusterName, c.used, c.observed, c.guard) for c in status.aggregatedStatus
            )
            detail = (tuple(status.reservations), members)
            self._set_loans(namespace, quota, status, cohort)
        self.quotas.latest[(namespace, quota)] = (used, hard, detail)

    def _set_loans(
        self, namespace: str, quota: str, status: KarmadaQuotaStatus, cohort: str
    ) -> None:
        """The quota's loans as series; those it no longer has removed."""
        now: dict[tuple[str, str, str], float] = {}
        for direction, entries in (("borrowed", status.borrowed), ("lent", status.lent)):
            for e in entries:
                for name, raw in e.resources.items():
                    try:
                        value = Quantity.parse(str(raw)).as_float()
                    except QuantityError:
                        continue
                    key = (cohort, direction, name)
                    now[key] = now.get(key, 0.0) + value
        before = self._loans.get((namespace, quota), set())
        for key in before - now.keys():
            with contextlib.suppress(KeyError):
                self.loans.remove(namespace, quota, *key)
        for key, value in now.items():
            self.loans.labels(namespace, quota, *key).set(value)
        if now:
            self._loans[(namespace, quota)] = set(now)
        else:
            self._loans.pop((namespace, quota), None)

    def forget_quota(self, namespace: str, quota: str) -> None:
        for key in self._loans.pop((namespace, quota), set()):
            with contextlib.suppress(KeyError):
                self.loans.remove(namespace, quota, *key)
        self.quotas.latest.pop((namespace, quota), None)
        with contextlib.suppress(KeyError):
            self.guard_rebalances.remove(namespace, quota)


# the per-quota series, each named once here
QUOTA_USED = "karmadaquota_quota_used"
QUOTA_HARD = "karmadaquota_quota_hard"
QUOTA_RESERVED = "karmadaquota_quota_reserved"
QUOTA_RESERVATIONS = "karmadaquota_quota_reservations"
MEMBER_USED = "karmadaquota_quota_member_used"
MEMBER_OBSERVED = "karmadaquota_quota_member_observed"
MEMBER_GUARD_HARD = "karmadaquota_quota_member_guard_hard"
# the per-member ones, in the order of a `Member`'s lists
MEMBER_SERIES = (MEMBER_USED, MEMBER_OBSERVED, MEMBER_GUARD_HARD)

# name -> (help, labels) of every per-quota series
_PER_MEMBER = [*QUOTA_LABELS, "member_cluster"]
QUOTA_SERIES: dict[str, tuple[str, list[str]]] = {
    QUOTA_USED: (
        "Usage of a KarmadaQuota resource, as last computed (base units).",
        QUOTA_LABELS,
    ),
    QUOTA_HARD: (
        "Hard limit of a KarmadaQuota resource (base units).",
        QUOTA_LABELS,
    ),
    QUOTA_RESERVED: (
        "Usage reserved by admitted bindings the controller has not counted yet (base units).",
        QUOTA_LABELS,
    ),
    QUOTA_RESERVATIONS: (
        "Reservations pending in a KarmadaQuota's status, as last computed.",
        ["quota_namespace", "quota"],
    ),
    MEMBER_USED: (
        "Usage of a KarmadaQuota resource placed in one member cluster by Karmada.",
        _PER_MEMBER,
    ),
    MEMBER_OBSERVED: (
        "Usage of a KarmadaQuota resource summed from the pods seen in one member cluster.",
        _PER_MEMBER,
    ),
    MEMBER_GUARD_HARD: (
        "The hard of a KarmadaQuota's guard ResourceQuota in one member cluster: its usage "
        "plus its share of the headroom (memberEnforcement ResourceQuota).",
        _PER_MEMBER,
    ),
}

# per member: name, used, observed, guard (as the status's aggregatedStatus[] has them)
Raw = Mapping[str, str | int]
Member = tuple[str, Raw, Raw | None, Raw | None]
# used, hard, and (reservations, members) when the status was given
Figures = tuple[
    Mapping[str, Quantity],
    Mapping[str, Quantity],
    tuple[tuple[Reservation, ...], tuple[Member, ...]] | None,
]


class QuotaFigures(Collector):
    """Every quota's series, made when scraped from what its last outcome said (its figures,
    not its status objects): a labelled Gauge child per quota, resource and member cost
    ~0.5 KB and a label lookup per recompute each — 180,000 of them at 5,000 quotas over 100
    clusters, a fifth of a cold start's CPU.

    A family's samples are made as the exposition reads them, one at a time (`_Lazy`), not
    held in a list: 250,000 samples at 5,000 quotas over 100 clusters held at once, with their
    text, were a scrape's ~140 MiB, the controller's peak (docs/benchmarks.md, issue 37)."""

    def __init__(self) -> None:
        self.latest: dict[tuple[str, str], Figures] = {}

    def describe(self) -> Iterator[Metric]:
        for name, (doc, labels) in QUOTA_SERIES.items():
            yield GaugeMetricFamily(name, doc, labels=labels)

    def collect(self) -> Iterator[Metric]:
        quotas = list(self.latest.items())  # a scrape's moment: the dict moves meanwhile
        for name, (doc, labels) in QUOTA_SERIES.items():
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.samples = _Lazy(name, labels, quotas)  # type: ignore[assignment]
            yield family


class _Lazy:
    """One family's samples over the quotas of a scrape, made each time they are iterated."""

    def __init__(
        self, name: str, labels: list[str], quotas: list[tuple[tuple[str, str], Figures]]
    ) -> None:
        self.name, self.labels, self.quotas = name, labels, quotas

    def __iter__(self) -> Iterator[Sample]:
        for (namespace, quota), figures in self.quotas:
            for values, value in quota_series(self.name, namespace, quota, *figures):
                yield Sample(self.name, dict(zip(self.labels, values, strict=True)), value)


def quota_series(
    series: str,
    namespace: str,
    quota: str,
    used: Mapping[str, Quantity],
    hard: Mapping[str, Quantity],
    detail: tuple[tuple[Reservation, ...], tuple[Member, ...]] | None,
) -> Iterator[tuple[list[str], float]]:
    """(label values, value) of one quota's figures in `series` (only its own are computed:
    each family is made in a pass of its own)."""
    if series == QUOTA_HARD:
        for name in hard:
            yield [namespace, quota, name], hard[name].as_float()
    elif series == QUOTA_USED:
        for name in hard:
            q = used.get(name)
            yield [namespace, quota, name], q.as_float() if q else 0.0
    if detail is None:
        return
    reservations, members = detail
    if series == QUOTA_RESERVATIONS:
        yield [namespace, quota], len(reservations)
    elif series == QUOTA_RESERVED:
        reserved: dict[str, float] = dict.fromkeys(hard, 0.0)
        for r in reservations:
            for name, value in _parsed(r.reserved).items():
                reserved[name] = reserved.get(name, 0.0) + value
        for name, value in reserved.items():
            yield [namespace, quota, name], value
    elif series in MEMBER_SERIES:
        which = MEMBER_SERIES.index(series)
        for cluster, *lists in members:
            for name, value in _parsed(lists[which] or {}).items():
                yield [namespace, quota, name, cluster], value


def _parsed(raw: Mapping[str, str | int]) -> dict[str, float]:
    """A status resource list as gauge values; unreadable entries are skipped, not zeroed."""
    out = {}
    for name, value in raw.items():
        try:
            out[name] = Quantity.parse(str(value)).as_float()
        except QuantityError:
            continue
    return out
