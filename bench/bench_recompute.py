"""Controller benchmark: from-scratch recompute time and index memory.

1. 10,000 synthetic ResourceBindings, each placed on 3 member clusters, go through the real
   charge path (pydantic model -> `charge.charge` -> compact index entry) into one namespace;
   then the namespace's quotas (an unscoped one and a PriorityClass-scoped one) are recomputed
   from scratch with `recompute.recompute` — exactly what the controller does on every change.
   The median over repeats is reported (target < 1 s).
2. 100,000 bindings indexed: resident memory growth (VmRSS from /proc/self/status) and the
   Python heap held by the index (tracemalloc) (target < 300 MB).

Run: `python bench/bench_recompute.py [--bindings 10000] [--memory-bindings 100000]`.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.index import BindingIndex, observe
from karmadaquota.controller.recompute import NamespaceSnapshot, recompute

NAMESPACE = "bench"
CLUSTERS = ("member1", "member2", "member3")
CPUS = ("100m", "250m", "500m", "1", "2", "1500m", "4")
MEMORIES = ("64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi")
KINDS = (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job"))
PRIORITIES = ("", "high", "low")


def synthetic_binding(i: int, rng: random.Random) -> dict[str, Any]:
    """A scheduled ResourceBinding as karmada-controller-manager + scheduler leave it."""
    replicas = rng.randint(1, 30)
    split = sorted(rng.sample(range(1, replicas + 2), 2))
    per = [split[0] - 1, split[1] - split[0], replicas + 1 - split[1]]
    api_version, kind = rng.choice(KINDS)
    request: dict[str, str] = {"cpu": rng.choice(CPUS), "memory": rng.choice(MEMORIES)}
    if rng.random() < 0.05:
        request["nvidia.com/gpu"] = str(rng.randint(1, 2))
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": f"app-{i}-{kind.lower()}",
            "namespace": NAMESPACE,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "generation": rng.randint(1, 5),
        },
        "spec": {
            "resource": {
                "apiVersion": api_version,
                "kind": kind,
                "name": f"app-{i}",
                "namespace": NAMESPACE,
                "uid": f"10000000-0000-4000-8000-{i:012d}",
            },
            "replicas": replicas,
            "replicaRequirements": {
                "resourceRequest": request,
                "priorityClassName": rng.choice(PRIORITIES),
            },
            "clusters": [
                {"name": c, "replicas": r} for c, r in zip(CLUSTERS, per, strict=True) if r
            ],
        },
    }


def bindings(n: int, seed: int = 42) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for i in range(n):
        yield synthetic_binding(i, rng)


def quotas() -> list[KarmadaQuota]:
    hard = {
        "requests.cpu": "1000000",
        "requests.memory": "100Ti",
        "pods": "10000000",
        "requests.nvidia.com/gpu": "1000",
        "count/deployments.apps": "100000",
    }
    scoped = {"requests.cpu": "100000", "pods": "1000000"}
    out = []
    for name, h, sel in (
        ("global", hard, None),
        (
            "high",
            scoped,
            {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
                ]
            },
        ),
    ):
        spec: dict[str, Any] = {"hard": h}
        if sel is not None:
            spec["scopeSelector"] = sel
        out.append(
            KarmadaQuota.model_validate(
                {
                    "metadata": {"name": name, "namespace": NAMESPACE, "generation": 1},
                    "spec": spec,
                }
            )
        )
    return out


def index_of(n: int) -> tuple[BindingIndex, float]:
    index = BindingIndex()
    started = time.perf_counter()
    for raw in bindings(n):
        index.apply(observe(raw, index.intern))
    return index, time.perf_counter() - started


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def bench_recompute(n: int, repeats: int) -> dict[str, float]:
    index, took = index_of(n)
    qs = quotas()
    inputs = NamespaceSnapshot(
        bindings=index.bindings(NAMESPACE), deleted=index.deleted, members=()
    )
    now = datetime.now(UTC)
    times = []
    used = {}
    for _ in range(repeats):
        started = time.perf_counter()
        for q in qs:
            out = recompute(q, inputs, now)
            used[q.metadata.name] = out.status.used
        times.append(time.perf_counter() - started)
    assert len(index) == n
    assert int(used["global"]["pods"]) > n  # sanity: every binding counted
    return {
        "median": statistics.median(times),
        "p90": sorted(times)[int(0.9 * (len(times) - 1))],
        "index_per_binding": took / n,
    }


def bench_memory(n: int) -> dict[str, float]:
    """RSS growth without tracing, then the heap held by the index under tracemalloc."""
    gc.collect()
    before = rss_kib()
    index, _ = index_of(n)
    gc.collect()
    after = rss_kib()
    assert len(index) == n
    del index
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index, _ = index_of(n)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(index) == n
    return {
        "rss_delta_mb": (after - before) / 1024,
        "heap_mb": (current - base) / 2**20,
        "heap_peak_mb": (peak - base) / 2**20,
        "per_binding_bytes": (current - base) / n,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bindings", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--memory-bindings", type=int, default=100_000)
    args = p.parse_args(argv)

    r = bench_recompute(args.bindings, args.repeats)
    m = bench_memory(args.memory_bindings)
    ok_time = r["median"] < 1.0
    ok_mem = max(m["rss_delta_mb"], m["heap_mb"]) < 300
    print(f"Python {sys.version.split()[0]}, {len(CLUSTERS)} clusters, 2 quotas (1 scoped)\n")
    print("| what | measured | target |")
    print("|---|---|---|")
    print(
        f"| full recompute, {args.bindings:,} bindings × {len(CLUSTERS)} clusters "
        f"(median of {args.repeats}) | {r['median'] * 1000:.1f} ms "
        f"(p90 {r['p90'] * 1000:.1f} ms) | < 1 s {'✓' if ok_time else '✗'} |"
    )
    print(
        f"| indexing one binding (pydantic + charge + compact) | "
        f"{r['index_per_binding'] * 1e6:.0f} µs | — |"
    )
    print(
        f"| memory, {args.memory_bindings:,} bindings indexed: RSS growth | "
        f"{m['rss_delta_mb']:.0f} MB | < 300 MB {'✓' if ok_mem else '✗'} |"
    )
    print(
        f"| memory, same: Python heap held by the index (tracemalloc) | "
        f"{m['heap_mb']:.0f} MB ({m['per_binding_bytes']:.0f} B/binding, "
        f"peak {m['heap_peak_mb']:.0f} MB) | — |"
    )
    return 0 if ok_time and ok_mem else 1


if __name__ == "__main__":
    sys.exit(main())
