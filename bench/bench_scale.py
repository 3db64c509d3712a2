"""Scale benchmark on a real API server: many quotas, many bindings, one very large namespace.

Objects are created first (namespaces, a KarmadaQuota each, bindings), with karmadaquota not
running; then the controller starts cold and the webhook starts and syncs its cache:

* controller cold start: process start until every quota reports `Ready=True` with usage
  counting all of its namespace's bindings;
* webhook cache sync: process start until `/readyz` answers 200;
* RSS (and peak RSS) of both processes once settled;
* admission latency of sequential binding creates (client side, through the API server) in
  the big namespace vs a small one, and the webhook's own share (server side histogram).

    python -m bench.bench_scale [--namespaces 50] [--per-namespace 20] [--big 2000] [--probes 50]

The figures the design targets: `--namespaces 1000 --per-namespace 20 --big 10000`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from bench.bench_admission import histogram, quantile
from e2e.testbed import TestBed, product
from e2e.testbed.storm import binding
from karmadaquota.kube.client import JSON, KubeClient, KubeError
from karmadaquota.quantity import Quantity

RB = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
ALL_QUOTAS = "/apis/quota.karmada.io/v1alpha1/karmadaquotas"
BIG = "scale-big"


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of a process, MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def bounded(
    api: KubeClient, posts: Iterable[tuple[str, JSON]], limit: int = 16, tries: int = 5
) -> None:
    """POST each object, `limit` at a time; a server error (a timed-out webhook of Karmada's
    on a loaded machine) is retried, an object that already exists counts as created."""
    gate = asyncio.Semaphore(limit)

    async def one(path: str, body: JSON) -> None:
        async with gate:
            for attempt in range(tries):
                try:
                    await api.post(path, body)
                    return
                except KubeError as e:
                    if e.status == 409:
                        return
                    if e.status < 500 or attempt == tries - 1:
                        raise

    await asyncio.gather(*(one(p, b) for p, b in posts))


async def populate(api: KubeClient, namespaces: list[str], per_ns: int, big: int) -> None:
    """Namespaces, one quota each (room for everything), bindings; karmadaquota not running."""

    def ns_obj(ns: str) -> JSON:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}

    await bounded(api, (("/api/v1/namespaces", ns_obj(ns)) for ns in [*namespaces, BIG]))
    counts = {ns: per_ns for ns in namespaces} | {BIG: big}
    await bounded(
        api,
        (
            (
                QUOTAS.format(ns=ns),
                product.quota(ns, "q", {"requests.cpu": str(n + 1000), "pods": str(n + 10000)}),
            )
            for ns, n in counts.items()
        ),
    )
    await bounded(
        api,
        (
            (RB.format(ns=ns), binding(ns, f"b-{i:05d}"))
            for ns, n in counts.items()
            for i in range(n)
        ),
    )


async def ready_count(api: KubeClient, counts: dict[str, int]) -> int:
    """Quotas Ready and counting every binding of their namespace (pods = bindings)."""
    items = (await api.get(ALL_QUOTAS)).get("items", [])
    ready = 0
    for q in items:
        ns = q["metadata"]["namespace"]
        status = q.get("status", {})
        cond = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
        pods = status.get("used", {}).get("pods")
        if (
            cond.get("Ready") == "True"
            and pods is not None
            and Quantity.parse(pods) == Quantity.from_int(counts.get(ns, -1))
        ):  # a quantity compared as one: 10000 is written in canonical form, "10k"
            ready += 1
    return ready


async def probe(api: KubeClient, ns: str, count: int, tag: str) -> tuple[list[float], int]:
    """Sequential creates: client-side latency of each answer (seconds) and how many were
    refused (a quota whose status the controller has not written yet refuses)."""
    out, refused = [], 0
    for i in range(count):
        t0 = time.perf_counter()
        try:
            await api.post(RB.format(ns=ns), binding(ns, f"{tag}-{i:04d}"))
        except KubeError:
            refused += 1
        out.append(time.perf_counter() - t0)
    return out, refused


async def run(args: argparse.Namespace) -> str:
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-scale-"))
    bed = TestBed.start(home, ["member1"], ephemeral=True, quiet=True)
    procs: list[product.Proc] = []
    try:
        await asyncio.to_thread(product.install_crd, bed)
        api = await KubeClient.connect(str(bed.karmada_kubeconfig))
        namespaces = [f"scale-{i:04d}" for i in range(args.namespaces)]
        counts = {ns: args.per_namespace for ns in namespaces} | {BIG: args.big}
        t0 = time.perf_counter()
        await populate(api, namespaces, args.per_namespace, args.big)
        populate_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        controller, _ = product.start_controller(bed, "scale-controller")
        procs.append(controller)
        ready = 0
        while ready < len(counts) and time.perf_counter() - t0 < args.ready_timeout:
            ready = await ready_count(api, counts)
            await asyncio.sleep(0.5)  # polling the quotas' status with a deadline
        cold_start = time.perf_counter() - t0

        t0 = time.perf_counter()
        hook = await product.start_webhook(bed, "scale-webhook")
        procs.append(hook.proc)
        sync = time.perf_counter() - t0
        await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle)

        latency: dict[str, tuple[list[float], int]] = {}
        own: dict[str, tuple[float, float]] = {}
        review: dict[str, tuple[float, float]] = {}
        name = "karmadaquota_admission_own_duration_seconds"
        whole = "karmadaquota_admission_duration_seconds"
        for label, ns in (("small", namespaces[0]), ("big", BIG)):
            scraped = await hook.metrics()
            before, before_r = histogram(scraped, name), histogram(scraped, whole)
            latency[label] = await probe(api, ns, args.probes, f"probe-{label}")
            scraped = await hook.metrics()
            after, after_r = histogram(scraped, name), histogram(scraped, whole)
            own[label] = (quantile(before, after, 0.5), quantile(before, after, 0.99))
            review[label] = (quantile(before_r, after_r, 0.5), quantile(before_r, after_r, 0.99))
        rss = {"controller": rss_mib(controller.popen.pid), "webhook": rss_mib(hook.proc.popen.pid)}
        await api.close()
        await asyncio.to_thread(product.unregister, bed)
        return report(args, populate_s, (cold_start, ready), sync, rss, latency, own, review)
    finally:
        for p in procs:
            p.stop()
        bed.stop()
        shutil.rmtree(home, ignore_errors=True)


def report(
    args: argparse.Namespace,
    populate_s: float,
    cold_start: tuple[float, int],
    sync: float,
    rss: dict[str, tuple[float, float]],
    latency: dict[str, tuple[list[float], int]],
    own: dict[str, tuple[float, float]],
    review: dict[str, tuple[float, float]],
) -> str:
    total = args.namespaces * args.per_namespace + args.big
    quotas = args.namespaces + 1

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000

    lines = [
        f"{args.namespaces} namespaces × (1 KarmadaQuota + {args.per_namespace} bindings) + "
        f"one namespace with {args.big} bindings: {quotas} quotas, {total} bindings "
        f"(created in {populate_s:.0f} s before karmadaquota started).",
        "",
        "| measure | value |",
        "|---|---|",
        f"| controller cold start until every quota Ready and counting | {cold_start[0]:.1f} s"
        + (
            " |"
            if cold_start[1] == quotas
            else f": only {cold_start[1]} of {quotas} Ready at the deadline |"
        ),
        f"| webhook start until cache synced (/readyz) | {sync:.1f} s |",
    ]
    for who, (now, peak) in rss.items():
        lines.append(f"| {who} RSS (peak) | {now:.0f} MiB ({peak:.0f} MiB) |")
    lines += [
        "",
        f"Admission latency, {args.probes} sequential binding creates per namespace:",
        "",
        "| namespace | bindings there | refused | client p50 | client p99 | webhook review p50 "
        "| review p99 | own p50 | own p99 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, n in (("small", args.per_namespace), ("big", args.big)):
        xs, refused = latency[label]
        lines.append(
            f"| {label} | {n} | {refused} | {statistics.median(xs) * 1000:.1f} ms | "
            f"{pct(xs, 0.99):.1f} ms | "
            f"≤ {review[label][0] * 1000:g} ms | ≤ {review[label][1] * 1000:g} ms | "
            f"≤ {own[label][0] * 1000:g} ms | ≤ {own[label][1] * 1000:g} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--per-namespace", type=int, default=20)
    p.add_argument("--big", type=int, default=2000, help="bindings in the one big namespace")
    p.add_argument("--probes", type=int, default=50, help="sequential creates per namespace")
    p.add_argument("--ready-timeout", type=float, default=300, help="bound on the cold start, s")
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
