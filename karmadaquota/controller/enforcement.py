"""The enforcement labels of the namespaces holding quotas: watched, put on, put back.

karmada-apiserver sends a namespace's bindings to the webhook only while the namespace carries
`quota.karmada.io/enforced=true` (the webhook's namespaceSelector, `kube.namespaces`), and to the
queueing webhook only with `quota.karmada.io/queueing=true`. The labels are the controller's to
keep (a review has no side effect: a forged one must change nothing): a namespace informer
mirrors every namespace's labels, and a namespace holding a quota whose labels are missing — a
new quota, or a label removed by whoever may patch namespaces or by a GitOps tool rewriting
them — is labelled by the leader at once, from its own queue (a failed patch is retried there,
after the namespace's backoff, never by re-marking the recompute). Each recompute hands its
namespace to that queue (`check`) rather than waiting for the patch; the webhook labels a
namespace before it stores a quota there, so the queue only catches up with quotas that predate
the label and labels removed or not yet put on a cluster quota's namespaces. `Enforced`
reports what the informer last saw, not what was written: a label removed shows as
`Enforced=False` until it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.kube import namespaces
from karmadaquota.kube.client import KubeError
from karmadaquota.kube.informer import Lister
from karmadaquota.kube.namespace_labels import NamespaceLabels

log = logging.getLogger("karmadaquota.controller.enforcement")


class Enforcement:
    """Namespace labels in (a `NamespaceLabels` table: every label, which cluster quotas'
    selectors read too), label patches out (`queue`).

    `wants(ns)`: None when the namespace holds no quota and no cluster quota selects it, else
    whether one of its quotas queues (it needs the queueing label too). `may_write()`: the
    leader, once quotas and bindings are listed. `changed(ns)`: the namespace's enforcement
    changed (its quotas' `Enforced`). `relabelled(ns)`: its labels changed, or it came or went
    (cluster quotas' membership)."""

    def __init__(
        self,
        api: Lister,
        patcher: namespaces.Patcher,
        wants: Callable[[str], bool | None],
        may_write: Callable[[], bool],
        changed: Callable[[str], None],
        *,
        relabelled: Callable[[str], None] | None = None,
        page_size: int = 500,
        relist_period: float | None = None,
    ) -> None:
        self._patcher = patcher
        self._wants = wants
        self._may_write = may_write
        self._changed = changed
        self._relabelled = relabelled
        self.labels = NamespaceLabels(
            api,
            self._seen,
            self._relisted,
            page_size=page_size,
            relist_period=relist_period,
        )
        self.informer = self.labels.informer
        self.queue = DirtyQueue(self.ensure, quiet=0.0, max_delay=0.0, name="enforcement")
        self.labelled = 0  # label patches that succeeded

    def enforced(self, namespace: str) -> bool:
        """The namespace is seen carrying every label its quotas need."""
        return self._enforced(namespace, self.labels.get(namespace))

    def _enforced(self, namespace: str, have: Mapping[str, str] | None) -> bool:
        if have is None:
            return False
        want = self._wants(namespace)
        return namespaces.enforced({"metadata": {"labels": have}}, bool(want))

    def check(self, namespace: str) -> None:
        """Label the namespace if it holds a quota and is not seen labelled."""
        if self._wants(namespace) is not None and not self.enforced(namespace):
            self.queue.mark(namespace)

    def after_recompute(self, namespace: str, leader: bool) -> None:
        self.check(namespace)  # its queue writes only on the leader (`may_write`)

    def after_cluster_recompute(
        self, name: str, quota: ClusterKarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        for ns in selected:
            self.check(ns)

    def _relisted(self) -> None:
        for name in list(self.labels.table()):
            self.check(name)

    def _seen(
        self, name: str, before: Mapping[str, str] | None, after: Mapping[str, str] | None
    ) -> None:
        if self._relabelled is not None:
            self._relabelled(name)
        if self._enforced(name, before) != self._enforced(name, after):
            self._changed(name)
        if after is not None:
            self.check(name)

    # ---- the job ---------------------------------------------------------------------------

    async def ensure(self, namespace: str) -> None:
        """Label the namespace now if it holds a quota and is not seen labelled (the leader
        only); a failure is tried again from the queue, after the namespace's backoff."""
        want = self._wants(namespace)
        if want is None or self.enforced(namespace) or not self._may_write():
            return
        try:
            stored = await namespaces.enforce(self._patcher, namespace, want)
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.warning(
                "cannot label namespace for enforcement",
                extra={"namespace": namespace, "error": str(e)},
            )
            self.queue.retry(namespace)
            return
        self.informer.offer("MODIFIED", stored)
        self.labelled += 1
        log.info(
            "namespace labelled for enforcement", extra={"namespace": namespace, "queueing": want}
        )
