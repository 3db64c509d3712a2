"""What enforcing a KarmadaQuota costs Karmada: four binding storms on one bed, in one run.

1. **quota** — a namespace whose KarmadaQuota has room for every create (charged, written);
2. **floor** — a namespace whose only quota matches none of the bindings (scoped to an unused
   PriorityClass): the webhook is called and charges nothing;
3. **no quota** — a namespace without a KarmadaQuota;
4. **no webhook** — a namespace the webhook registration's namespaceSelector skips: Karmada
   with no webhook of ours at all, **the limit** every ratio is taken against;
5. **cluster** — the same creates spread over 5 namespaces that one ClusterKarmadaQuota
   selects (room for every create; docs/cluster-quotas.md): printed beside the quota storm,
   **cluster / quota** is what one budget over many namespaces costs more;
6. **kube quota** — Kubernetes' own ResourceQuota in karmada-apiserver on the same creates
   (`count/resourcebindings.work.karmada.io`, room for every create; our webhook skipped as in
   *no webhook*): its quota admission charges each create and writes the quota's status by
   compare-and-swap, as ours does; **ours / Kubernetes'** = quota / kube quota (issue 45);
7. with `--full F`, **full** — a namespace whose KarmadaQuota has room for the fraction F of
   the creates: exactly that many admitted, the rest refused (the refusal path: each batch
   that would refuse reads the refusing quota live first); answers per second.
8. with `--cohort`, **cohort** — the quota storm's quota in a cohort with a second, idle quota
   of another namespace (docs/cohorts.md): each of its status writes has the controller plan
   the cohort again; **cohort / quota** is what a cohort costs a plain quota.

Each round runs the four storms one after the other (the order rotated per round, so that
machine noise hits all alike), every storm `--count` ResourceBinding creates with
`--concurrency` in flight; figures are medians over the rounds. Per storm: throughput, CPU per
create of every process of the bed and of ours (from /proc, over the storm and until the
controller has observed it), our status writes and lost compare-and-swaps per create; for the
quota storm also the largest version of the quota object (watched). Then the user's path:
`--deployments` Deployments + one PropagationPolicy, time until every ResourceBinding is
scheduled, in a quota namespace and in a namespace without one. With `--long N`, last, one
quota storm of N creates that must all be admitted at their first attempt (no 429 from the
bound on pending charges).

    python -m bench.bench_cost [--count 600] [--concurrency 48] [--rounds 3] [--deployments 100]
                               [--long 5000] [--full 0.6]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
from typing import Any

import orjson

from bench import harness
from bench.bench_admission import cpu_by_process, opened, processes
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import StormResult, binding, storm
from e2e.testbed.workloads import deployment
from karmadaquota.api import ClusterKarmadaQuota, KarmadaQuota
from karmadaquota.kube.client import KubeClient
from karmadaquota.quantity import Quantity

KUBE = "kube-quota"
KUBE_COUNTED = "count/resourcebindings.work.karmada.io"
STORMS = ("quota", "floor", "no-quota", "no-webhook", "cluster", "kube-quota")
FULL = "full"
COHORT = "cohort"


def kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """The storms of a round: `STORMS`, `full` with `--full`, `cohort` with `--cohort`."""
    return (*STORMS, *((FULL,) if args.full else ()), *((COHORT,) if args.cohort else ()))


def room(args: argparse.Namespace, kind: str) -> int:
    """How many creates the storm's quota has room for."""
    return int(args.count * args.full) if kind == FULL else args.count


# the cluster storm's namespaces, selected by one ClusterKarmadaQuota
SPREAD = 5
RB = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
# the label that puts a namespace outside the registration (bench only; see harness)
SKIP = harness.NO_WEBHOOK_LABEL


def spread(ns: str) -> list[str]:
    return [f"{ns}-{i}" for i in range(SPREAD)]


async def prepare_cluster(bed: TestBed, ns: str, count: int) -> None:
    """`SPREAD` namespaces labelled for one ClusterKarmadaQuota with room for every create;
    ready once it is Ready and every namespace is labelled for enforcement."""
    await bed.aapply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": n, "labels": {"bench": ns}},
            }
            for n in spread(ns)
        ]
    )
    hard = {"requests.cpu": f"{count * 100}m", "pods": str(count)}
    await bed.aapply(
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "ClusterKarmadaQuota",
            "metadata": {"name": ns},
            "spec": {"hard": hard, "namespaceSelector": {"matchLabels": {"bench": ns}}},
        }
    )

    def ready() -> bool:
        q = bed.get("clusterkarmadaquota", ns) or {}
        conditions = {c["type"]: c["status"] for c in q.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True" and conditions.get("Enforced") == "True"

    await eventually(ready, 60, f"ClusterKarmadaQuota {ns} Ready and enforced")


def cluster_observed(bed: TestBed, ns: str, admitted: int) -> bool:
    q = bed.get("clusterkarmadaquota", ns) or {}
    held = ClusterKarmadaQuota.model_validate(q).status.reservations if q else []
    pods = q.get("status", {}).get("used", {}).get("pods")
    return pods is not None and Quantity.parse(pods) == Quantity.parse(str(admitted)) and not held


async def spread_storm(api: KubeClient, ns: str, args: argparse.Namespace) -> StormResult:
    """`args.count` creates over the `SPREAD` namespaces, `args.concurrency` in flight in all."""
    names = spread(ns)
    counts = [args.count // SPREAD + (i < args.count % SPREAD) for i in range(SPREAD)]
    flight = [args.concurrency // SPREAD + (i < args.concurrency % SPREAD) for i in range(SPREAD)]
    parts = await asyncio.gather(
        *(
            storm(
                api,
                RB.format(ns=n),
                functools.partial(_spread_binding, n),
                c,
                concurrency=f,
                deadline=300,
            )
            for n, c, f in zip(names, counts, flight, strict=True)
        )
    )
    out = StormResult()
    for part in parts:
        out.admitted += part.admitted
        out.denied.update(part.denied)
        out.latencies += part.latencies
        out.retries += part.retries
    out.elapsed = max(part.elapsed for part in parts)  # they ran at once
    return out


def _spread_binding(ns: str, i: int) -> dict[str, Any]:
    return binding(ns, f"x-{i:04d}")


async def prepare(bed: TestBed, ns: str, kind: str, count: int, guarded: bool = False) -> None:
    """The storm's namespace and quota; `count`: how many creates the quota has room for;
    `guarded`: the quota keeps member guards (`memberEnforcement: ResourceQuota`)."""
    if kind == "cluster":
        await prepare_cluster(bed, ns, count)
        return
    labels = {SKIP: "true"} if kind in ("no-webhook", KUBE) else {}
    await bed.aapply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
    )
    if kind == KUBE:
        await prepare_kube_quota(bed, ns, count)
        return
    if kind in ("quota", FULL, COHORT):
        hard = {"requests.cpu": f"{count * 100}m", "pods": str(count)}
        spec: dict[str, Any] = {"memberEnforcement": "ResourceQuota"} if guarded else {}
        if kind == COHORT:  # an idle second quota of the cohort, in a namespace of its own
            spec["cohort"] = ns
            lender = f"{ns}-lender"
            await bed.aapply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lender}}
            )
            await bed.aapply(product.quota(lender, "storm", hard, cohort=ns))
        await bed.aapply(product.quota(ns, "storm", hard, **spec))
    elif kind == "floor":
        scope = {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["unused"]}
            ]
        }
        await bed.aapply(product.quota(ns, "storm", {"pods": str(count)}, scopeSelector=scope))
    if kind in ("quota", "floor", FULL, COHORT):

        def ready() -> bool:
            q = bed.get("karmadaquota", "storm", namespace=ns) or {}
            conditions = {c["type"]: c["status"] for c in q.get("status", {}).get("conditions", [])}
            return (
                conditions.get("Ready") == "True" and conditions.get("Enforced", "True") == "True"
            )

        await eventually(ready, 60, f"KarmadaQuota in {ns} Ready")


async def prepare_kube_quota(bed: TestBed, ns: str, count: int) -> None:
    """Kubernetes' own ResourceQuota of `count` ResourceBindings in `ns`, ready once its quota
    controller has written status.hard (until then its admission refuses every create)."""
    await bed.aapply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "storm", "namespace": ns},
            "spec": {"hard": {KUBE_COUNTED: str(count)}},
        }
    )

    def ready() -> bool:
        q = bed.get("resourcequota", "storm", namespace=ns) or {}
        return KUBE_COUNTED in (q.get("status") or {}).get("hard", {})

    await eventually(ready, 60, f"ResourceQuota in {ns} calculated")


def kube_observed(bed: TestBed, ns: str, admitted: int) -> bool:
    """Kubernetes' quota controller counts every admitted binding."""
    q = bed.get("resourcequota", "storm", namespace=ns) or {}
    used = (q.get("status") or {}).get("used", {}).get(KUBE_COUNTED)
    return used is not None and Quantity.parse(used) == Quantity.parse(str(admitted))


def observed(bed: TestBed, ns: str, admitted: int) -> bool:
    """The controller counts every admitted binding and holds no pending charge any more."""
    q = bed.get("karmadaquota", "storm", namespace=ns) or {}
    held = KarmadaQuota.model_validate(q).status.reservations if q else []
    pods = q.get("status", {}).get("used", {}).get("pods")
    # canonical quantities: 5000 pods read "5k"
    return pods is not None and Quantity.parse(pods) == Quantity.parse(str(admitted)) and not held


class Sizes:
    """The largest version of the namespace's quota (JSON bytes, as stored), from a watch:
    every version is seen, and the storm pays one more watcher instead of a GET every few
    milliseconds (polling had put hundreds of reads of the object into the quota storm)."""

    def __init__(self, api: KubeClient, ns: str) -> None:
        self.largest = 0
        # of the largest version: pending entries, their groups, bytes of status.pending
        self.pending = (0, 0, 0)
        self._task = asyncio.create_task(self._watch(api, ns))

    def _see(self, obj: dict[str, Any]) -> None:
        size = len(orjson.dumps(obj))
        if size > self.largest:
            self.largest = size
            groups = (obj.get("status") or {}).get("pending") or []
            entries = sum(len(g.get("bindings") or []) for g in groups if isinstance(g, dict))
            self.pending = (entries, len(groups), len(orjson.dumps(groups)))

    async def _watch(self, api: KubeClient, ns: str) -> None:
        listed = await api.get(QUOTAS.format(ns=ns))
        for item in listed.get("items", []):
            self._see(item)
        rv = str(listed.get("metadata", {}).get("resourceVersion", ""))
        while True:
            async for _, obj in api.watch(QUOTAS.format(ns=ns), rv, timeout_seconds=600):
                self._see(obj)
                rv = str(obj.get("metadata", {}).get("resourceVersion", rv))

    async def stop(self) -> int:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.largest


def writes(metrics: dict[str, float], result: str) -> float:
    """Status writes a process has sent so far with that result (ok, conflict: lost)."""
    return float(metrics.get(f'karmadaquota_status_writes_total{{result="{result}"}}', 0.0))


async def one_storm(
    it: harness.Installed, pids: dict[str, int], kind: str, ns: str, args: argparse.Namespace
) -> dict[str, Any]:
    bed, api, hook = it.bed, it.api, it.hook
    await prepare(bed, ns, kind, room(args, kind), args.guarded)
    versions = await templates(api, ns, args.count) if args.templated and kind != "cluster" else {}
    cpu_before = cpu_by_process(pids)
    hook_text = await hook.metrics()
    hook_before, ctl_before = product.parse_metrics(hook_text), await it.controller_metrics()
    conn_before = opened(hook_text)
    sizes = Sizes(api, ns) if kind == "quota" else None
    if kind == "cluster":
        res = await spread_storm(api, ns, args)
    else:
        res = await storm(
            api,
            RB.format(ns=ns),
            lambda i: templated(binding(ns, f"x-{i:04d}"), versions),
            args.count,
            concurrency=args.concurrency,
            deadline=300,
        )
    largest = await sizes.stop() if sizes else 0
    pending = sizes.pending if sizes else (0, 0, 0)
    if len(res.admitted) != room(args, kind) or (
        kind == FULL and not all("exceeded quota: storm," in m for m in res.denied.values())
    ):
        raise AssertionError(
            f"{kind}: {len(res.admitted)} of {args.count} admitted, "
            f"room for {room(args, kind)}: {res.failures()}"
        )
    if kind in ("quota", "floor", FULL, COHORT):
        n = len(res.admitted) if kind != "floor" else 0
        await eventually(lambda: kind == "floor" or observed(bed, ns, n), 120, f"{ns} observed")
    if kind == "cluster":
        n = len(res.admitted)
        await eventually(lambda: cluster_observed(bed, ns, n), 120, f"{ns} observed")
    if kind == KUBE:
        n = len(res.admitted)
        await eventually(lambda: kube_observed(bed, ns, n), 120, f"{ns} observed")
    cpu_after = cpu_by_process(pids)
    hook_text = await hook.metrics()
    hook_after, ctl_after = product.parse_metrics(hook_text), await it.controller_metrics()
    return {
        "throughput": res.throughput,
        "p99": res.percentile(99) * 1000,
        "cpu": {n: (cpu_after[n] - cpu_before[n]) * 1000 / args.count for n in pids},
        "webhook_writes": (writes(hook_after, "ok") - writes(hook_before, "ok")) / args.count,
        "controller_writes": (writes(ctl_after, "ok") - writes(ctl_before, "ok")) / args.count,
        "webhook_lost": (writes(hook_after, "conflict") - writes(hook_before, "conflict"))
        / args.count,
        "controller_lost": (writes(ctl_after, "conflict") - writes(ctl_before, "conflict"))
        / args.count,
        "connections": (opened(hook_text) - conn_before) / args.count,
        "largest": largest,
        "pending": pending,
    }


async def templates(api: KubeClient, ns: str, count: int) -> dict[str, str]:
    """`--templated`: a Deployment per binding of the storm (no policy selects them: Karmada
    makes no binding of its own), created before the storm's measurement; name -> version."""
    versions: dict[str, str] = {}
    gate = asyncio.Semaphore(48)

    async def one(i: int) -> None:
        name = f"x-{i:04d}"
        async with gate:
            got = await api.request(
                "POST",
                f"/apis/apps/v1/namespaces/{ns}/deployments",
                deployment(ns, name, 1, {"cpu": "100m"}),
            )
        versions[name] = str(got["metadata"]["resourceVersion"])

    await asyncio.gather(*(one(i) for i in range(count)))
    return versions


def templated(doc: dict[str, Any], versions: dict[str, str]) -> dict[str, Any]:
    """The binding names its Deployment's version, as Karmada's detector does: charged with
    the template's pod (kube/templates.py); unchanged without `--templated`."""
    ref = doc["spec"]["resource"]
    if ref["name"] in versions:
        ref["resourceVersion"] = versions[ref["name"]]
    return doc


def composition(row: dict[str, Any]) -> str:
    """What the largest quota object of a storm held in status.pending."""
    entries, groups, size = row["pending"]
    return f"{entries} pending entries in {groups} group(s), {size / 1024:.1f} KB of status.pending"


def propagate_all(ns: str, member: str) -> dict[str, Any]:
    """A PropagationPolicy sending every Deployment of `ns` to `member`."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "all", "namespace": ns},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": {"clusterAffinity": {"clusterNames": [member]}},
        },
    }


async def scheduled(api: KubeClient, ns: str, n: int) -> bool:
    """Whether `n` bindings of `ns` are scheduled."""
    items = (await api.get(RB.format(ns=ns))).get("items", [])
    done = [
        b
        for b in items
        if any(
            c.get("type") == "Scheduled" and c.get("status") == "True"
            for c in b.get("status", {}).get("conditions", [])
        )
    ]
    return len(done) == n


async def user_path(it: harness.Installed, quota: bool, n: int, tag: str) -> float:
    """`n` Deployments + one PropagationPolicy: seconds until every binding is scheduled."""
    bed = it.bed
    ns = f"bench-path-{tag}"
    await prepare(bed, ns, "quota" if quota else "no-quota", n * 10)
    policy = propagate_all(ns, sorted(bed.members)[0])
    deployments = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"web-{i:03d}", "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": f"web-{i:03d}"}},
                "template": {
                    "metadata": {"labels": {"app": f"web-{i:03d}"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "nginx",
                                "resources": {"requests": {"cpu": "100m"}},
                            }
                        ]
                    },
                },
            },
        }
        for i in range(n)
    ]
    started = time.perf_counter()
    await bed.aapply([policy, *deployments])
    done = functools.partial(scheduled, it.api, ns, n)
    await eventually(done, 300, f"{n} bindings scheduled in {ns}", interval=0.05)
    return time.perf_counter() - started


def report(
    args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]], paths: dict[str, list[float]]
) -> str:
    def med(kind: str, f: Any) -> float:
        return float(statistics.median(f(r) for r in rows[kind]))

    storms = kinds(args)
    tput = {k: med(k, lambda r: r["throughput"]) for k in storms}
    machine = {k: med(k, lambda r: sum(r["cpu"].values())) for k in storms}

    def ctl(kind: str) -> float:
        return med(kind, lambda r: r["cpu"]["karmadaquota controller"])

    limit = tput["no-webhook"]
    lines = [
        f"{args.count} creates × {args.concurrency} in flight per storm, {args.rounds} rounds, "
        "medians; every storm admitted every create"
        + (f" (full: exactly {room(args, FULL)}, the rest refused)." if args.full else "."),
        "",
        "| storm | creates/s | ratio to no webhook | machine CPU ms/create | karmada-apiserver | "
        "our webhook | our controller | status writes/create (webhook + controller) | "
        "lost compare-and-swaps/create (webhook + controller) | new connections/create | "
        "p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in storms:
        lines.append(
            f"| {k} | {tput[k]:.0f} | {tput[k] / limit:.2f} | {machine[k]:.2f} | "
            f"{med(k, lambda r: r['cpu']['karmada-apiserver']):.2f} | "
            f"{med(k, lambda r: r['cpu']['karmadaquota webhook']):.2f} | "
            f"{med(k, lambda r: r['cpu']['karmadaquota controller']):.2f} | "
            f"{med(k, lambda r: r['webhook_writes']):.3f} + "
            f"{med(k, lambda r: r['controller_writes']):.3f} | "
            f"{med(k, lambda r: r['webhook_lost']):.3f} + "
            f"{med(k, lambda r: r['controller_lost']):.3f} | "
            f"{med(k, lambda r: r['connections']):.2f} | {med(k, lambda r: r['p99']):.0f} |"
        )
    biggest = max(rows["quota"], key=lambda r: r["largest"])
    sizes = ", ".join(f"{r['largest'] / 1024:.1f}" for r in rows["quota"])
    per_round = [
        f"{r['throughput'] / n['throughput']:.2f}"
        for r, n in zip(rows["quota"], rows["no-webhook"], strict=True)
    ]
    lines += [
        "",
        f"**quota / no webhook {tput['quota'] / limit:.2f}** (rounds: {', '.join(per_round)}); "
        f"no quota / no webhook {tput['no-quota'] / limit:.2f}; "
        f"quota / floor {tput['quota'] / tput['floor']:.2f}; "
        f"**ours / Kubernetes' (quota / kube quota) {tput['quota'] / tput[KUBE]:.2f}** (rounds: "
        + ", ".join(
            f"{q['throughput'] / k['throughput']:.2f}"
            for q, k in zip(rows["quota"], rows[KUBE], strict=True)
        )
        + f"); kube quota / no webhook {tput[KUBE] / limit:.2f}; "
        f"**cluster ({SPREAD} namespaces, one ClusterKarmadaQuota) / quota "
        f"{tput['cluster'] / tput['quota']:.2f}** (rounds: "
        + ", ".join(
            f"{c['throughput'] / q['throughput']:.2f}"
            for c, q in zip(rows["cluster"], rows["quota"], strict=True)
        )
        + "); "
        f"machine CPU per create, quota minus no webhook: "
        f"{machine['quota'] - machine['no-webhook']:+.2f} ms; largest quota object during the "
        f"quota storms: {biggest['largest'] / 1024:.1f} KB ({composition(biggest)}; per round: "
        f"{sizes} KB).",
    ]
    if args.full:
        lines += [
            "",
            f"**full (room for {args.full:.0%}) / no webhook {tput[FULL] / limit:.2f}** "
            "(answers per second; rounds: "
            + ", ".join(
                f"{f['throughput'] / n['throughput']:.2f}"
                for f, n in zip(rows[FULL], rows["no-webhook"], strict=True)
            )
            + f"); machine CPU per create, full minus no webhook: "
            f"{machine[FULL] - machine['no-webhook']:+.2f} ms.",
        ]
    if args.cohort:
        lines += [
            "",
            f"**cohort / quota {tput[COHORT] / tput['quota']:.2f}** (rounds: "
            + ", ".join(
                f"{c['throughput'] / q['throughput']:.2f}"
                for c, q in zip(rows[COHORT], rows["quota"], strict=True)
            )
            + "); controller CPU per create, cohort minus quota: "
            + f"{ctl(COHORT) - ctl('quota'):+.2f} ms.",
        ]
    lines += [
        "",
        "CPU ms per create of every process (median), quota storm vs no webhook:",
        "",
        "| process | " + " | ".join(k.replace("-", " ") for k in storms) + " |",
        "|---|" + "---|" * len(storms),
    ]
    names = sorted(rows["quota"][0]["cpu"], key=lambda n: -med("quota", lambda r, n=n: r["cpu"][n]))
    for n in names:
        vals = [med(k, lambda r, n=n: r["cpu"][n]) for k in storms]
        if max(vals) >= 0.01:
            lines.append(f"| {n} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    if paths["quota"]:
        q, u = statistics.median(paths["quota"]), statistics.median(paths["none"])
        lines += [
            "",
            f"User path, {args.deployments} Deployments + one PropagationPolicy until every "
            f"binding is scheduled (median of {len(paths['quota'])}): quota {q:.2f} s, "
            f"unenforced {u:.2f} s, **unenforced / quota {u / q:.2f}**.",
        ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> str:
    async with harness.installed() as it:
        pids = processes(
            it.bed,
            {
                "karmadaquota webhook": it.hook.proc.popen.pid,
                "karmadaquota controller": it.controller.popen.pid,
            },
        )
        storms = kinds(args)
        rows: dict[str, list[dict[str, Any]]] = {k: [] for k in storms}
        paths: dict[str, list[float]] = {"quota": [], "none": []}
        for r in range(args.rounds):
            order = storms[r % len(storms) :] + storms[: r % len(storms)]
            for kind in order:
                rows[kind].append(await one_storm(it, pids, kind, f"bench-{kind}-{r}", args))
            if args.deployments:
                for quota, key in (
                    ((True, "quota"), (False, "none"))
                    if r % 2 == 0
                    else ((False, "none"), (True, "quota"))
                ):
                    paths[key].append(await user_path(it, quota, args.deployments, f"{key}-{r}"))
        text = report(args, rows, paths)
        if args.long:
            print(text, flush=True)  # the rounds' figures survive a failing long storm
            return await long_storm(it, pids, args)
        return text


async def long_storm(it: harness.Installed, pids: dict[str, int], args: argparse.Namespace) -> str:
    """One quota storm of `--long` creates: every one must be admitted at the first attempt
    (the storm does not retry, so a single 429 'try again' fails the bench)."""
    long = argparse.Namespace(**{**vars(args), "count": args.long})
    row = await one_storm(it, pids, "quota", "bench-quota-long", long)
    return (
        f"Long storm: {args.long} creates × {args.concurrency} in flight into one quota, "
        f"every create admitted at its first attempt (no 429): {row['throughput']:.0f} "
        f"creates/s, largest quota object {row['largest'] / 1024:.1f} KB ({composition(row)}), "
        f"status writes/create "
        f"{row['webhook_writes']:.3f} (webhook) + {row['controller_writes']:.3f} (controller)."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--count", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--deployments", type=int, default=100, help="0: skip the user path")
    p.add_argument("--long", type=int, default=0, help="then one quota storm of this many")
    p.add_argument(
        "--full",
        type=float,
        default=0.0,
        help="and a storm into a quota with room for this fraction of the creates",
    )
    p.add_argument(
        "--cohort",
        action="store_true",
        help="and a quota storm into a quota of a cohort (with an idle second quota)",
    )
    p.add_argument(
        "--guarded",
        action="store_true",
        help="the quota storms' quotas keep member guards (memberEnforcement: ResourceQuota)",
    )
    p.add_argument(
        "--templated",
        action="store_true",
        help="each binding names a real Deployment's version (charged with its pod)",
    )
    print(asyncio.run(run(p.parse_args())), flush=True)


if __name__ == "__main__":
    main()
