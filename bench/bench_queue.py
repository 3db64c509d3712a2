"""Queue benchmark: how soon a queued workload is placed once its quota has room (issue 20).

One real test bed (Karmada + one kwok member), our webhook and controller. Per trial, in a
namespace of its own with a KarmadaQuota `pods: 2, onExceed: Queue`: Deployment A (2 replicas)
placed, Deployment B (2) created and queued (its binding suspended by our mutating webhook).
After every trial has waited `--queued-for` seconds, each is measured one at a time: A is
deleted, and the clock runs from the DELETE until B's binding is admitted (suspension cleared
by the controller's leader, charged by the webhook) and until Karmada's scheduler placed both
replicas in a member. Target (DESIGN §8): placed < 1 s p99, however long it waited.

    python -m bench.bench_queue [--trials 20] [--queued-for 30]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time

from bench import harness
from bench.harness import CPU, DEPLOYMENTS, QUOTA, binding, scheduled, stopwatch
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient
from karmadaquota.queued import ANNOTATION


def is_queued(rb: JSON | None) -> bool:
    annotations = ((rb or {}).get("metadata") or {}).get("annotations") or {}
    return ANNOTATION in annotations


async def prepare(bed: TestBed, api: KubeClient, ns: str) -> None:
    await bed.akubectl("create", "namespace", ns)
    await bed.aapply(divided_policy(ns, "all", list(bed.members)))
    await bed.aapply(product.quota(ns, "team", {"pods": "2"}, onExceed="Queue"))

    async def initialised() -> bool:
        q = await api.get(QUOTA.format(ns=ns))
        return "pods" in (q.get("status") or {}).get("used", {})

    await eventually(initialised, 60, f"quota of {ns} initialised")
    await bed.aapply(deployment(ns, "a", 2, CPU))

    async def placed() -> bool:
        return scheduled(await binding(api, ns, "a")) == 2

    await eventually(placed, 120, f"{ns}/a placed")
    await bed.aapply(deployment(ns, "b", 2, CPU))

    async def queued() -> bool:
        return is_queued(await binding(api, ns, "b"))

    await eventually(queued, 60, f"{ns}/b queued")


async def measure(api: KubeClient, ns: str) -> tuple[float, float]:
    """(seconds until admitted, seconds until placed) after A is deleted."""
    started = time.monotonic()
    await api.request("DELETE", DEPLOYMENTS.format(ns=ns) + "/a")

    async def admitted() -> bool:
        return not is_queued(await binding(api, ns, "b"))

    async def placed() -> bool:
        return scheduled(await binding(api, ns, "b")) == 2

    first = await stopwatch(admitted, started)
    return first, await stopwatch(placed, started)


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (p99 of fewer than 100 trials is their maximum)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def run(args: argparse.Namespace) -> str:
    async with harness.installed() as it:
        plan = [f"bench-queue-{i}" for i in range(args.trials)]
        for i in range(0, len(plan), 5):  # a few at a time: the bed has two cores
            await asyncio.gather(*(prepare(it.bed, it.api, ns) for ns in plan[i : i + 5]))
        await asyncio.sleep(args.queued_for)  # the queued workloads age: the condition measured
        results = []
        for ns in plan:
            admitted, placed = await measure(it.api, ns)
            results.append((admitted, placed))
            print(f"{ns}: admitted {admitted:.3f} s, placed {placed:.3f} s", flush=True)
    adm = [a for a, _ in results]
    pla = [p for _, p in results]

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} | {quantile(xs, 0.9):.3f} | {quantile(xs, 0.99):.3f}"

    return "\n".join(
        [
            f"Queued for ≥ {args.queued_for:.0f} s, then room made (the running workload "
            f"deleted); {len(results)} trials; seconds.",
            "",
            "| from the DELETE until | median | p90 | p99 |",
            "|---|---|---|---|",
            f"| queued binding admitted (suspension cleared) | {fmt(adm)} |",
            f"| its replicas placed in a member | {fmt(pla)} |",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--queued-for", type=float, default=30.0)
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
