"""What a registry of our own lacks next to prometheus_client's default one."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector


def register_runtime_collectors(registry: CollectorRegistry) -> None:
    """process_* (CPU seconds, resident memory, open and max fds, start time), python_gc_* and
    python_info on `registry`: the webhook and the controller each serve a registry of their own
    (tests build many side by side), which prometheus_client does not fill with these."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
