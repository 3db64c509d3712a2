"""What one create asks of karmada-apiserver, counted by karmada-apiserver itself (issue 36).

Before a lever on the webhook call or the status write is pulled, this says how many there are:
per create, the admission webhook calls by webhook and operation, the calls its matchConditions
skipped, every request by verb, resource and subresource (our status writes among them, lost
compare-and-swaps included), the watch events sent by resource (the fan-out of those writes),
and the connections our webhook accepted (each a TLS handshake on both sides).

1. three templated binding storms (`bench_cost`'s **quota**, **floor**, **no webhook**), each
   `--count` creates with 48 in flight, diffed from karmada-apiserver's /metrics before and
   after (its controller observed the quota storm first, so its writes are in);
2. the user's path: `--deployments` Deployments and one PropagationPolicy in a namespace with
   a KarmadaQuota, until every binding is scheduled: the same counts per Deployment, and who
   wrote the bindings and Deployments (an audit log of that namespace: verb, resource,
   subresource, user), so that every review of ours has a writer.

    python -m bench.bench_calls [--count 600] [--deployments 100]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import bench_cost, harness
from bench.bench_admission import opened
from e2e.testbed import TestBed
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding, storm
from e2e.testbed.workloads import deployment

STORMS = ("quota", "floor", "no-webhook")
PATH_NS = "bench-calls-path"
# karmada-apiserver's counters this bench reads, with the labels that tell calls apart
COUNTERS = re.compile(
    r"^(apiserver_admission_webhook_request_total|"
    r"apiserver_admission_match_condition_exclusions_total|"
    r"apiserver_request_total|"
    r"apiserver_watch_events_total)\{"
)
DROPPED = re.compile(r',?(code|component|dry_run|scope|version|rejected|type|kind)="[^"]*"')
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  namespaces: [{PATH_NS}]
  verbs: [create, update, patch]
  resources:
  - group: work.karmada.io
    resources: [resourcebindings, resourcebindings/status]
  - group: apps
    resources: [deployments, deployments/status, deployments/scale]
- level: None
"""


def counters(bed: TestBed) -> collections.Counter[str]:
    """karmada-apiserver's counters, summed over the labels that do not tell calls apart."""
    text = subprocess.run(
        [bed.kubectl_binary, f"--kubeconfig={bed.karmada_kubeconfig}", "get", "--raw", "/metrics"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if COUNTERS.match(line):
            key, _, value = line.rpartition(" ")
            out[DROPPED.sub("", key).replace("{,", "{")] += int(float(value))
    return out


def per(before: collections.Counter[str], after: collections.Counter[str], n: int) -> list[str]:
    """Markdown rows: every counter that moved by at least 1 in 200, per create."""
    rows = []
    for key in sorted(after):
        moved = (after[key] - before[key]) / n
        if moved >= 0.005:
            rows.append(f"| `{key}` | {moved:.3f} |")
    return rows


async def one_storm(it: harness.Installed, kind: str, count: int) -> list[str]:
    bed, api = it.bed, it.api
    ns = f"bench-calls-{kind}"
    await bench_cost.prepare(bed, ns, kind, count)
    versions = await bench_cost.templates(api, ns, count)
    before = await asyncio.to_thread(counters, bed)
    connections = opened(await it.hook.metrics())
    res = await storm(
        api,
        bench_cost.RB.format(ns=ns),
        lambda i: bench_cost.templated(binding(ns, f"x-{i:04d}"), versions),
        count,
        concurrency=48,
        deadline=300,
    )
    if len(res.admitted) != count:
        raise AssertionError(f"{kind}: {len(res.admitted)} of {count} admitted")
    if kind == "quota":
        await eventually(lambda: bench_cost.observed(bed, ns, count), 120, f"{ns} observed")
    after = await asyncio.to_thread(counters, bed)
    connections = (opened(await it.hook.metrics()) - connections) / count
    return [
        "",
        f"**{kind}** ({res.throughput:.0f} creates/s): our webhook accepted "
        f"{connections:.3f} new connections per create.",
        "",
        "| karmada-apiserver counter | per create |",
        "|---|---|",
        *per(before, after, count),
    ]


async def user_path(it: harness.Installed, n: int, audit: Path) -> list[str]:
    bed, api = it.bed, it.api
    await bench_cost.prepare(bed, PATH_NS, "quota", n * 10)
    before = await asyncio.to_thread(counters, bed)
    policy = bench_cost.propagate_all(PATH_NS, sorted(bed.members)[0])
    await bed.aapply(
        [policy, *(deployment(PATH_NS, f"web-{i:03d}", 1, {"cpu": "100m"}) for i in range(n))]
    )
    done = functools.partial(bench_cost.scheduled, api, PATH_NS, n)
    await eventually(done, 300, f"{n} bindings scheduled", interval=0.2)
    await eventually(lambda: bench_cost.observed(bed, PATH_NS, n), 120, "path observed")
    after = await asyncio.to_thread(counters, bed)
    writers: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in (await asyncio.to_thread(audit.read_text)).splitlines():
        event: dict[str, Any] = json.loads(line)
        ref = event.get("objectRef", {})
        code = str(event.get("responseStatus", {}).get("code", ""))
        what = (event["verb"], ref.get("resource", ""), ref.get("subresource", ""))
        writers[(*what, event["user"]["username"], code)] += 1
    return [
        "",
        f"**user path** ({n} Deployments + one PropagationPolicy, until every binding is "
        "scheduled and counted), per Deployment:",
        "",
        "| karmada-apiserver counter | per Deployment |",
        "|---|---|",
        *per(before, after, n),
        "",
        "| writes in the namespace (audit: verb, resource, subresource, user, code) | per "
        "Deployment |",
        "|---|---|",
        *(f"| {' '.join(k)} | {v / n:.2f} |" for k, v in writers.most_common()),
    ]


async def run(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        policy, audit = Path(tmp) / "audit-policy.yaml", Path(tmp) / "audit.log"
        policy.write_text(AUDIT_POLICY)
        flags = [f"--audit-policy-file={policy}", f"--audit-log-path={audit}"]
        lines = [f"{args.count} templated creates × 48 in flight per storm; counts per create."]
        async with harness.installed(
            karmada_apiserver_args=[*flags, "--audit-log-mode=blocking"]
        ) as it:
            for kind in STORMS:
                lines += await one_storm(it, kind, args.count)
            if args.deployments:
                lines += await user_path(it, args.deployments, audit)
        return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--count", type=int, default=600)
    p.add_argument("--deployments", type=int, default=100, help="0: skip the user path")
    print(asyncio.run(run(p.parse_args())), flush=True)


if __name__ == "__main__":
    main()
