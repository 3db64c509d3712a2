"""A quota's desired status, recomputed from scratch (pure).

From the binding index, the member pod and claim tables and the quota as last read:

- `used`: Σ charge of the namespace's bindings whose traits match the quota's scopes, masked to
  the quota's hard names, every name present (zero when unused) — the webhook reads a missing
  name as "status unknown" — plus, per observed member, what its pods and claims use past
  that: every terminating pod and the rest beyond the placement, the claims it holds beyond
  the placement (`_beyond`; docs/charging.md).
- `aggregatedStatus[]`: per cluster (every known member, plus any cluster a binding is placed
  in), `used` from the bindings' placement and `observed` from the member's own pods and
  claims.
- `reservations`: those of the object as read, minus the ones the index now accounts for (the
  binding is indexed at the reservation's generation or later, or was seen deleted, or the
  orphan audit proved it absent), those the orphan audit disproved (an UPDATE admitted but
  never stored: `NamespaceSnapshot.disproved`) and those naming no possible binding. Both come
  out of the same snapshot as `used`, so the write that drops a reservation also carries the
  binding's usage: used + reserved never dips below the truth. An expired reservation is kept:
  expiry only makes it due for the orphan audit, a clock alone never releases quota.
- `waiting`: as read (the webhook keeps it), minus workloads whose template is gone and
  refused creates whose binding exists as another object (`waiting.settled`).
- `hard`, `summary`, `conditions` (Ready, Valid, MemberObserved), `observedGeneration`.

A quota failing `validation.validate_spec` is not charged: Valid=False with the messages,
Ready=False, no `used` (so the webhook denies what it would charge: fail closed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from karmadaquota import cohorts, resources, scopes, validation, waiting
from karmadaquota.api import (
    ENFORCED_LABEL,
    ENFORCED_VALUE,
    ClusterUsage,
    Condition,
    KarmadaQuota,
    KarmadaQuotaStatus,
    Reservation,
    WaitingWorkload,
)
from karmadaquota.controller import guards as gd
from karmadaquota.controller import status as st
from karmadaquota.controller.index import IndexedBinding, Sums, aggregate
from karmadaquota.controller.pods import Observed
from karmadaquota.pending import EntryKey, entry_key, possible_binding, prune_reservations
from karmadaquota.quantity import MAX_BASE_UNITS, NANO, Format, Quantity, QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import Expression
from karmadaquota.times import format_time

# a stale charge is looked at this long after the admission window: entries of one key (one
# expiry second) were admitted within that second
STALE_MARGIN = 1.0

REASON_CALCULATED = "Calculated"
REASON_EVICTED_CHARGED = "EvictedReplicasCharged"
REASON_INVALID = "InvalidSpec"
REASON_VALID = "Valid"
REASON_NAMESPACE_LABELED = "NamespaceLabeled"
REASON_NAMESPACE_NOT_LABELED = "NamespaceNotLabeled"
REASON_ALL_OBSERVED = "AllMembersObserved"
REASON_UNREACHABLE = "MemberUnreachable"
REASON_SYNCING = "MemberSyncing"
REASON_DISABLED = "MemberWatchDisabled"
REASON_INVALID_BINDINGS = "InvalidBindings"
REASON_OBSERVED_EXCEEDS_PLACED = "ObservedExceedsPlaced"
REASON_WITHIN_PLACEMENT = "WithinPlacement"
REASON_GUARDED = "EveryMemberGuarded"
REASON_NOT_GUARDED = "MemberNotGuarded"
REASON_OPTED_OUT = "MemberEnforcementNone"


class MemberView(Protocol):
    """What recompute needs of one member cluster's pod watch."""

    @property
    def name(self) -> str: ...

    @property
    def synced(self) -> bool:
        """At least one full list succeeded (figures exist, possibly stale)."""
        ...

    @property
    def error(self) -> str:
        """Why the member is currently not observed ("" when it is)."""
        ...

    def observed(
        self, namespace: str, names: Collection[str], exprs: tuple[Expression, ...], now: float
    ) -> Observed:
        """What the member's pods in `namespace` use at `now` (seconds since the epoch)."""
        ...


# (borrowed: lender -> amounts, lent: borrower -> amounts, of borrowed what its guards use)
Loans = tuple[
    Mapping[str, cohorts.Amounts], Mapping[str, cohorts.Amounts], Mapping[str, cohorts.Amounts]
]


@dataclass(frozen=True)
class NamespaceSnapshot:
    """Everything a namespace's recompute reads, as one snapshot."""

    bindings: Mapping[str, IndexedBinding]
    deleted: Callable[[str], bool] = lambda uid: False
    members: Sequence[MemberView] = ()
    member_watch: bool = True
    # a waiting workload (by `waiting.key`) whose resource template no longer exists
    gone: Callable[[str], bool] = lambda key: False
    # the namespace carries the enforcement label (None: not known here, e.g. not the leader)
    enforced: bool | None = None
    # (quota name, member) -> the hard of that member's guard as last confirmed (None: unknown)
    guards: Callable[[str, str], Mapping[str, str] | None] = lambda quota, member: None
    # quota name -> member -> why it holds no guard as wanted (None: guards not kept here)
    guard_problems: Callable[[str], Mapping[str, str]] | None = None
    # quota name -> member -> how its guard reaches it when not written there directly
    guard_routes: Callable[[str], Mapping[str, str]] = lambda quota: {}
    # where a pending charge's binding is looked up (None: `bindings`); a cluster quota's
    # pending charges may come from namespaces it no longer selects
    lookup: Mapping[str, IndexedBinding] | None = None
    # quota name -> entries the orphan audit disproved (an UPDATE admitted, never stored at its
    # generation): up to that many entries of each key are released by this recompute's write
    disproved: Callable[[str], Mapping[EntryKey, int]] = lambda quota: {}
    # Σ of `bindings` for (names, scopes, released clusters) when the caller has it in parts
    # (a cluster quota: per namespace, cached); None: aggregated here from `bindings`
    sums: Callable[[Collection[str], tuple[Expression, ...], frozenset[str]], Sums] | None = None
    # member clusters Karmada reports not Ready past the grace (karmadaquota.evictions): their
    # evicted replicas are not charged by a quota that releases them, nor their last figures
    released: frozenset[str] = frozenset()
    # cluster -> when it is released (not Ready, within the grace; seconds since the epoch)
    releasing: Mapping[str, float] = field(default_factory=dict)
    # the bindings with graceful eviction tasks (`BindingIndex.evicting`)
    evicting: Sequence[IndexedBinding] = ()
    # spec.cohort: a quota (as being written) and its usage just computed -> what it is to
    # record as (borrowed, lent, usable); None: its loans stay as they are (karmadaquota.cohorts)
    loans: Callable[[KarmadaQuota, ResourceList], Loans | None] = lambda quota, used: None


@dataclass(frozen=True)
class Outcome:
    status: KarmadaQuotaStatus
    used: ResourceList
    hard: ResourceList
    released: Mapping[str, int] = field(default_factory=dict)
    # earliest expirationTime still to come among the reservations kept (the orphan audit
    # looks at them again then; nothing is released by it)
    next_expiry: datetime | None = None
    # memberEnforcement ResourceQuota: what the share policy reads (reachability and the
    # guards' current hard are the I/O shell's to fill in); None otherwise
    guard: gd.GuardInputs | None = None
    # spec.cohort, for the loans' metrics
    cohort: str = ""


_MAX_NANOS = MAX_BASE_UNITS * NANO


def _still_waiting(
    entries: Sequence[WaitingWorkload], inputs: NamespaceSnapshot
) -> list[WaitingWorkload]:
    """The waiting list as read, minus deleted templates and creates that lost to another."""
    if not entries:
        return []
    holders: dict[str, set[str]] = {}
    for uid, entry in inputs.bindings.items():
        holders.setdefault(entry.name, set()).add(uid)
    return [
        w
        for w in entries
        if not inputs.gone(waiting.key(w.template)) and not waiting.settled(w, holders)
    ]


def queue_length(quota: str, bindings: Mapping[str, IndexedBinding]) -> int:
    """How many of the namespace's bindings this quota queued (status.queued)."""
    return sum(1 for b in bindings.values() if b.queue is not None and b.queue.quota == quota)


def _quantities(nanos: Mapping[str, int], hard: Mapping[str, Quantity]) -> ResourceList:
    """Sums in the format of the hard limit they are compared with (2Gi stays binary).

    A sum beyond the largest quantity the API (and our parser) accepts — only bindings that
    never passed admission can reach it — saturates there: still at least any `hard`, so the
    webhook keeps denying new charges in plain words instead of failing to read `used`.
    """
    return {
        n: Quantity(min(v, _MAX_NANOS), hard[n].format if n in hard else Format.DECIMAL_SI)
        for n, v in nanos.items()
    }


def _in_format(rl: Mapping[str, Quantity], hard: Mapping[str, Quantity]) -> ResourceList:
    return {n: Quantity(q.nanos, hard[n].format) if n in hard else q for n, q in rl.items()}


# members a MemberObserved message names, the rest counted: every quota's status carries it,
# and 97 Pull-mode clusters named with their problem were 13 KB of each of 5,000 statuses
NAMED_MEMBERS = 5


def _more(count: int) -> str:
    return f" (and {count - NAMED_MEMBERS} more)" if count > NAMED_MEMBERS else ""


def _member_condition(inputs: NamespaceSnapshot) -> Condition:
    if not inputs.member_watch:
        return Condition(
            type=st.COND_MEMBER_OBSERVED,
            status="Unknown",
            reason=REASON_DISABLED,
            message="the controller runs with --no-member-watch",
        )
    members = sorted(inputs.members, key=lambda m: m.name)
    failing = [m for m in members if m.error]
    if failing:
        stale = "; ".join(
            f"{m.name}: {m.error}" + ("" if m.synced else " (never observed)")
            for m in failing[:NAMED_MEMBERS]
        )
        return Condition(
            type=st.COND_MEMBER_OBSERVED,
            status="False",
            reason=REASON_UNREACHABLE,
            message=f"observed usage is stale for {stale}{_more(len(failing))}",
        )
    syncing = [m.name for m in members if not m.synced]
    if syncing:
        return Condition(
            type=st.COND_MEMBER_OBSERVED,
            status="Unknown",
            reason=REASON_SYNCING,
            message="listing pods and claims in "
            f"{', '.join(syncing[:NAMED_MEMBERS])}{_more(len(syncing))}",
        )
    return Condition(
        type=st.COND_MEMBER_OBSERVED,
        status="True",
        reason=REASON_ALL_OBSERVED,
        message=f"pods and claims observed in {len(members)} member cluster(s)",
    )


def recompute(quota: KarmadaQuota, inputs: NamespaceSnapshot, now: datetime) -> Outcome:
    """The status the quota should have now (see the module docstring)."""
    current = quota.status
    generation = quota.metadata.generation
    lookup = inputs.bindings if inputs.lookup is None else inputs.lookup
    kept, released, next_expiry = prune_reservations(
        current.reservations, lookup, inputs.deleted, now, inputs.disproved(quota.metadata.name)
    )
    still_waiting = _still_waiting(current.waiting, inputs)
    queued = queue_length(quota.metadata.name, inputs.bindings)
    errors = validation.validate_spec(quota.spec)
    hard: ResourceList = {}
    if not errors:
        try:
            hard = resources.parse_resource_list(quota.spec.hard, "spec.hard")
        except QuantityError as e:  # validate_spec reports it; belt and braces
            errors = [str(e)]
    if errors:
        wanted = [
            _condition(st.COND_READY, False, REASON_INVALID, _NOT_ENFORCED),
            _condition(st.COND_VALID, False, REASON_INVALID, "; ".join(errors)),
        ]
        new_status = KarmadaQuotaStatus(
            hard={},
            used={},
            aggregatedStatus=[],
            reservations=kept,
            waiting=still_waiting,
            queued=queued,
            borrowed=current.borrowed,
            lent=current.lent,
            loans=current.loans,
            summary="invalid spec: see the Valid condition",
            conditions=st.merge_conditions(current.conditions, _at(wanted, generation), now),
            observedGeneration=generation,
        )
        return Outcome(new_status, {}, {}, released, next_expiry)

    exprs = scopes.expressions(quota.spec)
    away = inputs.released if quota.spec.releases_evicted else frozenset()
    if inputs.sums is not None:
        totals = inputs.sums(hard.keys(), exprs, away)
    else:
        totals = aggregate(inputs.bindings.values(), hard.keys(), exprs, away)
    used = _quantities(totals.used, hard)
    zero_cluster = dict.fromkeys(totals.used, 0)

    @functools.cache
    def strict() -> Sums:
        """The sums with every eviction charged (only where a member is released)."""
        if inputs.sums is not None:
            return inputs.sums(hard.keys(), exprs, frozenset())
        return aggregate(inputs.bindings.values(), hard.keys(), exprs)

    members = {m.name: m for m in inputs.members}
    guarded = quota.spec.guarded
    # a member is listed when something is placed there, its pods are observed (its figures,
    # zero included, are news) or the quota guards it; an entry of zeros for a member nothing
    # is known of (Pull mode, unreachable before its first list) would only make every status
    # as long as the fleet
    shown = (
        members if guarded else [n for n, m in members.items() if inputs.member_watch and m.synced]
    )
    clusters = sorted(set(shown) | set(totals.per_cluster))
    aggregated: list[ClusterUsage] = []
    held: dict[str, dict[str, int]] = {}  # guarded: per member, max(placed, observed)
    seen_by: dict[str, dict[str, int]] = {}  # guarded, observed members: what their pods hold
    beyond: dict[str, dict[str, int]] = {}  # per observed member: what runs past placement
    for name in clusters:
        placed = totals.per_cluster.get(name, zero_cluster)
        cluster_used = _quantities(placed, hard)
        observed: dict[str, str] | None = None
        member = members.get(name)
        seen: ResourceList = {}
        if inputs.member_watch and member is not None and member.synced:
            pods = member.observed(quota.metadata.namespace, hard.keys(), exprs, now.timestamp())
            seen = pods.running
            observed = resources.format_resource_list(_in_format(seen, hard))
            # a released member's pods of its evicted replicas are no longer counted: beyond
            # what Karmada placed there before the eviction (docs/charging.md, Failover)
            before = strict().per_cluster.get(name, zero_cluster) if name in away else placed
            beyond[name] = _beyond(before, pods.running, pods.terminating, hard)
        if guarded:
            held[name] = {n: max(placed.get(n, 0), seen[n].nanos if n in seen else 0) for n in hard}
            if observed is not None:
                seen_by[name] = {n: seen[n].nanos if n in seen else 0 for n in hard}
            beyond.setdefault(name, dict.fromkeys(hard, 0))
        guard = inputs.guards(quota.metadata.name, name) if guarded else None
        aggregated.append(
            ClusterUsage(
                clusterName=name,
                used=resources.format_resource_list(cluster_used),
                observed=observed,
                guard=dict(guard) if guard is not None else None,
            )
        )
    guard_inputs: gd.GuardInputs | None = None
    if beyond:
        used = _quantities(
            {n: totals.used.get(n, 0) + sum(b.get(n, 0) for b in beyond.values()) for n in hard},
            hard,
        )
    # the loans, planned with the usage just computed (the status as read may lag it)
    loans = inputs.loans(quota, used)
    if loans is None:
        borrowed, lent = current.borrowed, current.lent
        usable: Mapping[str, cohorts.Amounts] = cohorts.loans_of(borrowed)
    else:
        borrowed, lent = cohorts.loan_entries(loans[0], hard), cohorts.loan_entries(loans[1], hard)
        usable = loans[2]
    # what its guards may hold: hard − Σ lent + what of Σ borrowed the lenders' guards gave up
    may_use = cohorts.effective(hard, usable, cohorts.loans_of(lent))
    if guarded:
        placed_sum = {n: sum(p.get(n, 0) for p in totals.per_cluster.values()) for n in totals.used}
        guard_inputs = _guard_inputs(
            quota, totals.used, placed_sum, held, seen_by, beyond, kept, may_use, away
        )
    wanted = [
        _condition(st.COND_READY, True, REASON_CALCULATED, _CALCULATED),
        _condition(st.COND_VALID, True, REASON_VALID, ""),
        _member_condition(inputs),
    ]
    conditions = current.conditions
    if inputs.enforced is not None:
        wanted.append(_enforced_condition(inputs.enforced))
    invalid = _invalid_bindings_condition(inputs.bindings)
    if invalid is not None:
        wanted.append(invalid)
    else:
        conditions = [c for c in conditions if c.type != st.COND_BINDINGS_CHARGED]
    if beyond:
        wanted.append(_out_of_band_condition(beyond, hard))
    else:
        conditions = [c for c in conditions if c.type != st.COND_OUT_OF_BAND]
    evicted = _eviction_condition(quota, inputs, exprs, away)
    if evicted is not None:
        wanted.append(evicted)
    else:
        conditions = [c for c in conditions if c.type != st.COND_EVICTION_CHARGED]
    if guarded and inputs.guard_problems is not None:
        wanted.append(
            _guarded_condition(
                inputs.guard_problems(quota.metadata.name), inputs.guard_routes(quota.metadata.name)
            )
        )
    elif not guarded:
        wanted.append(_unguarded_condition())
    new_status = KarmadaQuotaStatus(
        hard=resources.format_resource_list(hard),
        used=resources.format_resource_list(used),
        aggregatedStatus=aggregated,
        reservations=kept,
        waiting=still_waiting,
        queued=queued,
        borrowed=borrowed,
        lent=lent,
        loans=cohorts.summary(borrowed, lent, hard),
        summary=st.summary(used, hard),
        conditions=st.merge_conditions(conditions, _at(wanted, generation), now),
        observedGeneration=generation,
    )
    return Outcome(new_status, used, hard, released, next_expiry, guard_inputs, quota.spec.cohort)


def _beyond(
    placed: Mapping[str, int],
    running: ResourceList,
    terminating: ResourceList,
    hard: Mapping[str, Quantity],
) -> dict[str, int]:
    """Per name, what one member's pods use past what Karmada placed there, counted in `used`
    on top of the bindings' charges: every terminating pod (no binding's charge covers it: a
    scale-down, a rollout's old pods, a deleted workload's), and the pods that are not
    terminating beyond the placement (created around Karmada, or kept by the member).

    Claims (`controller.claims`) are in `running`, never in `terminating`: the claims a member
    holds beyond what Karmada placed there count (retained by a scale-down or a deleted
    StatefulSet, made around Karmada), those within it are the placed replicas' own claims and
    count once, in the charge."""
    out: dict[str, int] = {}
    for n in hard:
        going = terminating[n].nanos if n in terminating else 0
        live = (running[n].nanos if n in running else 0) - going
        out[n] = going + max(0, live - placed.get(n, 0))
    return out


def _guard_inputs(
    quota: KarmadaQuota,
    charged: Mapping[str, int],
    placed: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    seen_by: Mapping[str, Mapping[str, int]],
    beyond: Mapping[str, Mapping[str, int]],
    kept: Sequence[Reservation],
    hard: ResourceList,
    released: frozenset[str],
) -> gd.GuardInputs:
    """memberEnforcement ResourceQuota: what the share policy reads (pending charges and
    replicas not yet scheduled count as reserved: admitted, in no member; `released`, the
    members whose evicted replicas the quota no longer charges)."""
    unplaced = {n: max(0, charged.get(n, 0) - placed.get(n, 0)) for n in hard}
    names = gd.guarded_names(hard)
    reserved = {n: unplaced[n] for n in names}
    for r in kept:
        try:
            charge = resources.parse_resource_list(r.reserved, "pending")
        except QuantityError:
            continue  # admission fails closed on it; the guards need not
        for n in names:
            if n in charge:
                reserved[n] += max(0, charge[n].nanos)
    caps: dict[str, dict[str, int]] = {}
    for cluster, raw in quota.spec.clusterHard.items():
        try:
            parsed = resources.parse_resource_list(raw, f"spec.clusterHard[{cluster}]")
        except QuantityError:
            continue  # validate_spec refuses it first
        caps[cluster] = {n: parsed[n].nanos for n in names if n in parsed}
    inputs = gd.GuardInputs(
        hard={n: hard[n].nanos for n in names},
        members=[
            gd.MemberState(
                name=c,
                usage={n: h.get(n, 0) for n in names},
                out_of_band={n: beyond[c].get(n, 0) for n in names},
                observed={n: seen_by[c].get(n, 0) for n in names} if c in seen_by else None,
            )
            for c, h in held.items()
        ],
        reserved=reserved,
        caps=caps,
        released=released,
    )
    return inputs


def _eviction_condition(
    quota: KarmadaQuota,
    inputs: NamespaceSnapshot,
    exprs: tuple[Expression, ...],
    away: frozenset[str],
) -> Condition | None:
    """EvictionCharged: True while the quota charges replicas Karmada evicted from a cluster,
    naming each cluster, its bindings, why it is charged and until when (times, not a
    countdown: the status changes when the reason does, not every second); None: none is."""
    per_cluster: dict[str, list[float | None]] = {}
    for entry in inputs.evicting:
        if not scopes.matches(exprs, entry.usage.traits):
            continue
        for cluster, end in entry.evictions:
            if cluster not in away:
                per_cluster.setdefault(cluster, []).append(end)
    if not per_cluster:
        return None
    hold = not quota.spec.releases_evicted
    parts = []
    for cluster in sorted(per_cluster):
        ends = per_cluster[cluster]
        known = [e for e in ends if e is not None]
        bindings = f"{len(ends)} binding{'s' if len(ends) != 1 else ''}"
        if cluster in inputs.releasing and not hold:
            why = f"not Ready, released at {_clock(inputs.releasing[cluster])}"
        elif hold:
            why = "held (spec.failover.evictedReplicas Hold)"
        else:
            why = "Ready"
        until = f", the evictions end by {_clock(max(known))} at the latest" if known else ""
        parts.append(f"{cluster} ({bindings}): {why}{until}")
    return _condition(
        st.COND_EVICTION_CHARGED,
        True,
        REASON_EVICTED_CHARGED,
        "replicas Karmada evicted are charged until their eviction ends (a failover waits for "
        "room meanwhile): " + "; ".join(parts),
    )


def _clock(epoch: float) -> str:
    return format_time(datetime.fromtimestamp(epoch, UTC))


def _out_of_band_condition(
    beyond: Mapping[str, Mapping[str, int]], hard: ResourceList
) -> Condition:
    """OutOfBandUsage: True naming the members whose pods and claims use more than Karmada
    placed (terminating pods and retained claims included)."""
    found = []
    for cluster in sorted(beyond):
        over = {n: v for n, v in sorted(beyond[cluster].items()) if v > 0}
        if over:
            text = ", ".join(
                f"{n}={Quantity(v, hard[n].format if n in hard else Format.DECIMAL_SI)}"
                for n, v in over.items()
            )
            found.append(f"{cluster}: {text}")
    if found:
        return _condition(
            st.COND_OUT_OF_BAND,
            True,
            REASON_OBSERVED_EXCEEDS_PLACED,
            "member pods and claims use more than Karmada placed (terminating pods, retained "
            "claims, or created around it) in " + "; ".join(found) + " (counted in used)",
        )
    return _condition(
        st.COND_OUT_OF_BAND,
        False,
        REASON_WITHIN_PLACEMENT,
        "no member's pods or claims use more than Karmada placed there",
    )


def _guarded_condition(problems: Mapping[str, str], routes: Mapping[str, str]) -> Condition:
    """Guarded: True while every member holds its guard as the share policy wants, saying
    which guards Karmada carries (Pull-mode members); False naming each member that does
    not, and why."""
    if problems:
        text = "; ".join(f"{m}: {why}" for m, why in sorted(problems.items()))
        return _condition(st.COND_GUARDED, False, REASON_NOT_GUARDED, text)
    carried = [f"{m} {how}" for m, how in sorted(routes.items())]
    return _condition(
        st.COND_GUARDED,
        True,
        REASON_GUARDED,
        "every member holds a guard ResourceQuota with its usage and share of the headroom"
        + (f"; Pull mode, {', '.join(carried[:NAMED_MEMBERS])}" if carried else "")
        + _more(len(carried)),
    )


def _unguarded_condition() -> Condition:
    """Guarded False, saying why, for a quota that opted out (`kubectl get kq` shows it)."""
    return _condition(
        st.COND_GUARDED,
        False,
        REASON_OPTED_OUT,
        "memberEnforcement: None: admission only; the members do not hold this budget, so what "
        "they run past a charge (pods in their grace period, rollouts, moves, pods made around "
        "Karmada) is counted after the fact",
    )


_SHOWN_INVALID = 5


def _enforced_condition(enforced: bool) -> Condition:
    if enforced:
        return _condition(
            st.COND_ENFORCED,
            True,
            REASON_NAMESPACE_LABELED,
            f"the namespace is labelled {ENFORCED_LABEL}={ENFORCED_VALUE}: karmada-apiserver "
            "sends its ResourceBindings to the webhook (bindings created before this were "
            "counted, not checked)",
        )
    return _condition(
        st.COND_ENFORCED,
        False,
        REASON_NAMESPACE_NOT_LABELED,
        f"the namespace is not labelled {ENFORCED_LABEL}={ENFORCED_VALUE} yet: its "
        "ResourceBindings are counted but not checked until the controller labels it",
    )


def _invalid_bindings_condition(bindings: Mapping[str, IndexedBinding]) -> Condition | None:
    """BindingsCharged=False naming the bindings charged as zero where invalid (sorted, the
    first few in full), or None when every binding is charged as it asks."""
    bad = sorted((e.name, e.invalid) for e in bindings.values() if e.invalid)
    if not bad:
        return None
    shown = "; ".join(f"{name}: {', '.join(problems)}" for name, problems in bad[:_SHOWN_INVALID])
    more = f"; and {len(bad) - _SHOWN_INVALID} more" if len(bad) > _SHOWN_INVALID else ""
    return _condition(
        st.COND_BINDINGS_CHARGED,
        False,
        REASON_INVALID_BINDINGS,
        f"{len(bad)} binding(s) charged as zero where invalid: {shown}{more}",
    )


_NOT_ENFORCED = "the quota is not enforced until its spec is fixed"
_CALCULATED = "usage recomputed from the ResourceBindings"


def _condition(kind: str, ok: bool, reason: str, message: str) -> Condition:
    return Condition(type=kind, status="True" if ok else "False", reason=reason, message=message)


def _at(conditions: list[Condition], generation: int) -> list[Condition]:
    """The conditions as computed for this quota generation."""
    return [c.model_copy(update={"observedGeneration": generation}) for c in conditions]


# ---------------------------------------------------------------------------------------------
# what the controller does with an outcome (pure decisions; the I/O is in `controller.reconciler`)


def unobserved_reservations(
    quotas: Iterable[KarmadaQuota],
    bindings: Mapping[str, IndexedBinding],
    deleted: Callable[[str], bool],
    namespace: str | None = None,
) -> dict[str, str]:
    """uid -> binding name of every reservation whose binding the index has never seen (and
    whose name a binding can have: the others are released without a look); with `namespace`,
    only those of bindings in it (a cluster quota holds many namespaces')."""
    pending: dict[str, str] = {}
    for quota in quotas:
        for r in quota.status.reservations:
            if namespace is not None and r.reservedBy.namespace not in ("", namespace):
                continue
            uid = r.reservedBy.uid
            if uid not in bindings and not deleted(uid) and possible_binding(r.reservedBy.name):
                pending[uid] = r.reservedBy.name
    return pending


@dataclass(frozen=True)
class StaleCharge:
    """Reservations of a binding the index holds at an earlier generation: an UPDATE admitted
    and then refused (a resourceVersion conflict after admission, another webhook) leaves one
    that no stored generation will ever carry."""

    quota_namespace: str  # "" for a ClusterKarmadaQuota
    quota: str
    name: str
    key: EntryKey
    count: int  # entries with this key: a change in it restarts the wait (a new admission)


def stale_charges(
    quotas: Iterable[KarmadaQuota], bindings: Mapping[str, IndexedBinding]
) -> list[StaleCharge]:
    """Every reservation whose binding is indexed below its generation, by quota and key (a
    cluster quota's of the namespace's bindings among them: `bindings` are one namespace's)."""
    out: list[StaleCharge] = []
    for quota in quotas:
        counts: dict[EntryKey, int] = {}
        names: dict[EntryKey, str] = {}
        for r in quota.status.reservations:
            entry = bindings.get(r.reservedBy.uid)
            if entry is not None and entry.generation < r.generation:
                key = entry_key(r)
                counts[key] = counts.get(key, 0) + 1
                names[key] = entry.name  # the object's own name, not what the entry says
        out.extend(
            StaleCharge(quota.metadata.namespace, quota.metadata.name, names[k], k, n)
            for k, n in counts.items()
        )
    return out


def stale_disproved(
    holder_uid: str, holder_generation: int, charge: StaleCharge, waited: float, window: float
) -> bool:
    """Whether a stale charge can no longer be carried, from a quorum GET of its binding made
    `waited` seconds after every entry of its key was already there: the binding is still the
    same object below the charge's generation once the admission window has passed (every
    UPDATE admitted before that was stored or refused by then; +1 s: entries of one key were
    admitted within the second their expiry rounds to)."""
    uid, generation = charge.key[0], charge.key[1]
    return holder_uid == uid and holder_generation < generation and waited >= window + STALE_MARGIN


@dataclass(frozen=True)
class OrphanChecks:
    """Which unobserved reservations to look up now, and when to look at the others."""

    due: dict[str, str]  # uid -> binding name: GET the name now
    first_seen: dict[str, float]  # uid -> when it was first seen unobserved
    recheck_at: float | None  # when the earliest of the others is due


def orphan_checks(
    pending: Mapping[str, str],
    first_seen: Mapping[str, float],
    absent: Collection[str],
    now: float,
    grace: float,
    admission_window: float,
) -> OrphanChecks:
    """A reservation unobserved for `grace` is due for one quorum GET of its binding's name;
    one whose name an earlier GET found free (`absent`) is due again once `admission_window`
    has passed since it was first seen (see `is_orphan`).

    Admission happens before the API server stores the object, so a create can still fail
    afterwards (the name already taken, another webhook refusing it) and leave a reservation no
    binding will ever carry. First-seen times are forgotten a minute after the reservation is.
    """
    seen = {
        uid: t
        for uid, t in first_seen.items()
        if uid in pending or t > now - max(60.0, 2 * admission_window)
    }
    due: dict[str, str] = {}
    recheck: float | None = None
    for uid, name in pending.items():
        first = seen.setdefault(uid, now)
        at = first + (admission_window if uid in absent else grace)
        if now >= at:
            due[uid] = name
        else:
            recheck = at if recheck is None or at < recheck else recheck
    return OrphanChecks(due, seen, recheck)


def is_orphan(uid: str, holder_uid: str, unobserved_for: float, admission_window: float) -> bool:
    """Whether the reserved binding can no longer come to exist, given who holds its name now.

    Another uid holding the name: a name is held by one object at a time, so the reserved create
    was refused AlreadyExists (Karmada's detector racing itself). No holder is not proof: the
    create may still be waiting on another validating webhook or on storage after ours
    admitted it — released then, its usage would be missing from the quota until the binding
    appears, and another admission could take it. So a free name counts only once the create
    cannot be in flight any more: `admission_window` (the longest timeoutSeconds of the other
    validating webhooks on resourcebindings, plus the write) after the reservation appeared.
    """
    if holder_uid:
        return holder_uid != uid
    return unobserved_for >= admission_window
