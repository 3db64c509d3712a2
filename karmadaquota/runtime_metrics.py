"""What a registry of our own lacks next to prometheus_client's default one, and the build."""

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
