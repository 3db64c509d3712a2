"""Cohorts: who lends whom how much of their unused hard (pure) — docs/cohorts.md.

Quotas naming the same `spec.cohort` share what they leave unused, with Kueue's meaning. A loan
is a pair of status entries the controller writes: the lender's `lent` and the borrower's
`borrowed`. A quota may use its *effective hard*, hard + Σ borrowed − Σ lent, and admission
checks exactly that, per quota, with the compare-and-swap it always had — so a cohort adds no
cross-object write to admission, and Σ effective hard ≤ Σ hard holds as long as no borrower
holds more than its lender lent.

That is kept by the order of the two writes, with no lock across objects: a borrower's entry
never exceeds what its lender's status (as committed) lends it (`borrowed`), and a lender's
entry never drops below what the borrower's status (as committed) borrows (`lent`). So a loan
grows lender first and shrinks borrower first, each side reading the other's committed status;
a controller stopped between the two leaves a lender lending more than is borrowed — stricter,
never looser. A lender's entry grows, and a borrower's shrinks, only by a write that
compare-and-swaps on its resourceVersion (`narrows`), so a pending charge the webhook admitted
in between makes it lose and be computed again: what is lent was unused when it was lent, and
what is given back was not in use. The controller computes and writes one quota of a cohort at
a time (`controller.loans`), each from the others' statuses as last written.

The plan (`plan`) is Kueue's, per resource name:
- a borrower keeps, from the lenders it has, all it uses beyond its hard (a loan in use is
  never taken back, not even by a lender that left the cohort), from the lenders with no
  workload waiting first (so what it stops using goes back to a waiting lender first);
- it is lent, beyond that, what its waiting workloads ask for past its hard, up to its
  borrowing limit; borrowers with the smallest dominant share of their hard go first;
- a lender lends at most its lending limit and what it leaves unused after its own waiting
  workloads: one whose waiting workloads do not fit lends nothing new, and its loans come back
  as its borrowers stop using them — its workloads are then woken, ahead of further borrowing;
- a lender with `reclaimWithinCohort: Any` whose waiting workloads do not fit because its loans
  are in use has borrowers' bindings queued (`reclaim`, done by `controller.reclaim`): their
  usage ends, and the loans come back as above;
- a quota whose usage is not known yet keeps its loans and lends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karmadaquota import resources
from karmadaquota.api import KarmadaQuota, Loan
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.resources import ResourceList

Amounts = dict[str, int]  # resource name -> nanos
# (lender, borrower) -> what the one lends the other
Loans = dict[tuple[str, str], Amounts]


def key(quota: KarmadaQuota) -> str:
    """A quota's name in its cohort: namespace/name."""
    return f"{quota.metadata.namespace}/{quota.metadata.name}"


@dataclass(frozen=True)
class Member:
    """One quota of a cohort as the plan reads it (amounts in nanos, names of hard only)."""

    key: str
    hard: Amounts
    # what admission counts: used + pending charges
    used: Amounts
    # what its waiting workloads ask for, together
    wanted: Amounts = field(default_factory=dict)
    # None: no limit; a name left out: no limit for it
    borrowing_limit: Amounts | None = None
    lending_limit: Amounts | None = None
    # as committed: lender -> amounts, borrower -> amounts
    borrowed: Mapping[str, Amounts] = field(default_factory=dict)
    lent: Mapping[str, Amounts] = field(default_factory=dict)
    # its usage counts every name of hard (one not computed yet keeps its loans, lends nothing)
    known: bool = True


def _total(loans: Iterable[Mapping[str, int]], name: str) -> int:
    return sum(a.get(name, 0) for a in loans)


def dominant_share(m: Member) -> float:
    """The largest used / hard over the member's names (Kueue's dominant resource share)."""
    shares = [m.used.get(n, 0) / h for n, h in m.hard.items() if h > 0]
    return max(shares, default=0.0)


def plan(members: Sequence[Member]) -> Loans:
    """The loans a cohort should hold now (see the module docstring); deterministic."""
    loans: Loans = {}
    names = sorted({n for m in members for n in m.hard})
    by_key = {m.key: m for m in members}
    order = sorted(members, key=lambda m: (dominant_share(m), m.key))

    def waits(lender: str) -> bool:
        """A lender with workloads of its own waiting gets its loans back first."""
        m = by_key.get(lender)
        return m is not None and any(v > 0 for v in m.wanted.values())

    for n in names:
        keep: dict[str, int] = {}
        extra: dict[str, int] = {}
        room: dict[str, int] = {}
        for m in members:
            hard = m.hard.get(n, 0)
            used = m.used.get(n, 0)
            keep[m.key] = max(0, used - hard)
            if not m.known:  # its usage unknown: it keeps every loan it has, asks for no more
                keep[m.key] = max(keep[m.key], _total(m.borrowed.values(), n))
            want = max(0, used + m.wanted.get(n, 0) - hard)
            if m.borrowing_limit is not None and n in m.borrowing_limit:
                want = min(want, m.borrowing_limit[n])
            extra[m.key] = max(0, want - keep[m.key])
            lendable = hard
            if m.lending_limit is not None and n in m.lending_limit:
                lendable = min(hard, m.lending_limit[n])
            unused = hard - used - m.wanted.get(n, 0)
            if n not in m.hard or keep[m.key] or want or not m.known:
                unused = 0  # short of its own hard, or its usage unknown: lends nothing new
            room[m.key] = max(0, min(lendable, unused))
        # loans in use stay with the lenders that made them (one that left the cohort too),
        # those of lenders whose workloads wait last
        for b in order:
            left = keep[b.key]
            for lender in sorted(b.borrowed, key=lambda lk: (lk not in by_key, waits(lk), lk)):
                if left <= 0:
                    break
                take = min(b.borrowed[lender].get(n, 0), left)
                if take:
                    _add(loans, lender, b.key, n, take)
                    if lender in room:
                        room[lender] = max(0, room[lender] - take)
                    left -= take
        # then what waiting workloads ask for: smallest dominant share first, its lenders
        # first, then whoever has the most room
        for b in order:
            left = extra[b.key]
            lenders = sorted(
                (lk for lk in room if lk != b.key),
                key=lambda lk: (lk not in b.borrowed, -room[lk], lk),
            )
            for lender in lenders:
                if left <= 0:
                    break
                take = min(room[lender], left)
                if take:
                    _add(loans, lender, b.key, n, take)
                    room[lender] -= take
                    left -= take
    return loans


@dataclass(frozen=True)
class Candidate:
    """A binding of a borrower that a reclaim may queue (`reclaim`)."""

    borrower: str  # its quota: namespace/name
    namespace: str
    name: str
    charge: Amounts  # as the borrower's quota counts it
    priority: int
    written: int  # its resourceVersion: the most recently written goes first


def reclaim(
    lender: Member,
    lent: Mapping[str, Amounts],
    coming: Amounts,
    candidates: Iterable[Candidate],
) -> list[Candidate]:
    """The borrowers' bindings a lender with `reclaimWithinCohort: Any` queues now: what its
    waiting workloads ask for past hard − Σ lent, less what is on its way back already
    (`coming`: the part of its loans no binding of the borrowers holds any more, their pods
    ending), at most Σ lent; from the borrowers of its loans only, lowest priority first, then
    the most recently written, until that is covered."""
    need: Amounts = {}
    for n, hard in lender.hard.items():
        if lender.wanted.get(n, 0) <= 0:
            continue
        out = _total(lent.values(), n)
        short = lender.used.get(n, 0) + lender.wanted[n] - (hard - out) - coming.get(n, 0)
        if short > 0:
            need[n] = min(short, out)
    chosen: list[Candidate] = []
    order = sorted(
        (c for c in candidates if c.borrower in lent),
        key=lambda c: (c.priority, -c.written, c.namespace, c.name),
    )
    for c in order:
        if all(v <= 0 for v in need.values()):
            break
        if not any(c.charge.get(n, 0) > 0 and v > 0 for n, v in need.items()):
            continue
        chosen.append(c)
        for n in need:
            need[n] -= c.charge.get(n, 0)
    return chosen


def _add(loans: Loans, lender: str, borrower: str, name: str, amount: int) -> None:
    pair = loans.setdefault((lender, borrower), {})
    pair[name] = pair.get(name, 0) + amount


def borrowed(me: str, planned: Loans, lent_to_me: Mapping[str, Amounts]) -> dict[str, Amounts]:
    """What `me` may record as borrowed: per lender, the plan's loan, never more than that
    lender's committed status lends it (`lent_to_me`: lender -> its `lent[me]`)."""
    out: dict[str, Amounts] = {}
    for (lender, borrower), amounts in planned.items():
        if borrower != me:
            continue
        have = lent_to_me.get(lender, {})
        got = {n: min(v, have.get(n, 0)) for n, v in amounts.items()}
        got = {n: v for n, v in got.items() if v > 0}
        if got:
            out[lender] = got
    return out


def lent(me: str, planned: Loans, borrowed_from_me: Mapping[str, Amounts]) -> dict[str, Amounts]:
    """What `me` must record as lent: per borrower, the plan's loan, never less than that
    borrower's committed status borrows from it (`borrowed_from_me`: borrower -> its
    `borrowed[me]`)."""
    out: dict[str, Amounts] = {}
    wanted = {b: a for (lender, b), a in planned.items() if lender == me}
    for b in sorted(set(wanted) | set(borrowed_from_me)):
        plan_b, held = wanted.get(b, {}), borrowed_from_me.get(b, {})
        got = {n: max(plan_b.get(n, 0), held.get(n, 0)) for n in set(plan_b) | set(held)}
        got = {n: v for n, v in got.items() if v > 0}
        if got:
            out[b] = got
    return out


def amounts(rl: Mapping[str, Any], names: Iterable[str] | None = None) -> Amounts:
    """A wire resource list as nanos (unparsable values left out: validation reports them)."""
    out: Amounts = {}
    for n, v in rl.items():
        if names is not None and n not in names:
            continue
        try:
            out[n] = Quantity.parse(str(v)).nanos
        except QuantityError:
            continue
    return out


def loans_of(entries: Sequence[Loan]) -> dict[str, Amounts]:
    """A status' `borrowed` or `lent` list as other quota -> amounts."""
    out: dict[str, Amounts] = {}
    for e in entries:
        got = amounts(e.resources)
        pair = out.setdefault(e.quota, {})
        for n, v in got.items():
            pair[n] = pair.get(n, 0) + v
    return out


def loan_entries(loans: Mapping[str, Amounts], hard: Mapping[str, Quantity]) -> list[Loan]:
    """Loans as status entries, in the formats of hard, sorted by the other quota."""
    out = []
    for other in sorted(loans):
        rl = {
            n: Quantity(v, hard[n].format if n in hard else Quantity.zero().format)
            for n, v in sorted(loans[other].items())
            if v > 0
        }
        if rl:
            out.append(Loan(quota=other, resources=resources.format_resource_list(rl)))
    return out


def effective_hard(quota: KarmadaQuota, hard: ResourceList) -> ResourceList:
    """What the quota may use: hard + Σ borrowed − Σ lent, per name of hard (never below 0);
    Σ borrowed at most its borrowingLimit as the spec says now (a lowered limit holds at once,
    before the controller gives anything back)."""
    if not quota.status.borrowed and not quota.status.lent:
        return hard
    borrowed = loans_of(quota.status.borrowed)
    limit = quota.spec.borrowingLimit
    if limit:
        capped = amounts(limit)
        totals = {n: _total(borrowed.values(), n) for n in capped}
        borrowed = {"": {n: min(totals[n], capped[n]) for n in capped}} | {
            k: {n: v for n, v in a.items() if n not in capped} for k, a in borrowed.items()
        }
    return effective(hard, borrowed, loans_of(quota.status.lent))


def effective(
    hard: ResourceList, borrowed: Mapping[str, Amounts], lent: Mapping[str, Amounts]
) -> ResourceList:
    """hard + Σ borrowed − Σ lent, per name of hard (never below 0)."""
    out: ResourceList = {}
    for n, q in hard.items():
        moved = _total(borrowed.values(), n) - _total(lent.values(), n)
        out[n] = Quantity(max(0, q.nanos + moved), q.format) if moved else q
    return out


def summary(borrowed: Sequence[Loan], lent: Sequence[Loan], hard: Mapping[str, Quantity]) -> str:
    """`borrowed pods: 2; lent requests.cpu: 500m` — for kubectl get (empty: no loan)."""
    parts = []
    for label, entries in (("borrowed", borrowed), ("lent", lent)):
        totals: Amounts = {}
        for loans in loans_of(entries).values():
            for n, v in loans.items():
                totals[n] = totals.get(n, 0) + v
        shown = [
            f"{n}: {Quantity(v, hard[n].format if n in hard else Quantity.zero().format)}"
            for n, v in sorted(totals.items())
            if v > 0
        ]
        if shown:
            parts.append(f"{label} {', '.join(shown)}")
    return "; ".join(parts)


def narrows(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` over `current` lowers what the quota may use — lends more, or
    borrows less: such a write must compare-and-swap on resourceVersion, so that it loses to
    any charge admission made since it was read (the module docstring)."""
    return _grows(current.get("lent"), desired.get("lent")) or _grows(
        desired.get("borrowed"), current.get("borrowed")
    )


def _grows(before: Any, after: Any) -> bool:
    have, want = _wire_loans(before), _wire_loans(after)
    return any(v > have.get(o, {}).get(n, 0) for o, a in want.items() for n, v in a.items())


def _wire_loans(raw: Any) -> dict[str, Amounts]:
    out: dict[str, Amounts] = {}
    for e in raw or []:
        if isinstance(e, Mapping) and isinstance(e.get("quota"), str):
            out[e["quota"]] = amounts(e.get("resources") or {})
    return out
