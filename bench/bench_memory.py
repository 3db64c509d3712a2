"""Bytes per binding and per quota in the controller's and the webhook's stores (tracemalloc).

The binding index as the controller keeps it (`BindingIndex`, fed one binding at a time as the
informer does: bindings of `--per-namespace` in each namespace, each placed on one of
`--clusters` clusters round robin); the quota store (`QuotaStore`) holding copies of one quota
and one cluster quota as the controller writes them (`bench_scale --profile DIR` saves one of
each), raw only, parsed too (what a recompute and the webhook's admission read), and as the
stores keep them (the models of the `PARSED_KEPT` most recently read quotas).

    python -m bench.bench_memory --samples DIR [--bindings 100000] [--quotas 5000]
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from e2e.testbed.storm import binding
from karmadaquota.controller.index import BindingIndex, observe
from karmadaquota.kube.quotas import PARSED_KEPT, ClusterQuotaStore, QuotaStore


def held(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated once `build` returns (what the object it returns holds)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


def index_of(bindings: int, per_ns: int, clusters: int) -> BindingIndex:
    index = BindingIndex()
    for k in range(bindings):
        ns = f"scale-{k // per_ns:05d}"
        rb = binding(ns, f"b-{k % per_ns:05d}")
        rb["metadata"] |= {"uid": f"{k:08d}-uid", "resourceVersion": str(k + 1), "generation": 1}
        rb["spec"]["clusters"] = [{"name": f"c{k % clusters:03d}", "replicas": 1}]
        seen = observe(rb, index.intern)
        index.apply(seen)
    return index


def store_of(
    sample: dict[str, Any], count: int, cluster: bool, parse: bool, kept: int | None = None
) -> QuotaStore:
    """`count` copies of `sample` stored (each parsed once with `parse`), keeping the models
    of the `kept` most recently read (None: all)."""
    store = ClusterQuotaStore(None, parsed=kept) if cluster else QuotaStore(None, parsed=kept)
    for i in range(count):
        obj = copy.deepcopy(sample)
        meta = obj["metadata"]
        if cluster:
            meta["name"] = f"{meta['name']}-{i}"
        else:
            meta["namespace"] = f"{meta['namespace']}-{i}"
        meta["uid"] = f"{i:08d}-{meta.get('uid', '')}"
        store.added(obj)
        if parse:
            for record in store.records(meta.get("namespace", "")):
                _ = record.quota
    return store


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--samples", required=True, help="directory with quota.json and ckq.json")
    p.add_argument("--bindings", type=int, default=100_000)
    p.add_argument("--per-namespace", type=int, default=18)
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--quotas", type=int, default=5000)
    p.add_argument("--cluster-quotas", type=int, default=50)
    args = p.parse_args()
    samples = Path(args.samples)
    quota = orjson.loads((samples / "quota.json").read_bytes())
    ckq = orjson.loads((samples / "ckq.json").read_bytes())

    rows = []
    size, _ = held(lambda: index_of(args.bindings, args.per_namespace, args.clusters))
    rows.append(("binding (controller index)", args.bindings, size))
    for label, sample, count, cluster in (
        ("quota", quota, args.quotas, False),
        ("cluster quota", ckq, args.cluster_quotas, True),
    ):
        wire = len(orjson.dumps(sample))
        raw, _ = held(functools.partial(store_of, sample, count, cluster, False))
        both, _ = held(functools.partial(store_of, sample, count, cluster, True))
        rows.append((f"{label}: raw record ({wire} B on the wire)", count, raw))
        rows.append((f"{label}: raw + parsed model", count, both))
        if not cluster:  # the controller's and the webhook's store: PARSED_KEPT models
            kept, _ = held(functools.partial(store_of, sample, count, False, True, PARSED_KEPT))
            rows.append((f"{label}: raw + the {PARSED_KEPT} last read parsed", count, kept))
    print("| held | count | total | per object |")
    print("|---|---|---|---|")
    for what, n, total in rows:
        print(f"| {what} | {n} | {total / 2**20:.1f} MiB | {total / n:,.0f} B |")


if __name__ == "__main__":
    main()
