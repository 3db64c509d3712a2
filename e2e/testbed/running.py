"""What the members run, read from the members: the oracle of the outage tests.

The quota guarantee is about what runs, so it is judged there: for a namespace, Σ over every
member of each Deployment's `spec.replicas` (pods) and `spec.replicas` × its pod template's cpu
requests (requests.cpu) — read from the objects Karmada's execution controller applied in the
members, never from a ResourceBinding and never with `karmadaquota.charge` (the product's own
arithmetic cannot be its own judge). Compared with the quota's `spec.hard` at every poll
(100 ms) while a fault runs: one poll over the hard fails the test (`InvariantViolation`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from e2e.testbed.aio import InvariantViolation
from karmadaquota.kube.client import KubeClient, KubeError, NotFound
from karmadaquota.quantity import Quantity

READ_TIMEOUT_S = 5.0
RESOURCES = ("pods", "requests.cpu")


def deployment_usage(deployment: Mapping[str, Any]) -> dict[str, Quantity]:
    """pods and requests.cpu one Deployment runs: replicas, and replicas × its pod's cpu."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    pod = ((spec.get("template") or {}).get("spec")) or {}
    cpu = Quantity.zero()
    for c in pod.get("containers") or []:
        raw = ((c.get("resources") or {}).get("requests") or {}).get("cpu")
        if raw is not None:
            cpu = cpu + Quantity.parse(str(raw))
    return {"pods": Quantity.parse(str(replicas)), "requests.cpu": cpu * replicas}


@dataclass
class RunningInvariant:
    """Polls the members' Deployments of `namespace` against `quota`'s hard."""

    karmada: KubeClient
    members: Mapping[str, KubeClient]
    namespace: str
    quota: str
    polls: int = 0
    unreadable: int = 0  # polls that could not read a member or the quota (not judged)
    worst: dict[str, Quantity] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    async def hard(self) -> dict[str, Quantity]:
        q = await self.karmada.get(
            f"/apis/quota.karmada.io/v1alpha1/namespaces/{self.namespace}/karmadaquotas/{self.quota}"
        )
        return {n: Quantity.parse(str(v)) for n, v in q["spec"]["hard"].items() if n in RESOURCES}

    async def running(self) -> dict[str, Quantity]:
        """Σ over members of what their Deployments in the namespace run."""
        total = dict.fromkeys(RESOURCES, Quantity.zero())
        for client in self.members.values():
            try:
                items = (
                    await client.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments")
                )["items"]
            except NotFound:
                continue
            for d in items:
                for name, q in deployment_usage(d).items():
                    total[name] = total[name] + q
        return total

    async def poll(self) -> list[str]:
        """One poll; its violations (also kept). The hard is read before and after the
        members: if it changed meanwhile the larger one bounds the poll."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                before = await self.hard()
                running = await self.running()
                after = await self.hard()
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
            self.unreadable += 1
            return []
        self.polls += 1
        found = []
        for name, used in running.items():
            self.worst[name] = max(self.worst.get(name, Quantity.zero()), used)
            limit = max(before.get(name, used), after.get(name, used))
            if used > limit:
                found.append(f"{self.namespace}: members run {name}={used} > hard {limit}")
        self.violations.extend(found)
        return found

    async def run(self, period: float = 0.1) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(period)  # the poll period of the invariant check

    def summary(self) -> str:
        worst = {n: str(q) for n, q in self.worst.items()}
        return (
            f"running invariant in {self.namespace}: {self.polls} polls judged, "
            f"{self.unreadable} unreadable; most run at once {worst}"
        )

    def check(self) -> None:
        """Fail at once on a violation seen so far."""
        if self.violations:
            raise InvariantViolation(f"{self.violations[0]} ({self.summary()})")


@contextlib.asynccontextmanager
async def watching(inv: RunningInvariant, period: float = 0.1) -> AsyncIterator[RunningInvariant]:
    """Poll `inv` in the background for the duration; afterwards polls were judged and none
    found more running than the hard."""
    task = asyncio.create_task(inv.run(period))
    try:
        yield inv
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    print(f"\n{inv.summary()}")
    assert inv.polls > 0, inv.summary()
    inv.check()
