"""The jobs that follow a recompute: what each one is to the controller, and no more.

The Kubernetes quota controller's way: the recompute that releases quota never waits for a
slow GET or PATCH of another job, so every job has a queue of its own (`dirty.DirtyQueue`, its
retries on it) and is only *marked* after a recompute: the orphan audit, waiting for room, the
member guards, the enforcement labels, the tenants' views. A job the configuration turns off is
not registered at all, so the controller holds no `None` for it.

What the jobs found that a recompute reads back is `Findings`: a read-only view, so that the
recompute depends on what they tell it, not on the job classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.pending import EntryKey


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


@dataclass(frozen=True)
class Findings:
    """What the jobs tell the recompute that follows them, read-only (None: the job is off,
    the recompute reads nothing of it)."""

    # (quota namespace, "" for a cluster quota; quota) -> pending entries the orphan audit
    # disproved, for the recompute's write to release
    disproved: Callable[[str, str], Mapping[EntryKey, int]]
    # (namespace, waiting key) -> the waiting workload's template is gone (waiting for room)
    gone: Callable[[str, str], bool] | None = None
    # namespace -> the webhook is sent its bindings (the enforcement labels)
    enforced: Callable[[str], bool] | None = None
    # every namespace's labels as the enforcement job watches them (cluster quotas select by)
    labels: NamespaceLabels | None = None
    # (namespace, quota, member) -> the member guard's hard as confirmed; (namespace, quota)
    # -> member -> why it holds no guard as wanted (the member guards)
    guards: Callable[[str, str, str], Mapping[str, str] | None] | None = None
    guard_problems: Callable[[str, str], Mapping[str, str]] | None = None
    # (namespace, quota) -> member -> how its guard reaches it, for the members not written
    # directly (Pull mode: a Work that karmada-agent applies)
    guard_routes: Callable[[str, str], Mapping[str, str]] | None = None
