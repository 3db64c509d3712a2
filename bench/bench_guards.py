"""Member guards benchmark (issue 21): how soon usage made around Karmada counts, and how soon
a rebalance reaches every member.

One real test bed with three kwok members, our webhook and controller; a KarmadaQuota
`pods: 60` with `memberEnforcement: ResourceQuota`. Per trial one pod is created directly in a
member's namespace (round robin over the members), then two times are taken from the moment
the create returned:

* counted: until the quota's `status.used.pods` includes it (what admission checks against);
* rebalanced: until every member's guard (the larger of its spec.hard and status.hard: what the
  member's admission enforces) holds exactly its new share (`controller.guards.desired`).

Targets: 2 s for both. Prints a markdown table (median / p90 / max).

    python -m bench.bench_guards [--trials 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench import harness
from bench.harness import QUOTA, stopwatch
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from karmadaquota.controller import guard_keeper as gk
from karmadaquota.controller import guards as gd
from karmadaquota.kube.client import KubeClient, NotFound
from karmadaquota.quantity import NANO, Quantity

MEMBERS = ("member1", "member2", "member3")
HARD = 60


def pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "10m"}}}
            ]
        },
    }


async def run(args: argparse.Namespace) -> str:
    async with harness.installed(members=MEMBERS) as it:
        bed: TestBed = it.bed
        ns = "bench-guards"
        bed.kubectl("create", "namespace", ns)
        await bed.aapply(
            product.quota(ns, "team", {"pods": str(HARD)}, memberEnforcement="ResourceQuota")
        )
        members = {m: await KubeClient.connect(str(bed.member_kubeconfig(m))) for m in MEMBERS}
        try:
            return await trials(it.api, members, ns, args.trials)
        finally:
            for c in members.values():
                await c.close()


async def trials(api: KubeClient, members: dict[str, KubeClient], ns: str, n: int) -> str:
    async def held() -> dict[str, int]:
        out = {}
        for m, c in members.items():
            try:
                g = await c.get(gk.rq_path(ns, gk.guard_name("team")))
            except NotFound:
                return {}
            out[m] = gk.may_hold(g).get("pods", -1)
        return out

    async def used() -> int:
        q = await api.get(QUOTA.format(ns=ns))
        raw = (q.get("status") or {}).get("used", {}).get("pods")
        return -1 if raw is None else Quantity.parse(str(raw)).nanos // NANO

    async def ready() -> bool:
        return len(await held()) == len(MEMBERS) and await used() == 0

    await eventually(ready, 120, "guards in every member")
    usage = dict.fromkeys(MEMBERS, 0)
    counted, rebalanced = [], []
    for i in range(n):
        member = MEMBERS[i % len(MEMBERS)]
        await members[member].post(f"/api/v1/namespaces/{ns}/pods", pod(f"oob-{i}"))
        started = time.monotonic()
        usage[member] += 1
        total = sum(usage.values())
        want = gd.desired(
            gd.GuardInputs(
                hard={"pods": HARD * NANO},
                members=[
                    gd.MemberState(m, usage={"pods": u * NANO}, out_of_band={"pods": u * NANO})
                    for m, u in usage.items()
                ],
            )
        )

        async def is_counted(total: int = total) -> bool:
            return await used() == total

        async def is_rebalanced(want: dict[str, gd.Nanos] = want) -> bool:
            return await held() == {m: w["pods"] for m, w in want.items()}

        counted.append(await stopwatch(is_counted, started, deadline=60))
        rebalanced.append(await stopwatch(is_rebalanced, started, deadline=60))
    lines = [
        f"{n} pods created directly in members ({len(MEMBERS)} members, round robin), "
        f"quota pods: {HARD}; seconds from the create:",
        "",
        "| | median | p90 | max |",
        "|---|---|---|---|",
    ]
    for label, xs in (("counted in status.used", counted), ("every guard rebalanced", rebalanced)):
        p90 = sorted(xs)[max(0, round(0.9 * (len(xs) - 1)))]
        lines.append(f"| {label} | {statistics.median(xs):.2f} | {p90:.2f} | {max(xs):.2f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=30)
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
