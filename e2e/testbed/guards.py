"""The member-guard invariant, checked from the members' API servers alone (issue 21).

With `memberEnforcement: ResourceQuota` the controller keeps a guard ResourceQuota per member;
**Σ over members of what the guards may hold ≤ the quota's global hard, at every moment**, where
a guard may hold max(spec.hard, status.hard) (the member's admission enforces status.hard, which
its quota controller copies from spec a moment after each write).

`GuardInvariant.poll` reads every member's guard twice (all members at once, then all again):
a guard whose resourceVersion did not change between the two reads held its value through the
interval both passes span, so a poll where every guard read the same twice sees one instant's
Σ exactly — a poll that straddled a rebalance is counted as unsettled and not judged (never a
false alarm from reading one member before a move and another after). A member that cannot be
read (its API server is down) is counted at the last value read; nothing writes it while it is
down, but a write may have landed between that read and the outage, so a Σ over the hard that
depends on such a value is held back until the member is read again and confirmed only if its
guard's resourceVersion is still the one read before (else it is dropped as unjudged).

What a guard may hold is read from the member alone, by the test bed's own rules (never the
product's): per name, max(spec.hard, status.hard) where both name it; a name either lacks, and a
guard that is not there, hold **without limit** (the member's admission enforces status.hard
only, and a missing ResourceQuota limits nothing). Until every member's guard has once held
every guarded name (the quota being set up) a poll is unsettled, not judged; after that, a
guard or a name gone is a Σ without bound over the hard.

Used by e2e/test_guards.py, and by the campaign and fault suites (e2e/testbed/campaign.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import aiohttp

from e2e.testbed.aio import eventually
from e2e.testbed.bed import TestBed
from e2e.testbed.reference import quantity
from karmadaquota.controller import guard_keeper as gk
from karmadaquota.kube.client import KubeClient, KubeError, NotFound

READ_TIMEOUT_S = 5.0


# What a member's ResourceQuota can hold of a pod's charge; counts of other kinds
# (count/deployments.apps, services, ...) are held by admission alone.
_POD_NAMES = ("pods", "count/pods", "cpu", "memory", "ephemeral-storage")
_POD_PREFIXES = ("requests.", "limits.", "hugepages-")


def _guarded_name(name: str) -> bool:
    return name in _POD_NAMES or name.startswith(_POD_PREFIXES)


@dataclass(frozen=True)
class Guarded:
    """One guarded KarmadaQuota: its global hard (guarded names only) and clusterHard caps."""

    quota: str
    hard: Mapping[str, Fraction]
    caps: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)


def guarded(
    quota: str, hard: Mapping[str, Any], caps: Mapping[str, Mapping[str, Any]] | None = None
) -> Guarded:
    """`hard` and `caps` as written in the KarmadaQuota's spec."""
    return Guarded(
        quota,
        {n: quantity(v) for n, v in hard.items() if _guarded_name(n)},
        {m: {n: quantity(v) for n, v in c.items()} for m, c in (caps or {}).items()},
    )


def may_hold(obj: Mapping[str, Any]) -> dict[str, Fraction]:
    """Per name, the most a ResourceQuota lets pods use now: max(spec.hard, status.hard);
    a name missing from either is not in the result (held without limit)."""
    spec = (obj.get("spec") or {}).get("hard") or {}
    status = (obj.get("status") or {}).get("hard") or {}
    return {n: max(quantity(spec[n]), quantity(status[n])) for n in spec.keys() & status.keys()}


_Read = tuple[str, dict[str, Fraction]]  # (resourceVersion, may_hold); ("", {}) when absent


@dataclass
class _Suspect:
    message: str
    rv: dict[tuple[str, str], str]  # (quota, member) -> resourceVersion of the held value


@dataclass
class GuardInvariant:
    """Polls every member's guards of the quotas in `namespace`; Σ ≤ hard at every poll."""

    members: Mapping[str, KubeClient]
    namespace: str
    quotas: Sequence[Guarded]
    polls: int = 0  # polls judged (every guard read exactly, or confirmed later)
    unsettled: int = 0  # polls that straddled a write, not judged
    held_polls: int = 0  # judged polls during which some member could not be read
    worst: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # quota -> name -> Σ
    violations: list[str] = field(default_factory=list)
    _last: dict[tuple[str, str], _Read] = field(default_factory=dict)
    _suspects: list[_Suspect] = field(default_factory=list)
    _complete: set[tuple[str, str]] = field(default_factory=set)  # held every name once
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _read(self, member: str, quota: str) -> _Read | None:
        """(resourceVersion, what it may hold) of the guard, None when it cannot be read."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                obj = await self.members[member].get(
                    gk.rq_path(self.namespace, gk.guard_name(quota))
                )
        except NotFound:
            return ("", {})
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
            return None
        return (str(obj["metadata"].get("resourceVersion", "")), may_hold(obj))

    async def _pass(self) -> dict[tuple[str, str], _Read | None]:
        keys = [(q.quota, m) for q in self.quotas for m in self.members]
        got = await asyncio.gather(*(self._read(m, q) for q, m in keys))
        return dict(zip(keys, got, strict=True))

    async def poll(self) -> list[str]:
        """One judged (or unsettled) poll; the violations it found (also kept in
        `violations`)."""
        async with self._lock:  # the campaign's verdict and a background poller may share one
            first = await self._pass()
            second = await self._pass()
            return self._judge(first, second)

    def _judge(
        self,
        first: Mapping[tuple[str, str], _Read | None],
        second: Mapping[tuple[str, str], _Read | None],
    ) -> list[str]:
        found: list[str] = []
        # a held-back Σ is confirmed or dropped once its member is read again
        for s in list(self._suspects):
            reread = [(second.get(key), rv) for key, rv in s.rv.items()]
            if any(got is None for got, _ in reread):
                continue  # still unreadable
            self._suspects.remove(s)
            if all(got is not None and got[0] == rv for got, rv in reread):
                found.append(s.message)  # unchanged since: the held value was exact throughout
        settled = True
        held: dict[tuple[str, str], str] = {}  # key -> resourceVersion of a value held over
        for key in first:
            a, b = first[key], second[key]
            if a is not None and b is not None:
                if a[0] != b[0]:
                    settled = False
                else:
                    self._last[key] = b
            elif key in self._last:
                held[key] = self._last[key][0]  # its API server is away: the last value read
            else:
                settled = False  # never read: unknown
        for q in self.quotas:  # set up: every member's guard has held every name once
            for m in self.members:
                last = self._last.get((q.quota, m))
                if last is not None and q.hard.keys() <= last[1].keys():
                    self._complete.add((q.quota, m))
        if not settled or len(self._complete) < len(self.quotas) * len(self.members):
            self.unsettled += 1
            self.violations.extend(found)
            return found
        self.polls += 1
        if held:
            self.held_polls += 1
        for q in self.quotas:
            values = {m: self._last[(q.quota, m)][1] for m in self.members}
            depends = {k: rv for k, rv in held.items() if k[0] == q.quota}
            worst = self.worst.setdefault(q.quota, {})
            problems = []
            for name, limit in q.hard.items():
                unbounded = sorted(m for m, v in values.items() if name not in v)
                if unbounded:
                    problems.append(
                        f"{self.namespace}/{q.quota}: Σ {name} without bound: no guard holds it"
                        f" in {unbounded} ({values})"
                    )
                    continue
                total = sum((v[name] for v in values.values()), Fraction(0))
                worst[name] = max(worst.get(name, Fraction(0)), total)
                if total > limit:
                    problems.append(
                        f"{self.namespace}/{q.quota}: Σ {name} = {float(total):g} > "
                        f"{float(limit):g} ({values})"
                    )
            for member, caps in q.caps.items():
                for name, cap in caps.items():
                    holds = values.get(member, {}).get(name)
                    if holds is None or holds > cap:
                        problems.append(f"{q.quota}: {member} holds {values[member]} past {cap}")
            for p in problems:
                if depends:
                    note = f" (held over an outage: {sorted(m for _, m in depends)})"
                    self._suspects.append(_Suspect(p + note, depends))
                else:
                    found.append(p)
        self.violations.extend(found)
        return found

    async def run(self, period: float = 0.1) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(period)  # the poll period of the invariant check

    def summary(self) -> str:
        worst = {q: {n: float(v) for n, v in names.items()} for q, names in self.worst.items()}
        return (
            f"guard invariant in {self.namespace}: {self.polls} polls judged "
            f"({self.held_polls} with a member unreadable), {self.unsettled} unsettled, "
            f"{len(self._suspects)} held back unjudged; largest Σ {worst}"
        )


@contextlib.asynccontextmanager
async def watching(inv: GuardInvariant, period: float = 0.1) -> AsyncIterator[GuardInvariant]:
    """Poll `inv` in the background for the duration; afterwards at least one poll was judged
    and none found Σ over the hard."""
    task = asyncio.create_task(inv.run(period))
    try:
        yield inv
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def judged() -> bool:
        # a short body can straddle a write (a pod's usage moves its guard's resourceVersion)
        # at every background poll: the guards must also hold once things are still
        if inv.polls == 0:
            await inv.poll()
        return inv.polls > 0

    await eventually(judged, 30, "one poll of the guards judged", interval=period)
    print(f"\n{inv.summary()}")
    assert inv.polls > 0, inv.summary()
    assert not inv.violations, inv.violations[:5]


@contextlib.asynccontextmanager
async def member_clients(bed: TestBed) -> AsyncIterator[dict[str, KubeClient]]:
    """A client for every member's API server (its admin credentials)."""
    clients: dict[str, KubeClient] = {}
    try:
        for m in bed.members:
            clients[m] = await KubeClient.connect(str(bed.member_kubeconfig(m)))
        yield clients
    finally:
        for c in clients.values():
            await c.close()


async def member_namespace(members: Mapping[str, KubeClient], ns: str, timeout: float = 60) -> None:
    """`ns` is in every member, with its default ServiceAccount (until the member's controller
    makes it, pods are refused for want of it: not a quota refusal)."""

    async def present() -> bool:
        for c in members.values():
            try:
                await c.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            except NotFound:
                return False
        return True

    await eventually(present, timeout, f"namespace {ns} propagated to every member")


async def guards_ready(
    members: Mapping[str, KubeClient], ns: str, quota: str, timeout: float = 60
) -> dict[str, Any]:
    """Every member has the quota's guard and its quota controller enforces it (status.hard)."""

    async def ready() -> dict[str, Any] | None:
        got = {}
        for m, c in members.items():
            try:
                g = await c.get(gk.rq_path(ns, gk.guard_name(quota)))
            except NotFound:
                return None
            if not (g.get("status") or {}).get("hard"):
                return None
            got[m] = g
        return got

    return await eventually(ready, timeout, f"a guard of {quota} in every member")
