"""Peer benchmark: Karmada's own FederatedResourceQuota enforcement beside karmadaquota.

One real test bed, one run. Karmada's enforcement is the `FederatedQuotaEnforcement` feature
gate (alpha, off by default) on karmada-webhook and karmada-controller-manager: its
`/validate-resourcebinding` lists the namespace's FederatedResourceQuotas and writes
`status.overallUsed` once per admitted binding (retrying conflicts a few times), and it
charges only bindings that carry `spec.clusters` (Σ placed replicas × each request key, bare
names such as `cpu`). karmada-webhook's API client is limited by `--kube-api-qps` (Karmada's
default 40); the bed restarts it with `--kube-api-qps=2000 --kube-api-burst=4000` for the
second FRQ column.

Two storms, each in a namespace of its own per column (no quota, FRQ at Karmada's defaults,
FRQ with raised QPS, karmadaquota), the quota fitting 60 % of the objects:

* **bindings**: N concurrent creates of scheduled ResourceBindings (`spec.clusters` set);
* **user path**: N Deployments and one PropagationPolicy created at once; then the Deployments
  that arrive in the member cluster are counted until the count stops changing.

Prints markdown tables. Over-admissions are objects admitted beyond the quota; false rejections
are objects the quota had room for but that were refused (or, on the user path, never placed).

    python -m bench.bench_peers [--count 100] [--deployments 40] [--settle 20] [--deadline 240]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import StormResult, binding, failure_class, storm
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient, KubeError

GATE = "FederatedQuotaEnforcement=true"
RAISED_QPS = ("--kube-api-qps=2000", "--kube-api-burst=4000")
COLUMNS = ("no quota", "FRQ (defaults)", "FRQ (QPS 2000)", "karmadaquota")
RB = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
POLICIES = "/apis/policy.karmada.io/v1alpha1/namespaces/{ns}/propagationpolicies"
FRQS = "/apis/policy.karmada.io/v1alpha1/namespaces/{ns}/federatedresourcequotas"
CPU_MILLI = 100  # per replica, every object


@dataclass
class Outcome:
    """One column of one storm."""

    objects: int
    allowed: int  # how many the quota has room for
    admitted: int
    elapsed: float  # storm: until every request was answered; user path: until settled
    throughput: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    settled: bool = True

    @property
    def over(self) -> int:
        return max(0, self.admitted - self.allowed)

    @property
    def false_rejections(self) -> int:
        return max(0, self.allowed - self.admitted)


def frq(ns: str, cpu: str) -> JSON:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "FederatedResourceQuota",
        "metadata": {"name": "peer", "namespace": ns},
        "spec": {"overall": {"cpu": cpu}},
    }


async def prepare(bed: TestBed, api: KubeClient, ns: str, column: str, admit: int) -> None:
    """Namespace `ns` with the column's quota (room for `admit` objects), ready to charge."""
    await bed.akubectl("create", "namespace", ns)
    cpu = f"{admit * CPU_MILLI}m"
    if column.startswith("FRQ"):
        await api.post(FRQS.format(ns=ns), frq(ns, cpu))

        async def frq_ready() -> bool:
            q = await api.get(f"{FRQS.format(ns=ns)}/peer")
            return bool(q.get("status", {}).get("overall"))

        await eventually(frq_ready, 60, f"FederatedResourceQuota in {ns} has a status")
    elif column == "karmadaquota":
        await bed.aapply(product.quota(ns, "peer", {"requests.cpu": cpu}))

        def kq_ready() -> bool:
            q = bed.get("karmadaquota", "peer", namespace=ns) or {}
            return "requests.cpu" in q.get("status", {}).get("used", {})

        await eventually(kq_ready, 60, f"KarmadaQuota in {ns} initialised")


def scheduled_binding(ns: str, name: str, member: str) -> JSON:
    b = binding(ns, name, cpu=f"{CPU_MILLI}m")
    b["spec"]["clusters"] = [{"name": member, "replicas": 1}]
    return b


async def binding_storm(api: KubeClient, ns: str, count: int, allowed: int, member: str) -> Outcome:
    res: StormResult = await storm(
        api,
        RB.format(ns=ns),
        lambda i: scheduled_binding(ns, f"b-{i:05d}", member),
        count,
        deadline=600,
    )
    return Outcome(
        objects=count,
        allowed=allowed,
        admitted=len(res.admitted),
        elapsed=res.elapsed,
        throughput=res.throughput,
        errors=res.failures(),
    )


async def user_path(
    api: KubeClient,
    member_api: KubeClient,
    ns: str,
    count: int,
    allowed: int,
    member: str,
    settle: float,
    deadline: float,
) -> Outcome:
    """N Deployments + one PropagationPolicy at once; count what reaches the member."""
    objects: list[tuple[str, JSON]] = [
        (POLICIES.format(ns=ns), divided_policy(ns, "spread", [member]))
    ]
    objects += [
        (
            DEPLOYMENTS.format(ns=ns),
            deployment(ns, f"d-{i:05d}", 1, {"cpu": f"{CPU_MILLI}m"}),
        )
        for i in range(count)
    ]
    errors: Counter[str] = Counter()

    async def create(path: str, body: JSON) -> None:
        try:
            await api.post(path, body)
        except KubeError as e:
            errors[failure_class(e.message)] += 1

    started = time.perf_counter()
    await asyncio.gather(*(create(p, b) for p, b in objects))
    placed, last_change, last = 0, started, -1
    while True:
        placed = await count_items(member_api, DEPLOYMENTS.format(ns=ns))
        now = time.perf_counter()
        if placed != last:
            last, last_change = placed, now
        if (placed and now - last_change >= settle) or now - started >= deadline:
            break
        await asyncio.sleep(1.0)  # polling the member cluster for the placed count
    return Outcome(
        objects=count,
        allowed=allowed,
        admitted=placed,
        elapsed=last_change - started,
        errors=errors,
        settled=time.perf_counter() - last_change >= settle,
    )


async def count_items(client: KubeClient, path: str) -> int:
    with contextlib.suppress(KubeError):
        return len((await client.get(path)).get("items", []))
    return 0


async def run(args: argparse.Namespace) -> str:
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-peers-"))
    member = "member1"
    bed = TestBed.start(home, [member], ephemeral=True, quiet=True, karmada_feature_gates=[GATE])
    try:
        results = await measure(
            bed, member, args.count, args.deployments, args.settle, args.deadline
        )
        return report(args.count, args.deployments, args.settle, args.deadline, results)
    finally:
        bed.stop()
        shutil.rmtree(home, ignore_errors=True)


async def measure(
    bed: TestBed, member: str, count: int, deployments: int, settle: float, deadline: float
) -> dict[str, dict[str, Outcome]]:
    """Both storms for every column on `bed` (started with the FRQ gate); restarts
    karmada-webhook with raised QPS for the FRQ (QPS 2000) column and back to defaults after."""
    await asyncio.to_thread(product.install_crd, bed)
    controller, _ = product.start_controller(bed, "peer-controller")
    hook = await product.start_webhook(bed, "peer-webhook")
    api = await KubeClient.connect(str(bed.karmada_kubeconfig))
    member_api = await KubeClient.connect(str(bed.member_kubeconfig(member)))
    results: dict[str, dict[str, Outcome]] = {"bindings": {}, "user path": {}}
    try:
        await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle)
        for column in COLUMNS:
            if column == "FRQ (QPS 2000)":
                await asyncio.to_thread(bed.restart_karmada_webhook, RAISED_QPS)
            slug = column.split(" ")[0].lower() + ("-qps" if "QPS" in column else "")
            n, d = count, deployments
            allowed_b = n if column == "no quota" else n * 3 // 5
            allowed_d = d if column == "no quota" else d * 3 // 5
            ns_b, ns_d = f"peer-b-{slug}", f"peer-d-{slug}"
            await prepare(bed, api, ns_b, column, allowed_b)
            await prepare(bed, api, ns_d, column, allowed_d)
            results["bindings"][column] = await binding_storm(api, ns_b, n, allowed_b, member)
            results["user path"][column] = await user_path(
                api, member_api, ns_d, d, allowed_d, member, settle, deadline
            )
            if column == "FRQ (QPS 2000)":
                await asyncio.to_thread(bed.restart_karmada_webhook, ())
        return results
    finally:
        await api.close()
        await member_api.close()
        await asyncio.to_thread(product.unregister, bed)
        hook.proc.stop()
        controller.stop()


def report(
    count: int,
    deployments: int,
    settle: float,
    deadline: float,
    results: dict[str, dict[str, Outcome]],
) -> str:
    b, d = results["bindings"], results["user path"]

    def errors(o: Outcome) -> str:
        return ", ".join(f"{n} {k}" for k, n in o.errors.most_common(3)) or "–"

    lines = [
        f"(a) {count} concurrent creates of scheduled ResourceBindings; quota admits 60 %.",
        "",
        "| | admitted / allowed | over-admitted | false rejections | creates/s | failures |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {o.admitted} / {o.allowed} | {o.over} | {o.false_rejections} | "
        f"{o.throughput:.0f} | {errors(o)} |"
        for c, o in b.items()
    ]
    lines += [
        "",
        f"(b) {deployments} Deployments (1 replica, {CPU_MILLI}m) + one PropagationPolicy "
        "created at once; quota fits 60 %; Deployments counted in the member cluster until the "
        f"count was unchanged for {settle:g} s (deadline {deadline:g} s); settled after = "
        "when the count last changed.",
        "",
        "| | placed / should | over-admitted | false rejections | settled after |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {o.admitted} / {o.allowed} | {o.over} | {o.false_rejections} | "
        f"{o.elapsed:.1f} s{'' if o.settled else ' (still changing at the deadline)'} |"
        for c, o in d.items()
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=100, help="bindings in storm (a)")
    p.add_argument("--deployments", type=int, default=40, help="Deployments in storm (b)")
    p.add_argument("--settle", type=float, default=20.0, help="seconds without change = settled")
    p.add_argument("--deadline", type=float, default=240.0, help="bound on storm (b), seconds")
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
