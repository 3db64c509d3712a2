"""Admission to running under member guards (issue 42): a placement Karmada makes within the quota
runs as fast as in a namespace without one.

One real test bed with three kwok members, our webhook and controller. Per round, the same storm
of Deployments (each divided over the three members, with a PropagationPolicy) is applied at once
in two fresh namespaces, one after the other, alternating which goes first:

* `no quota`: a namespace no quota limits (our webhook answers without charging);
* `quota, guards`: a namespace with a KarmadaQuota holding room for the whole storm and nothing
  said of `memberEnforcement` (guards on, the default), so each member's guard must follow
  Karmada's placements for the pods to start.

Per Deployment, seconds from its create to every replica running in the members (pods in phase
Running, not being deleted). Target: the p99 with guards within 10 % (or 2 s) of the p99 without
a quota. Prints a markdown table (median / p90 / p99 / max per arm, and the p99 ratio).

    python -m bench.bench_running [--rounds 2] [--deployments 30] [--replicas 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench import harness
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import KubeClient

MEMBERS = ("member1", "member2", "member3")
ARMS = ("no quota", "quota, guards")


def _quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]


async def running_per_deployment(members: dict[str, KubeClient], ns: str) -> dict[str, int]:
    """Running pods per Deployment (by the pod's `app` label) over every member."""
    out: dict[str, int] = {}
    for client in members.values():
        pods = (await client.get(f"/api/v1/namespaces/{ns}/pods")).get("items", [])
        for p in pods:
            meta = p["metadata"]
            if meta.get("deletionTimestamp") or (p.get("status") or {}).get("phase") != "Running":
                continue
            app = (meta.get("labels") or {}).get("app", "")
            out[app] = out.get(app, 0) + 1
    return out


async def storm(
    bed: TestBed, members: dict[str, KubeClient], ns: str, n: int, replicas: int
) -> list[float]:
    """Apply `n` Deployments at once; seconds from the create to all their pods running."""
    names = [f"d{i:03d}" for i in range(n)]
    await bed.aapply(divided_policy(ns, "all", list(MEMBERS)))
    started = time.monotonic()
    await asyncio.gather(*(bed.aapply(deployment(ns, d, replicas, harness.CPU)) for d in names))
    done: dict[str, float] = {}
    deadline = started + 600
    while len(done) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n - len(done)} Deployments not running after 600 s in {ns}")
        now = await running_per_deployment(members, ns)
        at = time.monotonic() - started
        for d in names:
            if d not in done and now.get(d, 0) >= replicas:
                done[d] = at
        await asyncio.sleep(0.05)  # polling with a deadline
    return list(done.values())


async def run(args: argparse.Namespace) -> str:
    async with harness.installed(members=MEMBERS) as it:
        bed: TestBed = it.bed
        members = {m: await KubeClient.connect(str(bed.member_kubeconfig(m))) for m in MEMBERS}
        times: dict[str, list[float]] = {arm: [] for arm in ARMS}
        try:
            for r in range(args.rounds):
                order = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
                for arm in order:
                    ns = f"run-{r}-{'q' if arm != ARMS[0] else 'n'}"
                    bed.kubectl("create", "namespace", ns)
                    if arm != ARMS[0]:
                        room = str(2 * args.deployments * args.replicas)
                        await bed.aapply(product.quota(ns, "team", {"pods": room}))

                        async def guarded(ns: str = ns) -> bool:
                            q = await it.api.get(harness.QUOTA.format(ns=ns))
                            conds = (q.get("status") or {}).get("conditions") or []
                            return any(
                                c["type"] == "Guarded" and c["status"] == "True" for c in conds
                            )

                        await eventually(guarded, 120, "every member guarded")
                    times[arm] += await storm(bed, members, ns, args.deployments, args.replicas)
        finally:
            for c in members.values():
                await c.close()
    lines = [
        f"{args.rounds} rounds × {args.deployments} Deployments × {args.replicas} replicas, "
        f"divided over {len(MEMBERS)} members; seconds from each Deployment's create to all its "
        "pods running:",
        "",
        "| arm | median | p90 | p99 | max |",
        "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        xs = times[arm]
        lines.append(
            f"| {arm} | {statistics.median(xs):.2f} | {_quantile(xs, 0.9):.2f} | "
            f"{_quantile(xs, 0.99):.2f} | {max(xs):.2f} |"
        )
    base, guarded_p99 = _quantile(times[ARMS[0]], 0.99), _quantile(times[ARMS[1]], 0.99)
    lines += [
        "",
        f"p99 with guards / without a quota: {guarded_p99 / base:.2f} "
        f"(+{guarded_p99 - base:.2f} s; target ≤ 1.10 or ≤ +2 s)",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--deployments", type=int, default=30)
    p.add_argument("--replicas", type=int, default=3)
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
