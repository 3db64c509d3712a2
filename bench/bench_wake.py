"""Wake benchmark: how soon a refused workload goes through once its quota has room.

One real test bed (Karmada + one kwok member), our webhook and controller. Per trial, in a
namespace of its own with a KarmadaQuota `pods: 2`:

* delete: Deployment A (2 replicas) admitted, Deployment B (2) refused; B stays refused for at
  least `--refused-for` seconds (Karmada's own retries back off meanwhile), then A is deleted:
  time from the DELETE until B's ResourceBinding exists, and until it places both replicas;
* scale-up: Deployment W (2) admitted and scaled to 4 (refused); after `--refused-for` seconds
  the quota's hard is raised to 4: time until W's binding carries 4 replicas, and places them.

All trials are set up together (so they age together), then measured one at a time.
`--baseline` repeats everything with the controller's waking turned off (`--no-wake`):
Karmada's own retry backoff alone. Prints a markdown table; on a loaded machine read ratios.

    python -m bench.bench_wake [--trials 3] [--refused-for 60] [--baseline]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench import harness
from bench.harness import CPU, DEPLOYMENTS, QUOTA, binding, scheduled, stopwatch
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import KubeClient


async def prepare(bed: TestBed, api: KubeClient, ns: str, scale_up: bool) -> None:
    await bed.akubectl("create", "namespace", ns)
    await bed.aapply(divided_policy(ns, "all", list(bed.members)))
    await bed.aapply(product.quota(ns, "team", {"pods": "2"}))

    async def initialised() -> bool:
        q = await api.get(QUOTA.format(ns=ns))
        return "pods" in (q.get("status") or {}).get("used", {})

    await eventually(initialised, 60, f"quota of {ns} initialised")
    first = "w" if scale_up else "a"
    await bed.aapply(deployment(ns, first, 2, CPU))

    async def placed() -> bool:
        return scheduled(await binding(api, ns, first)) == 2

    await eventually(placed, 120, f"{ns}/{first} placed")
    if scale_up:
        await bed.akubectl("scale", "deployment/w", "--replicas=4", "-n", ns)
    else:
        await bed.aapply(deployment(ns, "b", 2, CPU))

    async def listed() -> bool:
        q = await api.get(QUOTA.format(ns=ns))
        return bool((q.get("status") or {}).get("waiting"))

    await eventually(listed, 60, f"refusal in {ns} recorded")


async def measure(api: KubeClient, ns: str, scale_up: bool) -> tuple[float, float]:
    """(seconds until admitted, seconds until placed) after room is made."""
    if scale_up:
        q = await api.get(QUOTA.format(ns=ns))
        q["spec"]["hard"]["pods"] = "4"
        started = time.monotonic()
        await api.put(QUOTA.format(ns=ns), q)

        async def admitted() -> bool:
            rb = await binding(api, ns, "w")
            return rb is not None and int(rb["spec"].get("replicas", 0)) == 4

        async def placed() -> bool:
            return scheduled(await binding(api, ns, "w")) == 4
    else:
        started = time.monotonic()
        await api.request("DELETE", DEPLOYMENTS.format(ns=ns) + "/a")

        async def admitted() -> bool:
            return await binding(api, ns, "b") is not None

        async def placed() -> bool:
            return scheduled(await binding(api, ns, "b")) == 2

    first = await stopwatch(admitted, started)
    return first, await stopwatch(placed, started)


async def phase(
    bed: TestBed, api: KubeClient, label: str, trials: int, refused_for: float
) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {"delete": [], "scale-up": []}
    plan = [(kind, f"bench-rq-{label}-{kind}-{i}") for kind in out for i in range(trials)]
    await asyncio.gather(*(prepare(bed, api, ns, kind == "scale-up") for kind, ns in plan))
    await asyncio.sleep(refused_for)  # the refusals age: the condition being measured
    for kind, ns in plan:
        admitted, placed = await measure(api, ns, kind == "scale-up")
        out[kind].append((admitted, placed))
        # each trial as it ends: a baseline trial can wait out minutes of Karmada's backoff
        print(f"{label} {ns}: admitted {admitted:.2f} s, placed {placed:.2f} s", flush=True)
    return out


def row(label: str, kind: str, xs: list[tuple[float, float]]) -> str:
    def fmt(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} / {max(values):.2f}"

    return (
        f"| {label} | {kind} | {len(xs)} | {fmt([a for a, _ in xs])} | {fmt([p for _, p in xs])} |"
    )


async def run(args: argparse.Namespace) -> str:
    async with harness.installed() as it:
        results = {"wake": await phase(it.bed, it.api, "on", args.trials, args.refused_for)}
        if args.baseline:
            it.restart_controller("bench-controller-off", "--no-wake")
            results["no wake"] = await phase(it.bed, it.api, "off", args.trials, args.refused_for)
    lines = [
        f"Refused for ≥ {args.refused_for:.0f} s, then room made; seconds, median / max.",
        "",
        "| controller | room made by | trials | binding admitted | replicas scheduled |",
        "|---|---|---|---|---|",
    ]
    for label, by_kind in results.items():
        for kind, xs in by_kind.items():
            lines.append(row(label, "deleting A" if kind == "delete" else "raising hard", xs))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--refused-for", type=float, default=60.0)
    p.add_argument("--baseline", action="store_true", help="also run with --no-wake")
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
