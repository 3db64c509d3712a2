"""Admit or deny a binding's charge against a namespace's quotas — pure, shared, deterministic.

This is Kubernetes' quota admission check with reservations: a request is
admitted only if, for every quota whose scopes match the binding, used + reserved + delta ≤ hard
for each resource that quota tracks. The batcher calls it against a running copy of the quotas;
the controller uses the same `QuotaView` arithmetic when it recomputes usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from karmadaquota import cohorts, resources, scopes
from karmadaquota.api import KarmadaQuota
from karmadaquota.charge import Charge
from karmadaquota.pod_template import LIMITS_PREFIX
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import Expression

REASON_EXCEEDED = "QuotaExceeded"
# a refusal by a quota of a cohort: `limited` is its hard with its loans (hard + borrowed −
# lent), and the cohort may lend it more for a waiting workload
COHORT_NOTE = (
    " (with its loans in cohort {0}; cohort {0} has no room to lend it yet: the workload "
    "waits, and is woken if the cohort lends it room)"
)
REASON_FORBIDDEN = "Forbidden"
# quota names that no pod consumes: Kubernetes' object counts besides count/<resource>.<group>,
# and storage (claimed by PersistentVolumeClaims)
NOT_PODS = frozenset(
    {
        "services",
        "services.loadbalancers",
        "services.nodeports",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "resourcequotas",
        "requests.storage",
    }
)


@dataclass(frozen=True, slots=True)
class QuotaView:
    """One quota as the evaluator sees it: limits, scopes, and what is already spoken for."""

    name: str
    hard: ResourceList
    used: ResourceList
    reserved: ResourceList
    scopes: tuple[Expression, ...] = ()
    # memberEnforcement ResourceQuota: every member counts the pods it runs (charge.uncounted)
    guarded: bool = False
    # spec.failover.evictedReplicas Release: charged `Charge.if_released` where there is one
    releases_evicted: bool = True
    # spec.cohort: `hard` is the effective hard, hard + borrowed − lent (karmadaquota.cohorts)
    cohort: str = ""

    @classmethod
    def of(cls, quota: KarmadaQuota) -> QuotaView:
        """Parse a quota; every pending charge holds, expired or not (an expiry only makes it
        due for the controller's orphan audit: a clock alone never frees quota, so replicas
        whose clocks disagree still count each other's charges)."""
        reserved = resources.total(
            resources.parse_resource_list(r.reserved, f"status.reservations[{i}].reserved")
            for i, r in enumerate(quota.status.reservations)
        )
        hard = resources.parse_resource_list(quota.spec.hard, "spec.hard")
        return cls(
            name=quota.metadata.name,
            hard=cohorts.effective_hard(quota, hard),
            used=resources.parse_resource_list(quota.status.used, "status.used"),
            reserved=reserved,
            scopes=scopes.expressions(quota.spec),
            guarded=quota.spec.guarded,
            releases_evicted=quota.spec.releases_evicted,
            cohort=quota.spec.cohort,
        )

    def with_reserved(self, more: ResourceList) -> QuotaView:
        """The same quota after an admitted delta (the batcher's running copy)."""
        return replace(self, reserved=resources.add(self.reserved, more))


@dataclass(frozen=True, slots=True)
class LimitedResource:
    """Kubernetes' ResourceQuotaConfiguration.limitedResources entry, for resourcebindings."""

    match_contains: tuple[str, ...] = ()
    match_scopes: tuple[Expression, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    message: str = ""
    reason: str = ""
    # quota name -> the delta to reserve in it (only quotas that the delta actually touches)
    charges: Mapping[str, ResourceList] = field(default_factory=dict)
    # the quota that refused (QuotaExceeded): where the refused workload waits for room
    quota: str = ""


ALLOW = Decision(True)


def delta(new: Charge, old: Charge | None) -> ResourceList:
    """What admission charges: all of a create, the positive part of an update's change."""
    if old is None:
        return resources.remove_zeros(new.total)
    return resources.remove_zeros(resources.positive_part(resources.subtract(new.total, old.total)))


def _as_seen_by(q: QuotaView, new: Charge, old: Charge | None) -> tuple[Charge, Charge | None]:
    """The charges of an admission as quota `q` counts them: without the evicted replicas of a
    cluster that is not Ready when `q` releases them (karmadaquota.evictions)."""
    return _released(new, old) if q.releases_evicted else (new, old)


def _released(new: Charge, old: Charge | None) -> tuple[Charge, Charge | None]:
    return new.if_released or new, None if old is None else old.if_released or old


def charges_nothing(new: Charge, old: Charge | None) -> bool:
    """An UPDATE that grows nothing, stays in the same scopes and escapes no charge it did not
    before: admission has nothing to do.

    A binding whose scope traits change (its priority class, or requests added or removed so
    that BestEffort flips) enters quotas it was not charged in before; there it costs all it
    uses, not the difference (Kubernetes can subtract the old usage everywhere only because a
    pod's priority class and QoS class cannot change).
    """
    return (
        old is not None
        and new.traits == old.traits
        and new.uncounted == old.uncounted  # a change of what it escapes is checked
        and not delta(new, old)
    )


def _bare(name: str) -> str:
    """`requests.cpu` and `cpu` both name the cpu request."""
    return resources.canonical_name(name).removeprefix(resources.REQUESTS_PREFIX)


def evaluate(
    quotas: Sequence[QuotaView],
    new: Charge,
    old: Charge | None = None,
    limited: Sequence[LimitedResource] = (),
) -> Decision:
    """Admit or deny `new` (with `old` on UPDATE) against every quota of its namespace."""
    if new.uncounted and (old is None or new.uncounted != old.uncounted):
        denial = _check_uncounted(quotas, new)
        if denial is not None:
            return denial
    # the view of a quota that releases evicted replicas, only where it differs (a failover)
    released = (
        _released(new, old)
        if new.if_released is not None or (old is not None and old.if_released is not None)
        else None
    )
    if charges_nothing(new, old) and (released is None or charges_nothing(*released)):
        return ALLOW  # admission never releases, never blocks a change that grows nothing
    change = delta(new, old)
    if released is not None:
        change = resources.maximum(change, delta(*released))
    matching = sorted(
        (q for q in quotas if scopes.matches(q.scopes, new.traits)), key=lambda q: q.name
    )
    denial = _check_limited(limited, matching, change, new)
    if denial is not None:
        return denial
    charges: dict[str, ResourceList] = {}
    for q in matching:
        entering = old is not None and not scopes.matches(q.scopes, old.traits)
        seen_new, seen_old = _as_seen_by(q, new, old)
        tracked = resources.mask(
            delta(seen_new, None) if entering else delta(seen_new, seen_old), q.hard.keys()
        )
        missing = sorted(
            n
            for n in q.hard
            if _bare(n) in new.missing_requests
            or (n.removeprefix(LIMITS_PREFIX) in new.missing_limits and n.startswith(LIMITS_PREFIX))
        )
        if missing:
            return Decision(
                False,
                f"failed quota: {q.name}: must specify {','.join(missing)}",
                REASON_FORBIDDEN,
            )
        if not tracked:
            continue
        unknown = sorted(n for n in tracked if n not in q.used)
        if unknown:
            return Decision(
                False,
                f"status unknown for quota: {q.name}, resources: {','.join(unknown)}",
                REASON_FORBIDDEN,
            )
        # Only the names this request charges are compared (Kubernetes masks the new usage the
        # same way): a name already over hard must not block a request that does not charge it.
        in_use = resources.add(
            resources.mask(q.used, tracked.keys()), resources.mask(q.reserved, tracked.keys())
        )
        ok, exceeded = resources.less_or_equal(resources.add(in_use, tracked), q.hard)
        if not ok:
            fmt = resources.format_pairs
            return Decision(
                False,
                f"exceeded quota: {q.name}, requested: {fmt(tracked, exceeded)}, "
                f"used: {fmt(in_use, exceeded)}, limited: {fmt(q.hard, exceeded)}"
                + (f"{COHORT_NOTE.format(q.cohort)}" if q.cohort else ""),
                REASON_EXCEEDED,
                quota=q.name,
            )
        charges[q.name] = tracked
    return Decision(True, charges=charges)


def runs(name: str) -> bool:
    """A quota resource that what runs consumes (pods, count/pods, compute, extended
    resources), unlike an object count (`count/<resource>.<group>`, `services`, ...): what
    `Charge.uncounted` may escape."""
    canonical = resources.canonical_name(name)
    if canonical == resources.COUNT_PODS:
        return True
    return not canonical.startswith(resources.COUNT_PREFIX) and canonical not in NOT_PODS


def _check_uncounted(quotas: Sequence[QuotaView], new: Charge) -> Decision | None:
    """A binding that may run what no charge counts is refused by every matching quota that
    tracks what runs, unless the members enforce it (memberEnforcement ResourceQuota: each
    member counts the pods it runs) — as Kubernetes refuses a pod without the requests a quota
    needs."""
    for q in sorted(quotas, key=lambda q: q.name):
        if q.guarded or not scopes.matches(q.scopes, new.traits):
            continue
        tracked = sorted(n for n in q.hard if runs(n))
        if tracked:
            return Decision(
                False,
                f"failed quota: {q.name}: cannot charge {'; '.join(new.uncounted)} (it tracks "
                f"{','.join(tracked)}) while the quota opts out of member guards "
                "(memberEnforcement: None); set memberEnforcement: ResourceQuota, the default, so "
                "that every member cluster counts the pods it runs",
                REASON_FORBIDDEN,
            )
    return None


def _check_limited(
    limited: Sequence[LimitedResource],
    matching: Sequence[QuotaView],
    change: ResourceList,
    new: Charge,
) -> Decision | None:
    """limitedResources: some consumption is allowed only where a covering quota exists.

    As Kubernetes does, every uncovered resource name (then every uncovered scope) is listed.
    """
    uncovered: set[str] = set()
    for lim in limited:
        for name in change:
            if any(m in name for m in lim.match_contains) and not any(
                name in q.hard for q in matching
            ):
                uncovered.add(name)
    if uncovered:
        return Decision(
            False,
            f"insufficient quota to consume: {','.join(sorted(uncovered))}",
            REASON_FORBIDDEN,
        )
    covered_scopes = {e.scope for q in matching for e in q.scopes}
    uncovered_scopes: list[Expression] = []
    for lim in limited:
        for expr in lim.match_scopes:
            if (
                scopes.matches((expr,), new.traits)
                and expr.scope not in covered_scopes
                and expr not in uncovered_scopes
            ):
                uncovered_scopes.append(expr)
    if uncovered_scopes:
        listed = " ".join(
            f"{{{e.scope} {e.operator} [{' '.join(sorted(e.values))}]}}" for e in uncovered_scopes
        )
        return Decision(
            False, f"insufficient quota to match these scopes: [{listed}]", REASON_FORBIDDEN
        )
    return None
