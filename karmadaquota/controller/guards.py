"""Member guards: how much of a quota's global hard each member's ResourceQuota may hold (pure).

With `memberEnforcement: ResourceQuota` the controller keeps one ResourceQuota per member
cluster (the *guard*). This module decides its `hard`, and the order of the writes that move
the guards from what they are to what they should be, so that **Σ over members of the guards'
hard ≤ the global hard at every moment**, for every resource name.

Share policy, per resource name (all arithmetic in exact nano-units):

1. A member that cannot be reached keeps the guard it has (it cannot be changed), so it is
   *fixed*: its last known hard — or, never known (a new leader that could not read it yet),
   the most it could hold: the whole global hard (not its clusterHard cap, which may have been
   lowered since its guard was written). The budget of the reachable members is what the fixed
   ones leave: `B = hard − Σ fixed`. Except a member Karmada reports not Ready whose evicted
   replicas the quota releases (`released`, docs/charging.md "Failover"): like its evicted
   replicas, it keeps no share and is not written (Karmada says it is gone), so that a
   failover starts the moved pods elsewhere at once, as admission lets it — the window in which
   a partitioned member may still run them is the failover's, documented there.
2. Each reachable member first gets its *usage* (the larger of what Karmada placed there and
   what its pods request, terminating pods included), capped by clusterHard. If they do not
   all fit B (a workload moved while its old pods stop, a lowered hard, an outage's fixed
   share), what the members' pods hold now is covered first and the placements beyond it get
   what is left, scaled down in proportion (in whole granules): new pods are refused there
   until the old ones are gone, as Kubernetes' quota makes a rollout wait.
3. The *headroom* `B − Σ usage − reserved` is shared, where `reserved` is admitted usage not
   yet in any member (pending charges, replicas not yet scheduled): it will land in a member as
   a usage that step 2 covers, so it is not handed out twice. Headroom is split evenly in whole
   granules (1 for counts and bytes, 1m for cpu), never past a member's cap (what a capped
   member cannot take goes to the others); the granules left over go to the members holding
   the most usage made around Karmada (observed − placed), then by name.

A member's guard is thus `usage + share`: Karmada's own placements are covered as soon as the
controller sees them placed (their usage moves from `reserved` into that member's usage), and
pods created around Karmada may take the member's share; each time they do, the usage changes
and the headroom left is split again, so a member creating pods one after another ends up with
all the headroom the others do not use.

Ordering (`transition`): writes that lower some name go first — each member whose guard
shrinks on any name is written with the per-name minimum of current and desired, and those
writes must be confirmed (the member's quota controller has taken them into `status.hard`,
which is what its admission enforces) — then every member is written its desired hard. Σ of
the lowered values ≤ Σ desired ≤ B, and each raise only moves one member up to its desired
value, so every intermediate state stays within the hard.

A plan of lowerings alone, while the guards as they are already keep Σ ≤ hard
(`within_hard`), only takes back headroom: an admission reserved it, and the placement that
follows gives it back to the member it lands in. The keeper lets such a plan wait a moment
(`GuardKeeper.tighten_delay`) instead of writing and confirming every member twice per create.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karmadaquota import resources
from karmadaquota.controller.pods import is_pod_observable
from karmadaquota.pod_template import is_claim_name
from karmadaquota.quantity import NANO

Nanos = dict[str, int]  # resource name -> exact nano-units

_MILLI = NANO // 1000
_MILLI_NAMES = frozenset({"cpu", "requests.cpu"})


def granule(name: str) -> int:
    """The smallest share of `name` handed out: 1m of cpu, one unit of anything else."""
    return _MILLI if name in _MILLI_NAMES else NANO


def guarded_names(hard: Iterable[str]) -> list[str]:
    """The names of `hard` a member ResourceQuota holds: what pods can be charged (pods,
    count/pods, cpu/memory/ephemeral-storage/hugepages and extended requests) and what the
    claims of their volumes can (persistentvolumeclaims, requests.storage, per storage class).
    Counts of other kinds (count/deployments.apps, services) are enforced by admission only."""
    return sorted(n for n in hard if is_pod_observable(n) or is_claim_name(n))


@dataclass(frozen=True)
class MemberState:
    """One member cluster as the share policy sees it."""

    name: str
    usage: Mapping[str, int] = field(default_factory=dict)  # max(placed, observed)
    out_of_band: Mapping[str, int] = field(default_factory=dict)  # max(0, observed - placed)
    # what its counted pods hold now, terminating ones included: they run whatever the guard
    # says, so it is covered before any placement elsewhere (None: as `usage`)
    observed: Mapping[str, int] | None = None
    reachable: bool = True
    # the most its guard may hold now (None: unknown); {} when it has no guard
    guard: Mapping[str, int] | None = None


@dataclass(frozen=True)
class GuardInputs:
    hard: Mapping[str, int]  # global hard, guarded names only
    members: Sequence[MemberState]
    reserved: Mapping[str, int] = field(default_factory=dict)  # admitted, not in a member
    caps: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # clusterHard
    # members Karmada reports not Ready whose evicted replicas the quota releases
    # (karmadaquota.evictions): unreachable, they keep no share (step 1)
    released: frozenset[str] = frozenset()


def assumed(m: MemberState, hard: Mapping[str, int]) -> Nanos:
    """What member `m` may hold at most: its known guard, else the whole hard. Not its
    clusterHard cap: the cap may have been lowered after its guard was last written."""
    if m.guard is not None:
        return {n: m.guard.get(n, 0) for n in hard}
    return dict(hard)


def _split(units: int, order: Sequence[str], limits: Mapping[str, int | None]) -> dict[str, int]:
    """`units` granules split evenly over `order`, none past its limit (None: unlimited); the
    remainder one each in `order`."""
    share = dict.fromkeys(order, 0)

    def room(c: str) -> int | None:
        lim = limits.get(c)
        return None if lim is None else lim - share[c]

    open_ = [c for c in order if room(c) is None or (room(c) or 0) > 0]
    while units > 0 and open_:
        each = units // len(open_)
        if each == 0:
            for c in open_[:units]:
                share[c] += 1
            return share
        for c in open_:
            r = room(c)
            give = each if r is None else min(each, r)
            share[c] += give
            units -= give
        open_ = [c for c in open_ if room(c) is None or (room(c) or 0) > 0]
    return share


def desired(inputs: GuardInputs) -> dict[str, Nanos]:
    """The hard every *reachable* member's guard should have, but a released one's (see the
    module docstring)."""
    hard = inputs.hard
    # a released member (not Ready, its evicted replicas released) holds nothing of the budget,
    # reachable or not, and is not written: Karmada says it is gone (a write to it would fail
    # and hold up the others' increases), and what it still runs is the failover's window
    reachable = [m for m in inputs.members if m.reachable and m.name not in inputs.released]
    out: dict[str, Nanos] = {m.name: {} for m in reachable}
    for name, limit in hard.items():
        fixed = sum(
            assumed(m, hard)[name]
            for m in inputs.members
            if not m.reachable and m.name not in inputs.released
        )
        budget = max(0, limit - fixed)
        caps = {m.name: inputs.caps.get(m.name, {}).get(name) for m in reachable}
        g = granule(name)
        floors = _floors(reachable, name, caps, budget, g)
        total = sum(floors.values())
        headroom = max(0, budget - total - max(0, inputs.reserved.get(name, 0)))
        order = [
            m.name for m in sorted(reachable, key=lambda m: (-m.out_of_band.get(name, 0), m.name))
        ]
        limits: dict[str, int | None] = {
            c: None if caps[c] is None else max(0, (caps[c] or 0) - floors[c]) // g for c in order
        }
        shares = _split(headroom // g, order, limits)
        for c in order:
            out[c][name] = floors[c] + shares[c] * g
    return out


def _capped(value: int, cap: int | None) -> int:
    return max(0, value) if cap is None else min(max(0, value), cap)


def _scaled(wants: Mapping[str, int], budget: int, g: int) -> dict[str, int]:
    """`wants` as they are if they fit `budget`, else scaled down in proportion, in whole
    granules (a guard of 0.9 pods is of no use to anyone)."""
    total = sum(wants.values())
    if total <= budget:
        return dict(wants)
    return {c: w * budget // total // g * g for c, w in wants.items()}


def _floors(
    reachable: Sequence[MemberState],
    name: str,
    caps: Mapping[str, int | None],
    budget: int,
    g: int,
) -> dict[str, int]:
    """Step 2: each member's usage, capped, within `budget`. What a member's pods hold now
    (terminating ones included) is covered first: those pods run whatever its guard says, so
    a placement elsewhere (a workload moved while its old pods stop, a rollout's new pods)
    gets only what they leave, and its pods wait in that member until the old ones are gone,
    as Kubernetes' quota makes a rollout wait."""
    seen = {
        m.name: _capped((m.usage if m.observed is None else m.observed).get(name, 0), caps[m.name])
        for m in reachable
    }
    use = {m.name: _capped(m.usage.get(name, 0), caps[m.name]) for m in reachable}
    held = _scaled(seen, budget, g)
    left = max(0, budget - sum(held.values()))
    extra = _scaled({c: max(0, use[c] - held[c]) for c in use}, left, g)
    return {c: held[c] + extra[c] for c in use}


@dataclass(frozen=True)
class Transition:
    """The writes that move the guards to `final`: first `lower` (each confirmed), then
    `final` for every member whose guard differs from what `lower` left."""

    lower: dict[str, Nanos]
    final: dict[str, Nanos]


def transition(
    current: Mapping[str, Mapping[str, int] | None],
    wanted: Mapping[str, Nanos],
    applied_next: Mapping[str, Mapping[str, int]] | None = None,
) -> Transition:
    """Decreases before increases, per name (see the module docstring). `current[c]` is what
    member c's guard may hold now ({} or None: no guard there yet). `applied_next[c]`, for a
    member whose guard another party applies (Pull mode: karmada-agent applies the Work's
    spec, whatever the member holds now), is the spec it will apply next: a lowering there
    never writes more than it, since that would raise what the member enforces before the
    others' lowerings are confirmed; the rest waits for the increases."""
    lower: dict[str, Nanos] = {}
    final: dict[str, Nanos] = {}
    for c, want in wanted.items():
        have = current.get(c)
        if have is None or not have:
            final[c] = dict(want)
            continue
        names = set(want) | set(have)
        if any(want.get(n, 0) < have.get(n, 0) for n in names):
            nxt = (applied_next or {}).get(c)
            low = {
                n: min(want.get(n, 0), have.get(n, 0), *([nxt.get(n, 0)] if nxt else []))
                for n in want
            }
            lower[c] = low
            if low != want:
                final[c] = dict(want)
        elif dict(have) != dict(want) or set(have) != set(want):
            final[c] = dict(want)
    return Transition(lower, final)


def within_hard(inputs: GuardInputs, current: Mapping[str, Mapping[str, int] | None]) -> bool:
    """Whether the guards as they are now keep Σ ≤ hard for every name: a reachable member at
    what its guard holds (`current`; no guard, or none for that name, bounds nothing), one that
    cannot be reached at `assumed`, a released one at nothing (as in `desired`). Then a lowering
    only takes back headroom handed out, and may wait (`GuardKeeper.tighten_delay`)."""
    for name, limit in inputs.hard.items():
        held = 0
        for m in inputs.members:
            if m.name in inputs.released:
                continue
            if not m.reachable:
                held += assumed(m, inputs.hard)[name]
                continue
            have = current.get(m.name)
            if not have or name not in have:
                return False
            held += have[name]
        if held > limit:
            return False
    return True


def total(guards: Iterable[Mapping[str, int]], name: str) -> int:
    return sum(g.get(name, 0) for g in guards)


def undercounted(live: Mapping[str, int], used: Mapping[str, int]) -> Nanos:
    """The names a guard's `status.used` counts below the pods that exist and are not being
    deleted (`live`), each with what it should count at least; only names `used` already
    counts (the member's quota controller has synced them).

    Kubernetes' quota controller recounts from its informer caches while admission adds to
    `used` before the pod is stored: a recount in between writes a `used` short of pods that
    exist, and until its next recount (a pod deleted, or its periodic resync) the member admits
    that many pods past the guard (kubernetes/kubernetes#123434, open). A pod being deleted
    leaves this floor before it goes, so a pod gone from the member cannot hold it up."""
    return {n: v for n, v in live.items() if n in used and v > used[n]}


def to_nanos(rl: resources.ResourceList, names: Iterable[str]) -> Nanos:
    """A parsed resource list as nano-units, masked to `names` (absent names are 0)."""
    return {n: rl[n].nanos if n in rl else 0 for n in names}
