"""Admission benchmark: our webhook vs the API server's own ResourceQuota admission, side by side.

One real test bed, one karmada-apiserver, one run:

1. storm of N concurrent ResourceBinding creates in one namespace against a KarmadaQuota that
   admits exactly N*3/5 (our webhook + controller, registered through a real
   ValidatingWebhookConfiguration);
2. the same storm of Pod creates against a ResourceQuota (`pods`, `requests.cpu`) admitting the
   same count (the built-in admission plugin + kube-controller-manager's quota controller);
3. a paced load of binding creates at R/s, reading the webhook's own server-side latency
   histogram (`karmadaquota_admission_duration_seconds`) before and after.

Storms alternate (bindings, pods, bindings, pods, …) so that machine noise hits both alike.
Prints a markdown table; the figures that matter are ratios, not absolute times.

    python -m bench.bench_admission [--count 500] [--concurrency 48] [--rounds 3]
        [--rates 50,100,200] [--seconds 10] [--webhook-arg=--event-loop=uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import harness, profiles
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import StormResult, binding, pod, storm
from karmadaquota.api import KarmadaQuota
from karmadaquota.kube.client import KubeClient

# bindings with a KarmadaQuota; Pods with a ResourceQuota; and, for scale, bindings in a
# namespace without any quota (Karmada's own binding path: its webhooks, no charging).
KINDS = ("bindings", "pods", "bindings-no-quota")
RB = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
PODS = "/api/v1/namespaces/{ns}/pods"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes(bed: TestBed, named: dict[str, int]) -> dict[str, int]:
    """Every process of the bed (etcd, API servers, Karmada's components) and ours, by name."""
    assert bed.supervisor is not None
    out = {c.name: c.pid for c in bed.supervisor.components if c.exit_code() is None}
    return out | named


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def opened(metrics: str) -> float:
    """Connections the webhook has accepted so far (`karmadaquota_webhook_connections_total`)."""
    for line in metrics.splitlines():
        if line.startswith('karmadaquota_webhook_connections_total{event="opened"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def histogram(metrics: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of a Prometheus histogram, summed over its label sets."""
    out: dict[float, float] = {}
    for line in metrics.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bucket bound holding the q-quantile of the observations between two scrapes."""
    bounds = sorted(after)
    total = after[float("inf")] - before.get(float("inf"), 0.0)
    for b in bounds:
        if after[b] - before.get(b, 0.0) >= q * total:
            return b
    return float("inf")


async def namespace_with_quota(bed: TestBed, ns: str, kind: str, admit: int) -> None:
    await bed.akubectl("create", "namespace", ns)
    cpu = f"{admit * 100}m"
    if kind == "bindings":
        await bed.aapply(product.quota(ns, "storm", {"requests.cpu": cpu, "pods": str(admit)}))

        def ready() -> bool:
            q = bed.get("karmadaquota", "storm", namespace=ns) or {}
            return "requests.cpu" in q.get("status", {}).get("used", {})

        await eventually(ready, 60, f"KarmadaQuota in {ns} initialised")
    else:
        await bed.aapply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": ns},
                },
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": {"name": "storm", "namespace": ns},
                    "spec": {"hard": {"requests.cpu": cpu, "pods": str(admit)}},
                },
            ]
        )

        def ready() -> bool:
            q = bed.get("resourcequota", "storm", namespace=ns) or {}
            return "requests.cpu" in q.get("status", {}).get("used", {})

        await eventually(ready, 60, f"ResourceQuota in {ns} initialised")


def observed(bed: TestBed, ns: str, admit: int) -> bool:
    """The controller counts every admitted binding (pods = bindings) and holds no
    reservation any more."""
    q = bed.get("karmadaquota", "storm", namespace=ns) or {}
    held = KarmadaQuota.model_validate(q).status.reservations if q else []
    return q.get("status", {}).get("used", {}).get("pods") == str(admit) and not held


async def run(args: argparse.Namespace) -> str:
    skip = profiles.available() if args.profile else "profiling off (--profile)"
    apiserver_args = ["--profiling=true"] if skip is None else []
    async with harness.installed(args.webhook_arg, apiserver_args) as it:
        bed, hook, api, home = it.bed, it.hook, it.api, it.home
        admit = args.count * 3 // 5
        results: dict[str, list[StormResult]] = {k: [] for k in KINDS}
        pids = processes(
            bed,
            {
                "karmadaquota webhook": hook.proc.popen.pid,
                "karmadaquota controller": it.controller.popen.pid,
            },
        )
        # CPU per create of every process, per kind: where the cost of a quota goes
        spent: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        handshakes: dict[str, list[float]] = {k: [] for k in KINDS}  # webhook connections
        shortfalls: list[str] = []
        # with --profile, one more round of the two binding storms, profiled and not counted
        # in the medians (the profilers take CPU of their own)
        samples: dict[str, list[Path]] = {}
        profiled_spent: dict[str, dict[str, float]] = {}
        rounds = [str(r) for r in range(args.rounds)] + (["profiled"] if skip is None else [])
        for r in rounds:
            measured = r != "profiled"
            for kind in KINDS if measured else ("bindings", "bindings-no-quota"):
                ns = f"bench-{kind}-{r}"
                expected = admit
                if kind == "bindings-no-quota":
                    await bed.akubectl("create", "namespace", ns)
                    expected = args.count
                else:
                    await namespace_with_quota(bed, ns, kind, admit)
                path, make = (PODS, pod) if kind == "pods" else (RB, binding)
                all_before = cpu_by_process(pids)
                conn_before = opened(await hook.metrics())
                profiling = (
                    None
                    if measured
                    else asyncio.gather(*profile(bed, pids, kind, home, args.profile_seconds))
                )
                res = await storm(
                    api,
                    path.format(ns=ns),
                    lambda i, ns=ns, m=make: m(ns, f"x-{i:04d}"),
                    args.count,
                    concurrency=args.concurrency,
                    deadline=300,
                )
                if profiling is not None:
                    samples[kind] = await profiling
                if len(res.admitted) > expected:
                    raise AssertionError(f"{kind}: admitted {len(res.admitted)} > {expected}")
                if len(res.admitted) < expected:  # reported: timeouts on a loaded machine
                    shortfalls.append(
                        f"{kind} round {r}: admitted {len(res.admitted)} of {expected}; refused: "
                        + ", ".join(f"{n} {k}" for k, n in res.failures().most_common())
                    )
                if kind == "bindings":
                    # the controller's share includes observing the admitted bindings afterwards
                    admitted = len(res.admitted)
                    await eventually(
                        lambda ns=ns, n=admitted: observed(bed, ns, n),
                        120,
                        f"usage observed in {ns}",
                    )
                all_after = cpu_by_process(pids)
                per_create = {n: (all_after[n] - all_before[n]) * 1000 / args.count for n in pids}
                if not measured:
                    profiled_spent[kind] = per_create
                    continue
                handshakes[kind].append((opened(await hook.metrics()) - conn_before) / args.count)
                spent[kind].append(per_create)
                results[kind].append(res)
        profiled = [
            *where(profiled_spent, samples, skip),
            "",
            "Connections the API server opened to the webhook (each a TLS handshake) per create, "
            "median: "
            + ", ".join(
                f"{k} {statistics.median(handshakes[k]):.2f}" for k in KINDS if k != "pods"
            ),
        ]
        # the storm tables first: the paced load may take long on a loaded machine
        storms = report(args, results, [], admit, shortfalls, spent)
        print("\n".join([storms, *profiled]), flush=True)
        paced = [await paced_load(bed, api, hook, rate, args.seconds) for rate in args.rates]
        final = report(args, results, paced, admit, shortfalls, spent)
        return "\n".join([final, *profiled])


async def paced_load(
    bed: TestBed, api: KubeClient, hook: product.WebhookProc, rate: int, seconds: int
) -> dict[str, Any]:
    """Binding creates at `rate`/s for `seconds`; the webhook's own latency percentiles."""
    ns = f"bench-paced-{rate}"
    total = rate * seconds
    await namespace_with_quota(bed, ns, "bindings", total + 10)
    name = "karmadaquota_admission_duration_seconds"
    own = "karmadaquota_admission_own_duration_seconds"
    scraped = await hook.metrics()
    before, before_o = histogram(scraped, name), histogram(scraped, own)
    cpu_before = cpu_seconds(hook.proc.popen.pid)
    interval = 1.0 / rate
    started = time.perf_counter()
    tasks = []
    for i in range(total):
        delay = started + i * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the load generator, not synchronisation
        tasks.append(asyncio.create_task(api.post(RB.format(ns=ns), binding(ns, f"p-{i:05d}"))))
    _, late = await asyncio.wait(tasks, timeout=120)
    for t in late:  # unanswered after 2 minutes on an overloaded machine: counted as failed
        t.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    failed = len(late)
    for t in tasks:
        if t in late:
            continue
        if t.exception() is not None:  # refused, or the client's own timeout
            failed += 1
    achieved = total / (time.perf_counter() - started)
    cpu = cpu_seconds(hook.proc.popen.pid) - cpu_before
    scraped = await hook.metrics()
    after, after_o = histogram(scraped, name), histogram(scraped, own)
    reviews = after[float("inf")] - before[float("inf")]
    return {
        "rate": rate,
        "achieved": achieved,
        "failed": failed,
        "count": total,
        "p50": quantile(before, after, 0.50),
        "p99": quantile(before, after, 0.99),
        "own_p50": quantile(before_o, after_o, 0.50),
        "own_p99": quantile(before_o, after_o, 0.99),
        "cpu_ms_per_review": cpu * 1000 / reviews if reviews else 0.0,
    }


def report(
    args: argparse.Namespace,
    results: dict[str, list[StormResult]],
    paced: list[dict[str, Any]],
    admit: int,
    shortfalls: list[str],
    spent: dict[str, list[dict[str, float]]],
) -> str:
    def med(kind: str, f: Any) -> float:
        return statistics.median(f(r) for r in results[kind])

    tput = {k: med(k, lambda r: r.throughput) for k in results}
    p50 = {k: med(k, lambda r: r.percentile(50) * 1000) for k in results}
    p99 = {k: med(k, lambda r: r.percentile(99) * 1000) for k in results}
    hook_ms = statistics.median(r["karmadaquota webhook"] for r in spent["bindings"])
    ctl_ms = statistics.median(r["karmadaquota controller"] for r in spent["bindings"])
    lines = [
        f"Storm: {args.count} creates, {args.concurrency} in flight, in one namespace, quota "
        f"admits {admit}; "
        f"median of {args.rounds} alternating rounds; "
        + (
            f"exactly {admit} admitted every round."
            if not shortfalls
            else "never more than the quota; fewer in: " + "; ".join(shortfalls) + "."
        ),
        "",
        "| admission | throughput (req/s) | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|",
        f"| ResourceBindings, karmadaquota webhook | {tput['bindings']:.0f} | "
        f"{p50['bindings']:.0f} | {p99['bindings']:.0f} |",
        f"| Pods, built-in ResourceQuota | {tput['pods']:.0f} | {p50['pods']:.0f} | "
        f"{p99['pods']:.0f} |",
        f"| ResourceBindings, no quota (Karmada's own path) | {tput['bindings-no-quota']:.0f} | "
        f"{p50['bindings-no-quota']:.0f} | {p99['bindings-no-quota']:.0f} |",
        f"| **ratio webhook / built-in** | **{tput['bindings'] / tput['pods']:.2f}** | | |",
        f"| **ratio with / without KarmadaQuota** | "
        f"**{tput['bindings'] / tput['bindings-no-quota']:.2f}** | | |",
        "",
        f"CPU per create in the quota storm (process CPU over the storm until the controller "
        f"has observed every admitted binding, ÷ {args.count} creates): webhook "
        f"{hook_ms:.2f} ms, controller {ctl_ms:.2f} ms, together {hook_ms + ctl_ms:.2f} ms.",
        "",
        "CPU per create of every process on the bed (ms, median over rounds), in the binding "
        "storm with the quota and without; the difference is what the quota costs the machine:",
        "",
        *breakdown(spent),
        "",
        f"Paced binding creates for {args.seconds} s each; server-side latency from the "
        "webhook's own histograms (upper bucket bounds); own share = review latency minus the "
        "time its namespace spent in quota API calls (status writes) meanwhile:",
        "",
        "| offered rate | achieved | failed | review p50 | review p99 | own share p50 | own p99 "
        "| webhook CPU per review |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in paced:
        lines.append(
            f"| {p['rate']}/s | {p['achieved']:.0f}/s | {p['failed']} | ≤ {p['p50'] * 1000:g} ms | "
            f"≤ {p['p99'] * 1000:g} ms | ≤ {p['own_p50'] * 1000:g} ms | "
            f"≤ {p['own_p99'] * 1000:g} ms | {p['cpu_ms_per_review']:.2f} ms |"
        )
    return "\n".join(lines)


PROFILED = (
    ("karmada-apiserver", profiles.APISERVER_SHARES),
    ("karmadaquota webhook", profiles.WEBHOOK_SHARES),
    ("karmadaquota controller", profiles.CONTROLLER_SHARES),
)


def profile(bed: TestBed, pids: dict[str, int], kind: str, home: Path, seconds: int) -> list[Any]:
    """The three profilers over the next `seconds` (started with the storm, so inside it)."""
    out = home / "profiles"
    out.mkdir(exist_ok=True)
    return [
        profiles.apiserver(bed, seconds, out / f"apiserver-{kind}.pb.gz"),
        profiles.python(pids["karmadaquota webhook"], seconds, out / f"webhook-{kind}.txt"),
        profiles.python(pids["karmadaquota controller"], seconds, out / f"controller-{kind}.txt"),
    ]


def where(
    spent: dict[str, dict[str, float]], samples: dict[str, list[Path]], skip: str | None
) -> list[str]:
    """Each profiled process's CPU per create split into its shares, with quota and without."""
    if skip is not None:
        return ["", f"({skip})"]
    lines = [
        "",
        "Where the CPU of a create goes (profiled in an extra round of the two binding storms, "
        "not counted above: a share of the samples × the process's CPU per create in that "
        "storm; indented rows are part of the row above, webhook calls part of creates):",
    ]
    for i, (process, shares) in enumerate(PROFILED):
        lines += ["", f"| {process} | with quota (ms) | without (ms) | difference |"]
        lines.append("|---|---|---|---|")
        split = {}
        for kind in ("bindings", "bindings-no-quota"):
            path = samples[kind][i]
            frac = (
                profiles.pprof_shares(path, shares)
                if path.suffix == ".gz"
                else profiles.spy_shares(path, shares)
            )
            split[kind] = {n: f * spent[kind][process] for n, f in frac.items()}
        for name in split["bindings"]:
            w, wo = split["bindings"][name], split["bindings-no-quota"][name]
            label = name.replace("  ", "↳ ", 1) if name.startswith("  ") else name
            lines.append(f"| {label} | {w:.2f} | {wo:.2f} | {w - wo:+.2f} |")
        w, wo = spent["bindings"][process], spent["bindings-no-quota"][process]
        lines.append(f"| **whole process** | **{w:.2f}** | **{wo:.2f}** | **{w - wo:+.2f}** |")
    return lines


def breakdown(spent: dict[str, list[dict[str, float]]]) -> list[str]:
    names = sorted(
        spent["bindings"][0],
        key=lambda n: -statistics.median(r[n] for r in spent["bindings"]),
    )

    def med(kind: str, name: str) -> float:
        return statistics.median(r[name] for r in spent[kind])

    rows = ["| process | with quota | without | difference |", "|---|---|---|---|"]
    total = {"bindings": 0.0, "bindings-no-quota": 0.0}
    for n in names:
        w, wo = med("bindings", n), med("bindings-no-quota", n)
        total["bindings"] += w
        total["bindings-no-quota"] += wo
        if w >= 0.01 or wo >= 0.01:
            rows.append(f"| {n} | {w:.2f} | {wo:.2f} | {w - wo:+.2f} |")
    w, wo = total["bindings"], total["bindings-no-quota"]
    rows.append(f"| **all** | **{w:.2f}** | **{wo:.2f}** | **{w - wo:+.2f}** |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=48, help="requests in flight at once")
    p.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=[50, 100, 200])
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument(
        "--webhook-arg",
        action="append",
        default=[],
        help="extra webhook flag, e.g. --webhook-arg=--event-loop=uvloop",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile karmada-apiserver (pprof), the webhook and the controller (py-spy) in "
        "round 0's binding storms and print where each one's CPU per create goes",
    )
    p.add_argument("--profile-seconds", type=int, default=3, help="profile window, inside a storm")
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
