"""What the webhook's and the controller's metric sets share: the registry each starts from,
with what a registry of our own lacks next to prometheus_client's default one and the build,
and the coarse top of their latency buckets."""

from __future__ import annotations

import platform

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

from karmadaquota import __version__

BUILD_INFO = "karmadaquota_build_info"

# The top of both programs' latency buckets, 25 ms to 2.5 s: a recompute or a review that
# long is stalled or waiting on the API server, and coarse steps tell enough.
LATENCY_TOP = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def register_runtime_collectors(registry: CollectorRegistry) -> None:
    """process_* (CPU seconds, resident memory, open and max fds, start time), python_gc_* and
    python_info on `registry`: the webhook and the controller each serve a registry of their own
    (tests build many side by side), which prometheus_client does not fill with these.

    Plus `karmadaquota_build_info{version, python_version} 1` (the Prometheus convention for a
    build: join on it to see which version runs where, e.g. during a rolling upgrade)."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    Gauge(
        BUILD_INFO,
        "A metric with a constant '1' value labelled by the karmadaquota version and the "
        "Python version it runs on.",
        ["version", "python_version"],
        registry=registry,
    ).labels(__version__, platform.python_version()).set(1)


def program_registry(registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """`registry`, or a new one (one per metric set keeps tests independent), with the runtime
    collectors on it: where the webhook's and the controller's metric sets both start."""
    registry = registry or CollectorRegistry()
    register_runtime_collectors(registry)
    return registry
