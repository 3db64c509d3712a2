"""Admission storms: many concurrent creates through a real API server, timed per request.

Shared by the e2e storm tests and the benchmarks, so that both measure the same thing: N
objects POSTed at once (bounded concurrency, a hard deadline), each request's end-to-end latency,
and which were admitted. Used for ResourceBindings (our webhook) and for Pods (the API server's
built-in ResourceQuota admission) on the same API server in the same run.
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from karmadaquota.kube.client import JSON, KubeClient, KubeError


@dataclass
class StormResult:
    admitted: list[str] = field(default_factory=list)
    denied: dict[str, str] = field(default_factory=dict)  # name -> message
    latencies: list[float] = field(default_factory=list)  # seconds, every request
    elapsed: float = 0.0
    retries: int = 0  # resends of refusals the storm's `retry` accepted

    @property
    def throughput(self) -> float:
        """Requests answered per second over the whole storm."""
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def failures(self) -> Counter[str]:
        """Refused creates grouped by why (`failure_class`)."""
        return Counter(failure_class(m) for m in self.denied.values())

    def summary(self) -> dict[str, Any]:
        return {
            "admitted": len(self.admitted),
            "denied": len(self.denied),
            "throughput_per_s": round(self.throughput, 1),
            "p50_ms": round(self.percentile(50) * 1000, 1),
            "p99_ms": round(self.percentile(99) * 1000, 1),
            "mean_ms": round(statistics.fmean(self.latencies) * 1000, 1) if self.latencies else 0,
            "elapsed_s": round(self.elapsed, 2),
            "retries": self.retries,
        }


def failure_class(message: str) -> str:
    """A short name for why a create failed; a timeout names the webhook that timed out
    (on a loaded machine, Karmada's own webhooks time out as well as ours)."""
    lowered = message.lower()
    if "no decision within" in lowered:  # karmadaquota answered before the caller's deadline
        return "timeout (answered by karmadaquota)"
    if "deadline exceeded" in lowered or "timeout" in lowered:
        hook = re.search(r'(?:failed calling webhook|admission webhook) "([^"]+)"', message)
        return f"timeout ({hook.group(1) if hook else 'unknown webhook'})"
    if "after multiple retries" in lowered:
        return "FRQ conflicts"
    if "quota" in lowered:
        return "quota exceeded"
    return message[:80]


def retryable(message: str) -> bool:
    """A refusal that decided nothing about quota and reserved nothing: karmadaquota's own
    'try again' answers (its review deadline, a lost compare-and-swap, a full reservation
    list). Karmada's controllers retry a failed binding create; a storm that does the same
    measures quota decisions, not load shedding."""
    return "; try again" in message and "karmadaquota" in message.lower()


async def storm(
    client: KubeClient,
    path: str,
    make: Callable[[int], JSON],
    count: int,
    concurrency: int = 500,
    deadline: float = 120.0,
    retry: Callable[[str], bool] | None = None,
) -> StormResult:
    """POST `make(i)` for i in range(count) to `path`, at most `concurrency` at a time.

    With `retry`, a create refused with a message it accepts is sent again (after a short
    jittered client backoff, as Karmada's workqueues do) until the deadline; `retries` counts
    those resends. Latency is the first attempt's.
    """
    result = StormResult()
    gate = asyncio.Semaphore(concurrency)
    start = asyncio.Event()

    async def one(i: int) -> None:
        body = make(i)
        name = body["metadata"]["name"]
        async with gate:
            await start.wait()
            backoff = 0.05
            first = True
            while True:
                t0 = time.perf_counter()
                try:
                    await client.request("POST", path, body, timeout=60.0)
                except KubeError as e:
                    if retry is not None and retry(e.message):
                        result.retries += 1
                        if first:
                            result.latencies.append(time.perf_counter() - t0)
                            first = False
                        await asyncio.sleep(backoff * (0.5 + random.random()))  # client backoff
                        backoff = min(backoff * 2, 1.0)
                        continue
                    result.denied[name] = e.message
                else:
                    result.admitted.append(name)
                if first:
                    result.latencies.append(time.perf_counter() - t0)
                return

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.sleep(0)  # let every task reach the gate before the storm starts
    t_start = time.perf_counter()
    start.set()
    async with asyncio.timeout(deadline):
        await asyncio.gather(*tasks)
    result.elapsed = time.perf_counter() - t_start
    return result


def binding(namespace: str, name: str, cpu: str = "100m", replicas: int = 1) -> JSON:
    """A ResourceBinding as karmada-controller-manager would create it for a Deployment."""
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resource": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": name,
                "namespace": namespace,
            },
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": {"cpu": cpu}},
        },
    }


def pod(namespace: str, name: str, cpu: str = "100m") -> JSON:
    """A Pod for the built-in ResourceQuota admission (it never runs: no nodes needed)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
                }
            ]
        },
    }
