"""The jobs that follow a recompute: what each one is to the controller, and no more.

The Kubernetes quota controller's way: the recompute that releases quota never waits for a
slow GET or PATCH of another job, so every job has a queue of its own (`dirty.DirtyQueue`, its
retries on it) and is only *marked* after a recompute: the orphan audit, waiting for room, the
member guards, the enforcement labels, the tenants' views. A job the configuration turns off is
not registered at all, so the controller holds no `None` for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller.dirty import DirtyQueue


class Job(Protocol):
    """One job: its queue (named in logs, tasks and docs/architecture.md) and what a recompute
    marks in it. `leader`: this replica may write now (followers mostly mark nothing)."""

    @property
    def queue(self) -> DirtyQueue: ...

    def after_recompute(self, namespace: str, leader: bool) -> None:
        """A namespace's quotas were recomputed."""
        ...

    def after_cluster_recompute(
        self, name: str, quota: ClusterKarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        """A cluster quota was recomputed over the namespaces it selects now."""
        ...
