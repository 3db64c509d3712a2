"""What every admission handler shares: the webhook's state and the charge of a review.

Each admitted kind has its module and its handler (`binding`, `template`, `override`,
`queue`, `quota`: a mixin over `Admission`); `handlers.Webhook` is all of them over one state
— the quota store, the batchers (namespaced and cluster quotas), the templates' pods, the
trusted writers and allow-lists — and the routes (`routes`) serve it. Here: whether a
namespace is limited at all (`_selecting`: its quotas, the cluster quotas selecting it; fail
closed while that is unknown), and the charge of a review behind every writer it concerns
(`_charge`: all reserve, or the first refusal once the others' reservations are taken back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from karmadaquota import api, durations, overrides, trust
from karmadaquota.api import BindingResource, ResourceBinding
from karmadaquota.evaluate import Decision
from karmadaquota.evictions import Readiness
from karmadaquota.kinds import BUILTIN
from karmadaquota.kube.client import KubeError
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.pod_template import PodCharge
from karmadaquota.scopes import BindingTraits
from karmadaquota.webhook import review
from karmadaquota.webhook.assumed import AssumedQueues
from karmadaquota.webhook.backend import REQUEST_TIMEOUT as READ_TIMEOUT
from karmadaquota.webhook.batcher import Batcher, ChargeRequest
from karmadaquota.webhook.cluster import ClusterQuotas, combined, for_cluster_quota
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.refusals import RefusalRecorder

log = logging.getLogger("karmadaquota.webhook")

REASON_INVALID = "Invalid"
REASON_NOT_READY = "ServiceUnavailable"
REASON_TIMEOUT = "Timeout"
# Share of the API server's webhook timeout (its `?timeout=` query parameter) a review may
# wait in its namespace's queue; past it the API server has given up, so reserving for the
# review would hold quota for a binding that will not be created.
DEADLINE_SHARE = 0.9
# what the binding routes decide
BINDINGS = f"{api.BINDING_PLURAL}.{api.BINDING_GROUP}"

# a charge as the template gate tells an API server's retry apart: its totals and scopes
ChargeKey = tuple[tuple[tuple[str, str], ...], BindingTraits]


def deadline_of(budget: float | None) -> float | None:
    """The `time.monotonic()` by which a review with `budget` seconds must be answered."""
    return None if budget is None else time.monotonic() + budget


def read_limit(deadline: float | None) -> float:
    """Seconds a read on a review's path may take: what is left of its deadline, else the
    webhook's request timeout (the client's own 10 s would outlive the API server's wait, and
    its retry would queue behind the read)."""
    return READ_TIMEOUT if deadline is None else max(0.0, deadline - time.monotonic())


def why(e: BaseException, limit: float) -> str:
    """What a failed read says: its error, or that it did not answer within `limit`."""
    return str(e) or f"no answer within {limit:.1f}s"


def review_budget(timeout: str | None) -> float | None:
    """Seconds a review may take, from the API server's `timeout` query parameter (a Go
    duration such as `3s` or `500ms`); None when absent, not understood or not positive."""
    try:
        seconds = durations.parse(timeout or "").total_seconds()
    except ValueError:
        return None
    return seconds * DEADLINE_SHARE if seconds > 0 else None


class Admission:
    """The state every handler reads, and what they share; independent of how it is served."""

    def __init__(
        self,
        quotas: QuotaStore,
        batcher: Batcher,
        metrics: WebhookMetrics,
        api_seconds: Mapping[str, float] | None = None,
        refusals: RefusalRecorder | None = None,
        writers: trust.Writers | None = None,
        cluster: ClusterQuotas | None = None,
        templates: TemplateStore | None = None,
        allowed_overrides: overrides.AllowList | None = None,
        readiness: Readiness | None = None,
    ) -> None:
        self.quotas = quotas
        # member clusters not Ready: their evicted replicas are released (None: none is)
        self.readiness = readiness
        # the plaintext paths an untrusted writer may override where a quota is
        self.allowed_overrides = allowed_overrides or overrides.AllowList()
        # the resource templates' pods a binding is charged with (None: the binding's fields)
        self.templates = templates
        # the kinds a binding is charged pods for: the store's, which watches the declared ones
        self.kinds = templates.kinds if templates is not None else BUILTIN
        # ClusterKarmadaQuotas (None: not served, e.g. a unit test of namespaced quotas)
        self.cluster = cluster
        self.writers = writers or trust.Writers()
        self.batcher = batcher
        # set on SIGTERM: /readyz fails so endpoints drop the pod, reviews are still answered
        self.draining = False
        self.metrics = metrics
        self.refusals = refusals
        # what this replica queued lately, until the controller's `status.queued` counts it
        self.assumed = AssumedQueues()
        # template growths admitted within GROWTH_RETRY_WINDOW: (binding uid, its generation,
        # its charge before, after) -> until when an identical review is the same write again
        self._grown: dict[tuple[str, int, ChargeKey, ChargeKey], float] = {}
        # per namespace, cumulative seconds of quota API calls (backend.KubeQuotaBackend)
        self.api_seconds: Mapping[str, float] = api_seconds if api_seconds is not None else {}

    async def _pod(
        self,
        binding: ResourceBinding,
        namespace: str,
        fresh: bool = False,
        deadline: float | None = None,
    ) -> PodCharge | None:
        """One replica of the binding's template (karmadaquota.kube.templates); `fresh`: with
        the template's replicas as the API server has them now. A read takes at most
        `read_limit(deadline)` (TimeoutError)."""
        if self.templates is None:
            return None
        async with asyncio.timeout(read_limit(deadline)):
            return await self.templates.fetch(binding.spec.resource, namespace, fresh)

    def api_spent(self, namespace: str) -> dict[str, float]:
        """Cumulative seconds of quota API calls of each writer a review in `namespace` waits
        on, side by side: the namespace's batch queue ("") and the queue of each cluster quota
        selecting it (by name). A review's own share is its latency less the most any one of
        them spent while it was in flight (a cluster quota's writes were counted as the
        webhook's own before)."""
        out = {"": self.api_seconds.get(namespace, 0.0)}
        if self.cluster is not None and self.cluster.any():
            spent = self.cluster.api_seconds
            out |= {n: spent.get(n, 0.0) for n in self.cluster.selecting(namespace) or ()}
        return out

    def synced(self) -> bool:
        """Quotas (and cluster quotas) listed: before that, a namespace cannot be known to hold
        none (fail closed)."""
        return self.quotas.synced.is_set() and (self.cluster is None or self.cluster.synced())

    async def _selecting(
        self, namespace: str, deadline: float | None = None
    ) -> list[str] | Decision:
        """The ClusterKarmadaQuotas selecting the namespace, to charge with its own quotas; or
        the answer at once: allowed when nothing limits the namespace, refused when that is
        unknown."""
        selecting = self.cluster.selecting(namespace) if self.cluster is not None else []
        if selecting is None:
            return Decision(False, self._unknown_selection(namespace), REASON_NOT_READY)
        if not selecting:
            unlimited = await self._unlimited(namespace, deadline)
            if unlimited is not None:
                return unlimited
        return list(selecting)

    async def _unlimited(self, namespace: str, deadline: float | None) -> Decision | None:
        """The answer for a namespace no quota of its own limits, and no cluster quota selects
        (None: one does, charge the review): a miss in the store is read live (the watch may
        not have delivered a quota created a moment ago); a read that fails refuses, never
        admits unchecked."""
        limit = read_limit(deadline)
        try:
            async with asyncio.timeout(limit):
                holds = await self.quotas.lookup(namespace)
        except (KubeError, aiohttp.ClientError, TimeoutError, RuntimeError) as e:
            log.warning(
                "cannot read quotas live", extra={"namespace": namespace, "error": why(e, limit)}
            )
            return Decision(
                False,
                f"karmadaquota webhook cannot tell whether namespace {namespace} holds a quota "
                f"(none cached, live read failed: {why(e, limit)}); try again",
                REASON_NOT_READY,
            )
        return None if holds else Decision(True)

    @staticmethod
    def _unknown_selection(namespace: str) -> str:
        return (
            f"karmadaquota webhook: which ClusterKarmadaQuotas select namespace {namespace} is "
            "unknown (namespace not seen yet, or the namespace watch is reconnecting); try again"
        )

    async def _charge(
        self, request: ChargeRequest, cluster_quotas: Sequence[str], deadline: float | None
    ) -> Decision:
        """Charge the namespace's quotas and every cluster quota selecting it, each behind its
        own writer, at once: admitted when all reserved it; else the first refusal, answered
        once what the others reserved for it is taken back (webhook.cluster)."""
        subs: list[tuple[Batcher, ChargeRequest]] = []
        if self.quotas.has(request.namespace):
            subs.append((self.batcher, request))
        if self.cluster is not None:
            subs += [(self.cluster.batcher, for_cluster_quota(request, n)) for n in cluster_quotas]
        if len(subs) == 1:
            results = [await self._submit(subs[0][1], deadline, subs[0][0])]
        else:
            results = list(await asyncio.gather(*(self._submit(p, deadline, b) for b, p in subs)))
        decision, undo = combined(results)
        released = [
            subs[i][0].release(subs[i][1], results[i].charges.keys())
            for i in undo
            if not subs[i][1].dry_run
        ]
        if released:  # answered once taken back, within the API server's deadline
            left = None if deadline is None else deadline - time.monotonic()
            if left is None or left > 0:
                await asyncio.wait(released, timeout=left)
        namespaced = subs[0][1] is request and decision is results[0]
        if not decision.allowed and not namespaced:
            # a cluster quota refused: no namespaced quota's waiting list is to record it
            decision = replace(decision, quota="")
        return decision

    async def _submit(
        self, request: ChargeRequest, deadline: float | None, batcher: Batcher | None = None
    ) -> Decision:
        batcher = batcher or self.batcher
        if deadline is None:
            return await batcher.submit(request)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await batcher.submit(request)
        except TimeoutError:
            return Decision(
                False,
                "karmadaquota webhook: no decision within the API server's deadline (quota "
                "status writes are slow); try again",
                REASON_TIMEOUT,
            )


NOT_SYNCED = Decision(
    False, "karmadaquota webhook is starting: quota cache not synced; try again", REASON_NOT_READY
)


def written(req: review.Request) -> dict[str, Any] | None:
    """The object of a CREATE or UPDATE of the object itself (not a subresource): the only
    reviews a route decides (None for the others); such a review must carry its object."""
    if req.operation not in ("CREATE", "UPDATE") or req.subResource:
        return None
    if req.object is None:
        raise review.MalformedReview(f"request.object is required for {req.operation}")
    return req.object


def unreadable_template(ref: BindingResource, e: BaseException) -> str:
    return (
        f"karmadaquota webhook: the resource template {ref.kind} {ref.namespace}/{ref.name} "
        f"cannot be read to charge its pods: {str(e) or 'no answer in time'}; try again"
    )


def invalid_message(kind: str, name: str, errors: Sequence[str]) -> str:
    """Kubernetes' wording for an invalid object (apimachinery's NewInvalid): one error as it
    is, several as `[e1, e2]`."""
    listed = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return f'{kind} "{name}" is invalid: {listed}'
