"""The webhook batch's CPU per step at N pending reservations, old way and new way side by side.

Every admission batch sums the quota's reservations (`QuotaView.of`) and, after its status
write, stores the written quota in its cache. Both steps grow with the reservations the quota
carries (hundreds in a storm) and run on the event loop while reviews wait:

* sum: folding `resources.add` (a dict and a Quantity per step) vs `resources.total` (one
  integer pass), inside `QuotaView.of`;
* store: parsing the server's answer into a `KarmadaQuota` vs keeping what was sent at the
  answered resourceVersion (`batcher._stored`);

and, once, a full garbage collection of a process that has imported the webhook and the
controller, before and after `heap.freeze_startup_heap()` (a pause on the event loop).

    python -m bench.bench_batch [--reservations 50,200,500] [--repeat 50]

Pure CPU, no server: prints milliseconds per call (median of `--repeat`) and the ratio.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

import karmadaquota.controller.main
import karmadaquota.webhook.app  # noqa: F401
from karmadaquota import resources
from karmadaquota.api import KarmadaQuota
from karmadaquota.evaluate import QuotaView
from karmadaquota.heap import freeze_startup_heap
from karmadaquota.times import format_time
from karmadaquota.webhook.batcher import _dump, _stored


def quota(n: int, now: datetime) -> dict[str, Any]:
    """A KarmadaQuota carrying `n` reservations of one binding each, as the API returns it."""
    expires = format_time(now + timedelta(seconds=60))
    reservations = [
        {
            "reservedBy": {
                "apiVersion": "work.karmada.io/v1alpha2",
                "kind": "ResourceBinding",
                "name": f"web-{i:05d}",
                "namespace": "bench",
                "uid": str(uuid.uuid4()),
            },
            "reserved": {"pods": "1", "requests.cpu": "100m", "requests.memory": "128Mi"},
            "expirationTime": expires,
            "generation": 1,
        }
        for i in range(n)
    ]
    hard = {"pods": "100k", "requests.cpu": "10k", "requests.memory": "10Ti"}
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": "q", "namespace": "bench", "uid": "u", "resourceVersion": "7"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": {"pods": "10"}, "reservations": reservations},
    }


def folded(q: KarmadaQuota, now: datetime) -> resources.ResourceList:
    """The sum as `QuotaView.of` computed it before: `resources.add` folded."""
    out: resources.ResourceList = {}
    for i, r in enumerate(q.status.reservations):
        if not r.lapsed(now):
            out = resources.add(
                out,
                resources.parse_resource_list(r.reserved, f"status.reservations[{i}].reserved"),
            )
    return out


def per_call_ms(f: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        f()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reservations", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args()
    now = datetime.now(UTC)
    print(
        "| reservations | sum: fold add | sum: total | ratio | store: parse answer | "
        "store: sent at new version | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in args.reservations or [50, 200, 500]:
        raw = quota(n, now)
        q = KarmadaQuota.model_validate(raw)
        answer = orjson.dumps(raw)
        assert folded(q, now) == QuotaView.of(q).reserved  # the same sum, both ways
        old_sum = per_call_ms(lambda q=q: folded(q, now), args.repeat)
        new_sum = per_call_ms(lambda q=q: QuotaView.of(q), args.repeat)
        old_store = per_call_ms(
            lambda a=answer: KarmadaQuota.model_validate(orjson.loads(a)), args.repeat
        )
        new_store = per_call_ms(lambda q=q, a=answer: _stored(q, orjson.loads(a)), args.repeat)
        assert _dump(_stored(q, orjson.loads(answer))) == _dump(q)
        print(
            f"| {n} | {old_sum:.2f} ms | {new_sum:.2f} ms | {new_sum / old_sum:.2f} | "
            f"{old_store:.2f} ms | {new_store:.2f} ms | {new_store / old_store:.2f} |"
        )
    before, after, frozen = gc_pause(max(3, args.repeat // 10))
    print(
        f"\nFull garbage collection with the webhook's and controller's modules loaded: "
        f"{before:.1f} ms; after freezing the start-up heap ({frozen} objects): {after:.2f} ms "
        f"(ratio {after / before:.3f})."
    )


def gc_pause(repeat: int) -> tuple[float, float, int]:
    """A full collection before and after freezing the start-up heap, ms; objects frozen."""
    before = per_call_ms(gc.collect, repeat)
    frozen = freeze_startup_heap()
    after = per_call_ms(gc.collect, repeat)
    gc.unfreeze()
    return before, after, frozen


if __name__ == "__main__":
    main()
