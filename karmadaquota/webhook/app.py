"""The webhook's HTTPS server: routes, TLS with certificate reload, and the admission handlers.

`/validate-resourcebinding` charges ResourceBindings (CREATE, UPDATE) through the per-namespace
batcher; `/mutate-resourcebinding` queues a new binding that a quota with `onExceed: Queue`
cannot take (karmadaquota.queueing; it charges nothing, the validating route does);
`/validate-karmadaquota` rejects quotas that CEL cannot fully check; `/validate-overridepolicy`
refuses an untrusted writer's (Cluster)OverridePolicy off the allow-list of what it may make
Karmada render where a quota is (karmadaquota.overrides); `/healthz`,
`/readyz` (ready once the quota cache has synced) and `/metrics` serve operations.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from pydantic import ValidationError

from karmadaquota import (
    api,
    charge,
    durations,
    metrics_auth,
    overrides,
    queued,
    queueing,
    trust,
    validation,
)
from karmadaquota.api import BindingResource, ClusterKarmadaQuota, KarmadaQuota, ResourceBinding
from karmadaquota.aux_port import serve_aux
from karmadaquota.evaluate import REASON_FORBIDDEN, Decision, LimitedResource, QuotaView
from karmadaquota.kinds import BUILTIN, Kinds
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeClient, KubeError, NotFound, user_agent
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.pod_template import SCALED, PodCharge, grows, most, of_template, replicas_of
from karmadaquota.quantity import QuantityError
from karmadaquota.webhook import review
from karmadaquota.webhook.assumed import AssumedQueues
from karmadaquota.webhook.backend import KubeQuotaBackend
from karmadaquota.webhook.batcher import (
    DEFAULT_RESERVATION_BYTES,
    REASON_TOO_MANY,
    Batcher,
    BatcherConfig,
    ChargeRequest,
)
from karmadaquota.webhook.cluster import (
    ClusterQuotas,
    cluster_store,
    combined,
    for_cluster_quota,
)
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.refusals import RefusalRecorder, record_refusals
from karmadaquota.webhook.server import (
    AUX_LIMITS,
    MAX_BODY_BYTES,
    ServerConfig,
    serve,
    tls_context,
)

log = logging.getLogger("karmadaquota.webhook")

# what /validate-overridepolicy admits: namespaced and cluster-wide OverridePolicies
OVERRIDE_PLURALS = (api.OVERRIDE_PLURAL, api.CLUSTER_OVERRIDE_PLURAL)
REASON_INVALID = "Invalid"
REASON_NOT_READY = "ServiceUnavailable"
REASON_TIMEOUT = "Timeout"
# Share of the API server's webhook timeout (its `?timeout=` query parameter) a review may
# wait in its namespace's queue; past it the API server has given up, so reserving for the
# review would hold quota for a binding that will not be created.
DEADLINE_SHARE = 0.9
# the API server's own retries of a write that lost a compare-and-swap run within milliseconds;
# well below the controller's admission window, after which an unstored charge is dropped
GROWTH_RETRY_WINDOW = 2.0


def _deadline(budget: float | None) -> float | None:
    """The `time.monotonic()` by which a review with `budget` seconds must be answered."""
    return None if budget is None else time.monotonic() + budget


def review_budget(timeout: str | None) -> float | None:
    """Seconds a review may take, from the API server's `timeout` query parameter (a Go
    duration such as `3s` or `500ms`); None when absent, not understood or not positive."""
    try:
        seconds = durations.parse(timeout or "").total_seconds()
    except ValueError:
        return None
    return seconds * DEADLINE_SHARE if seconds > 0 else None


@dataclass
class WebhookConfig:
    kubeconfig: str | None = None
    cert_file: str = ""
    key_file: str = ""
    bind_address: str = "127.0.0.1"
    port: int = 8443
    reservation_ttl: timedelta = timedelta(seconds=60)
    limited: list[LimitedResource] = field(default_factory=list)
    cert_check_interval: float = 10.0
    max_reservation_bytes: int = DEFAULT_RESERVATION_BYTES
    limits: ServerConfig = field(default_factory=ServerConfig)
    # remember refusals for quota in status.waiting[] (the controller wakes them)
    record_waiting: bool = True
    # /metrics over plain HTTP as well (None: only on the HTTPS port)
    metrics_bind_address: str = "127.0.0.1"
    metrics_port: int | None = None
    # who may create bindings and change their spec in a namespace with a quota
    writers: trust.Writers = field(default_factory=trust.Writers)
    # what an untrusted writer may override where a quota is (+ --override-allowed-path)
    allowed_overrides: overrides.AllowList = field(default_factory=overrides.AllowList)
    # a client certificate signed by this CA is required on the HTTPS port (None: not asked)
    client_ca_file: str | None = None
    # who may read /metrics, on either port (metrics_auth.authorizer)
    metrics_auth: str = "none"
    metrics_auth_kubeconfig: str | None = None
    aux_limits: ServerConfig = AUX_LIMITS
    # the kinds the platform team declared (their replicas and pod template paths) besides the
    # built-in ones (karmadaquota.kinds)
    kinds: Kinds = BUILTIN


class Webhook:
    """The admission logic behind the HTTP routes; independent of how it is served."""

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
    ) -> None:
        self.quotas = quotas
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
        self._grown: dict[
            tuple[str, int, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], float
        ] = {}
        # per namespace, cumulative seconds of quota API calls (backend.KubeQuotaBackend)
        self.api_seconds: Mapping[str, float] = api_seconds if api_seconds is not None else {}

    async def admit_binding(self, req: review.Request, budget: float | None = None) -> Decision:
        """Decide a binding review; `budget`: seconds before its caller gives up (a review
        still queued then is answered with a timeout and reserves nothing)."""
        if req.resource.group != api.BINDING_GROUP or req.resource.resource != api.BINDING_PLURAL:
            raise review.MalformedReview(
                f"this endpoint admits {api.BINDING_PLURAL}.{api.BINDING_GROUP}, got "
                f"{req.resource.resource}.{req.resource.group}"
            )
        # status and other subresources carry no new charge; admission never releases quota
        # (a DELETE is the controller's)
        deadline = _deadline(budget)
        obj = _written(req)
        if obj is None:
            return Decision(True)
        if req.operation == "UPDATE" and req.oldObject is None:
            raise review.MalformedReview("request.oldObject is required for UPDATE")
        trusted = self.writers.trusts(req.userInfo)
        if trusted and req.oldObject is not None and not _charged_change(req.oldObject, obj):
            # Karmada's finalizers, the garbage collector: charged nothing, whatever the quota
            # cache knows, so a deletion never waits for it
            return Decision(True)
        if not self._synced():
            return NOT_SYNCED
        selecting = await self._selecting(req.namespace)
        if isinstance(selecting, Decision):
            return selecting
        refused = None if trusted else self._untrusted_write(req)
        if refused is not None:
            return refused
        try:
            new = ResourceBinding.model_validate(req.object)
            old = ResourceBinding.model_validate(req.oldObject) if req.oldObject else None
            # a binding without replicas runs its template's own in every member (charge.unrevised):
            # as many as the template asks for now, read live (the watch may lag a scale)
            new_pod = await self._pod(new, req.namespace, fresh=new.spec.replicas == 0)
            old_pod = await self._pod(old, req.namespace) if old is not None else None
            new_charge = charge.charge(new, new_pod, self.kinds)
            old_charge = charge.charge(old, old_pod, self.kinds) if old is not None else None
        except ValidationError as e:
            return Decision(False, f"invalid ResourceBinding: {api.describe(e)}", REASON_INVALID)
        except QuantityError as e:
            return Decision(False, f"invalid ResourceBinding: {e}", REASON_INVALID)
        except (KubeError, aiohttp.ClientError, TimeoutError, paths.InvalidName) as e:
            return Decision(False, _unreadable_template(new.spec.resource, e), REASON_NOT_READY)
        name = new.metadata.name or req.name
        if new_charge.invalid:
            return Decision(
                False,
                invalid_message(
                    f"{api.BINDING_KIND}.{api.BINDING_GROUP}", name, new_charge.invalid
                ),
                REASON_INVALID,
            )
        request = ChargeRequest(
            namespace=req.namespace,
            name=name,
            uid=new.metadata.uid,
            generation=new.metadata.generation,
            new=new_charge,
            old=old_charge,
            dry_run=req.dryRun,
        )
        decision = await self._charge(request, selecting, deadline)
        if self.refusals is not None and not req.dryRun:
            self.refusals.observe(req.namespace, new, old, new_charge, old_charge, decision)
        return decision

    async def _pod(
        self, binding: ResourceBinding, namespace: str, fresh: bool = False
    ) -> PodCharge | None:
        """One replica of the binding's template (karmadaquota.kube.templates); `fresh`: with
        the template's replicas as the API server has them now."""
        if self.templates is None:
            return None
        return await self.templates.fetch(binding.spec.resource, namespace, fresh)

    async def admit_template(self, req: review.Request, budget: float | None = None) -> Decision:
        """A resource template's pod that grows, a template scaled up while its binding has no
        replicas (Karmada then renders the template's own replicas into every member:
        charge.unrevised), or a template that takes the name of one deleted while its binding
        lingers: Karmada renders the template as it is now into every member on its next sync
        of the binding, whether or not our admission of the binding's update follows. So the
        growth is charged now, against the binding (reserved as its next generation), and the
        template refused in Kubernetes' words when it does not fit; the binding's update then
        costs nothing more (its old side is charged with the newest template already:
        kube.templates)."""
        deadline = _deadline(budget)
        scale = req.subResource == "scale"
        if req.operation not in ("CREATE", "UPDATE") or req.subResource not in (
            "",
            "resize",
            "scale",
        ):
            return Decision(True)
        obj = req.object
        if obj is None:
            raise review.MalformedReview(f"request.object is required for {req.operation}")
        if req.operation == "UPDATE" and req.oldObject is None:
            raise review.MalformedReview("request.oldObject is required for UPDATE")
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or req.name)
        kind = str(obj.get("kind") or "")
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        # a declared kind's pod and replicas are at its declared paths (karmadaquota.kinds)
        declared = None if scale else self.kinds.pod_paths(group, kind)
        try:  # a Scale has no pod: the template's is the one held (kube.templates)
            new_pod = None if scale else of_template(obj, declared)
            old_pod = of_template(req.oldObject, declared) if req.oldObject and not scale else None
        except QuantityError as e:
            return Decision(False, f"invalid {obj.get('kind')}: {e}", REASON_INVALID)
        if scale:
            group = req.resource.group
            kind = SCALED.get((group, req.resource.resource), "")
        replicas_path = declared[1] if declared else None
        replicas = replicas_of(obj, replicas_path) or 0
        old_replicas = replicas_of(req.oldObject or {}, replicas_path) or 0
        scaled_up = req.operation == "UPDATE" and replicas > old_replicas
        if self.templates is None or (new_pod is None and not (scale and scaled_up and kind)):
            return Decision(True)
        grown = new_pod is not None and old_pod is not None and grows(new_pod, old_pod)
        if req.operation == "UPDATE" and not grown and not scaled_up:
            return Decision(True)
        if req.operation == "CREATE" and not self.templates.replaced(
            (group, kind, req.namespace, name), str(meta.get("uid") or "")
        ):
            return Decision(True)  # a new name: its binding is charged with this template
        if not self._synced():
            return NOT_SYNCED
        selecting = await self._selecting(req.namespace)
        if isinstance(selecting, Decision):
            return Decision(True) if selecting.allowed else selecting
        assert self.templates.client is not None
        try:
            got = await self.templates.client.get(
                paths.binding(req.namespace, binding_name(kind, name))
            )
            binding = ResourceBinding.model_validate(got)
            # what the binding is charged now (the most of the template versions from the one
            # it names on: kube.templates), and once this version is among them
            charged = await self.templates.fetch(binding.spec.resource, req.namespace)
            # while the binding has no replicas, Karmada renders the template's own
            rendered = charge.unrevised(binding, replicas)
            if not grown and rendered is binding and req.operation == "UPDATE":
                return Decision(True)  # scaled: the binding's update carries it (revised)
            new_charge = charge.charge(rendered, most([charged, new_pod]), self.kinds)
            # what it may run now: at least the replicas the template asks for before this write
            # (a scale the watch has not delivered yet)
            if charged is not None and old_replicas > charged.replicas:
                charged = replace(charged, replicas=old_replicas)
            old_charge = charge.charge(binding, charged, self.kinds)
        except NotFound:
            return Decision(True)  # not propagated: its binding is charged with this template
        except (ValidationError, QuantityError):
            return Decision(True)  # its binding is refused as invalid, whatever it costs
        except (KubeError, aiohttp.ClientError, TimeoutError, paths.InvalidName) as e:
            return Decision(
                False,
                f"karmadaquota webhook: the binding of {name} cannot be read: {e}",
                REASON_NOT_READY,
            )
        if binding.spec.resource.name != name or binding.spec.resource.kind != kind:
            return Decision(True)  # the name belongs to another template's binding
        # reserved until the controller counts the binding's update that carries this version
        # (Karmada's detector writes it next), or counts this version as the binding's newest
        request = ChargeRequest(
            namespace=req.namespace,
            name=binding.metadata.name,
            uid=binding.metadata.uid,
            generation=binding.metadata.generation + 1,
            new=new_charge,
            old=old_charge,
            dry_run=req.dryRun,
        )
        # the API server runs admission again when its write of a PATCH loses to a concurrent
        # one (Karmada writes templates' status) and it retries: the same growth of the same
        # binding generation, admitted a moment ago, is not charged twice
        again = (
            binding.metadata.uid,
            binding.metadata.generation,
            _charge_key(old_charge),
            _charge_key(new_charge),
        )
        now = time.monotonic()
        if not req.dryRun and self._grown.get(again, 0.0) > now:
            return Decision(True)
        decision = await self._charge(request, selecting, deadline)
        if decision.allowed and not req.dryRun:
            if len(self._grown) > 1024:
                self._grown = {k: t for k, t in self._grown.items() if t > now}
            self._grown[again] = now + GROWTH_RETRY_WINDOW
        return decision

    @staticmethod
    def _untrusted_write(req: review.Request) -> Decision | None:
        """The refusal of an untrusted writer's review that creates a binding or changes
        anything of it but its status (karmadaquota.trust); None when it changes nothing."""
        assert req.object is not None
        if req.operation == "CREATE" or req.oldObject is None:
            what, verb = "a ResourceBinding", "create"
        else:
            fields = trust.changed_fields(req.oldObject, req.object)
            if not fields:
                return None
            what, verb = f"{trust.listed(fields)} of a ResourceBinding", "change"
        name = ((req.object.get("metadata") or {}).get("name")) or req.name
        return Decision(
            False,
            trust.forbidden_message(
                f"{api.BINDING_PLURAL}.{api.BINDING_GROUP}", str(name), req.userInfo, verb, what
            ),
            REASON_FORBIDDEN,
        )

    async def admit_override(self, req: review.Request) -> Decision:
        """An OverridePolicy in a namespace with a quota, or a ClusterOverridePolicy that may
        apply in one: an untrusted writer may write only overrides on the allow-list
        (karmadaquota.overrides; docs/security.md)."""
        plural = req.resource.resource
        if req.resource.group != api.OVERRIDE_GROUP or plural not in OVERRIDE_PLURALS:
            raise review.MalformedReview(
                f"this endpoint admits {' and '.join(OVERRIDE_PLURALS)}.{api.OVERRIDE_GROUP}, "
                f"got {plural}.{req.resource.group}"
            )
        obj = _written(req)
        if obj is None:
            return Decision(True)
        if not self._synced():
            return NOT_SYNCED
        if self.writers.trusts(req.userInfo):
            return Decision(True)
        refused = overrides.refusals(obj, self.allowed_overrides)
        if overrides.only_as_before(obj, req.oldObject, refused, self.allowed_overrides):
            return Decision(True)  # all on the list, or only what was there before
        if plural == api.OVERRIDE_PLURAL:
            limited = await self._selecting(req.namespace)
        else:
            limited = await self._cluster_policy_limited(obj)
        if isinstance(limited, Decision):
            return limited
        name = (obj.get("metadata") or {}).get("name") or req.name
        return Decision(
            False,
            trust.forbidden_message(
                f"{plural}.{api.OVERRIDE_GROUP}",
                str(name),
                req.userInfo,
                "write",
                f"an override off the allow-list ({'; '.join(r.what for r in refused)}; the "
                "platform team extends the list with --override-allowed-path)"
                + ("" if plural == api.OVERRIDE_PLURAL else " that applies"),
            ),
            REASON_FORBIDDEN,
        )

    async def _cluster_policy_limited(self, obj: Mapping[str, Any]) -> list[str] | Decision:
        """Whether a ClusterOverridePolicy may apply in a namespace with a quota (a list: it
        may; Decision: allowed, or unknown). It applies in the namespaces its resource
        selectors name; a selector without a namespace (or no selector) names them all."""
        spec = obj.get("spec")
        selectors = spec.get("resourceSelectors") if isinstance(spec, Mapping) else None
        named = [s.get("namespace") if isinstance(s, Mapping) else None for s in selectors or [0]]
        namespaces = sorted({n for n in named if isinstance(n, str) and n})
        if len(namespaces) == 0 or not all(isinstance(n, str) and n for n in named):
            anywhere = len(self.quotas) > 0 or (self.cluster is not None and self.cluster.any())
            return ["*"] if anywhere else Decision(True)
        for namespace in namespaces:
            if paths.label_errors(namespace):
                continue  # no namespace has that name: the selector selects nothing
            limited = await self._selecting(namespace)
            if not isinstance(limited, Decision) or not limited.allowed:
                return limited
        return Decision(True)

    def _synced(self) -> bool:
        """Quotas (and cluster quotas) listed: before that, a namespace cannot be known to hold
        none (fail closed)."""
        return self.quotas.synced.is_set() and (self.cluster is None or self.cluster.synced())

    async def _selecting(self, namespace: str) -> list[str] | Decision:
        """The ClusterKarmadaQuotas selecting the namespace, to charge with its own quotas; or
        the answer at once: allowed when nothing limits the namespace, refused when that is
        unknown."""
        selecting = self.cluster.selecting(namespace) if self.cluster is not None else []
        if selecting is None:
            return Decision(False, self._unknown_selection(namespace), REASON_NOT_READY)
        if not selecting:
            unlimited = await self._unlimited(namespace)
            if unlimited is not None:
                return unlimited
        return list(selecting)

    async def _unlimited(self, namespace: str) -> Decision | None:
        """The answer for a namespace no quota of its own limits, and no cluster quota selects
        (None: one does, charge the review): a miss in the store is read live (the watch may
        not have delivered a quota created a moment ago); a read that fails refuses, never
        admits unchecked."""
        try:
            holds = await self.quotas.lookup(namespace)
        except (KubeError, aiohttp.ClientError, TimeoutError, RuntimeError) as e:
            log.warning("cannot read quotas live", extra={"namespace": namespace, "error": str(e)})
            return Decision(
                False,
                f"karmadaquota webhook cannot tell whether namespace {namespace} holds a quota "
                f"(none cached, live read failed: {e}); try again",
                REASON_NOT_READY,
            )
        return None if holds else Decision(True)

    @staticmethod
    def _unknown_selection(namespace: str) -> str:
        return (
            f"karmadaquota webhook: which ClusterKarmadaQuotas select namespace {namespace} is "
            "unknown (namespace not seen yet, or the namespace watch is reconnecting); try again"
        )

    async def mutate_binding(self, req: review.Request) -> queueing.QueueDecision | None:
        """Whether a new binding is created queued (suspended, naming the quota); None leaves
        it as it is. Never refuses: whatever is wrong with the binding, the validating route
        says, and a binding left unqueued is charged there in full (the safe side)."""
        if req.resource.group != api.BINDING_GROUP or req.resource.resource != api.BINDING_PLURAL:
            raise review.MalformedReview(
                f"this endpoint mutates {api.BINDING_PLURAL}.{api.BINDING_GROUP}, got "
                f"{req.resource.resource}.{req.resource.group}"
            )
        if req.operation != "CREATE" or req.subResource or req.object is None:
            return None
        if not self.quotas.synced.is_set() or not self.quotas.has(req.namespace):
            return None
        if queueing.suspended(req.object):
            return None  # suspended by someone else: theirs to clear, charged as it asks
        quotas = self.quotas.quotas(req.namespace)
        policies = {q.metadata.name: self.assumed.policy(req.namespace, q) for q in quotas}
        if not any(p.queue for p in policies.values()):
            return None
        try:
            binding = ResourceBinding.model_validate(req.object)
            # with its template's pod, as the validating webhook will charge it
            full = charge.full_charge(binding, await self._pod(binding, req.namespace), self.kinds)
            views = [QuotaView.of(q) for q in quotas]
        except (ValidationError, QuantityError):
            return None
        except (KubeError, aiohttp.ClientError, TimeoutError, paths.InvalidName):
            return None  # left unqueued: the validating webhook refuses what it cannot read
        if full.invalid:
            return None
        decision = queueing.decide(views, policies, full)
        if decision is not None and not req.dryRun:
            self.assumed.assume(req.namespace, decision.quota)
        return decision

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

    async def admit_quota(self, req: review.Request) -> Decision:
        """Validate a KarmadaQuota. No side effect: the controller labels its namespace for
        enforcement (kube.namespaces), so a forged review can change nothing."""
        return self.validate_quota(req)

    def validate_quota(self, req: review.Request) -> Decision:
        """A KarmadaQuota's or ClusterKarmadaQuota's spec, in Kubernetes' words."""
        model: type[KarmadaQuota] = KarmadaQuota
        kind = api.KIND
        if req.resource.group == api.GROUP and req.resource.resource == api.CLUSTER_PLURAL:
            model, kind = api.ClusterKarmadaQuota, api.CLUSTER_KIND
        elif req.resource.group != api.GROUP or req.resource.resource != api.PLURAL:
            raise review.MalformedReview(
                f"this endpoint admits {api.PLURAL}.{api.GROUP} and {api.CLUSTER_PLURAL}."
                f"{api.GROUP}, got {req.resource.resource}.{req.resource.group}"
            )
        obj = _written(req)
        if obj is None:
            return Decision(True)
        name = obj.get("metadata", {}).get("name", req.name)
        try:
            quota = model.model_validate(obj)
        except ValidationError as e:
            errors = [api.describe(e)]
        else:
            errors = validation.validate_spec(quota.spec)
        if not errors:
            return Decision(True)
        return Decision(False, invalid_message(f"{kind}.{api.GROUP}", name, errors), REASON_INVALID)


NOT_SYNCED = Decision(
    False, "karmadaquota webhook is starting: quota cache not synced; try again", REASON_NOT_READY
)


def _written(req: review.Request) -> dict[str, Any] | None:
    """The object of a CREATE or UPDATE of the object itself (not a subresource): the only
    reviews a route decides (None for the others); such a review must carry its object."""
    if req.operation not in ("CREATE", "UPDATE") or req.subResource:
        return None
    if req.object is None:
        raise review.MalformedReview(f"request.object is required for {req.operation}")
    return req.object


def _charged_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an UPDATE changes what a binding's charge reads: its spec, or our queue
    annotation (karmadaquota.queued). A trusted writer's other changes charge nothing: the
    registration sends them only so that an untrusted writer's are refused."""
    return old.get("spec") != new.get("spec") or queued.mark(old) != queued.mark(new)


def _charge_key(c: charge.Charge) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, str(q)) for name, q in c.total.items()))


def binding_name(kind: str, name: str) -> str:
    """The ResourceBinding Karmada's detector makes for a template (names.GenerateBindingName)."""
    return f"{name}-{kind}".lower()


def _unreadable_template(ref: BindingResource, e: BaseException) -> str:
    return (
        f"karmadaquota webhook: the resource template {ref.kind} {ref.namespace}/{ref.name} "
        f"cannot be read to charge its pods: {e}; try again"
    )


def invalid_message(kind: str, name: str, errors: Sequence[str]) -> str:
    """Kubernetes' wording for an invalid object (apimachinery's NewInvalid): one error as it
    is, several as `[e1, e2]`."""
    listed = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return f'{kind} "{name}" is invalid: {listed}'


def _code(d: Decision) -> int:
    codes = {
        REASON_INVALID: 422,
        REASON_NOT_READY: 503,
        REASON_TOO_MANY: 429,
        REASON_TIMEOUT: 504,
    }
    return codes.get(d.reason, 403)


class DecisionLog:
    """Logs admission decisions without costing the hot path a log line per allowed review.

    Denials (what an operator looks for) are logged one by one at info; allowed reviews at
    debug, plus one info summary of the counts since the previous summary, written by the
    first decision after `interval` seconds (so an idle webhook writes nothing)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._since = time.monotonic()
        self._allowed = 0
        self._denied = 0

    def record(self, req: review.Request, kind: str, decision: Decision, elapsed: float) -> None:
        if decision.allowed:
            self._allowed += 1
        else:
            self._denied += 1
        level = logging.DEBUG if decision.allowed else logging.INFO
        if log.isEnabledFor(level):
            obj_meta = (req.object or {}).get("metadata", {})
            log.log(
                level,
                "admission decision",
                extra={
                    "namespace": req.namespace,
                    kind: obj_meta.get("name", req.name),
                    "uid": obj_meta.get("uid", ""),
                    "operation": req.operation,
                    "dry_run": req.dryRun,
                    "result": "allowed" if decision.allowed else "denied",
                    "reason": decision.reason,
                    "detail": decision.message,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )
        now = time.monotonic()
        if now - self._since >= self.interval:
            log.info(
                "admission summary",
                extra={
                    "allowed": self._allowed,
                    "denied": self._denied,
                    "seconds": round(now - self._since, 1),
                },
            )
            self._since, self._allowed, self._denied = now, 0, 0


def build_app(
    webhook: Webhook,
    decisions: DecisionLog | None = None,
    metrics_authorizer: metrics_auth.Authorizer | None = None,
) -> web.Application:
    metrics = webhook.metrics
    decisions = decisions or DecisionLog()

    async def handle(request: web.Request, kind: str) -> web.Response:
        started = time.perf_counter()
        api_before = 0.0
        try:
            req = review.parse(await request.read())
            if kind == "binding":
                api_before = webhook.api_seconds.get(req.namespace, 0.0)
                decision = await webhook.admit_binding(
                    req, review_budget(request.query.get("timeout"))
                )
            elif kind == "override":
                decision = await webhook.admit_override(req)
            elif kind == "template":
                decision = await webhook.admit_template(
                    req, review_budget(request.query.get("timeout"))
                )
            else:
                decision = await webhook.admit_quota(req)
        except review.MalformedReview as e:
            metrics.decisions.labels("malformed", "BadRequest").inc()
            log.warning("malformed admission review", extra={"path": request.path, "error": str(e)})
            return web.Response(status=400, text=f"{e}\n")
        elapsed = time.perf_counter() - started
        api = webhook.api_seconds.get(req.namespace, 0.0) - api_before
        metrics.observe_decision(
            req.operation, decision.allowed, decision.reason, elapsed, max(0.0, elapsed - api)
        )
        decisions.record(req, kind, decision, elapsed)
        body = review.response(
            req.uid, decision.allowed, decision.message, decision.reason, _code(decision)
        )
        return web.Response(body=review.dump(body), content_type="application/json")

    async def bindings(request: web.Request) -> web.Response:
        return await handle(request, "binding")

    async def mutate(request: web.Request) -> web.Response:
        try:
            req = review.parse(await request.read())
            queue = await webhook.mutate_binding(req)
        except review.MalformedReview as e:
            metrics.decisions.labels("malformed", "BadRequest").inc()
            log.warning("malformed admission review", extra={"path": request.path, "error": str(e)})
            return web.Response(status=400, text=f"{e}\n")
        body = review.response(req.uid, True)
        if queue is not None and req.object is not None:
            patch = queueing.queue_patch(req.object, queue.quota)
            body["response"]["patchType"] = "JSONPatch"
            body["response"]["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
            metrics.queued.labels(queue.reason).inc()
            log.info(
                "binding queued",
                extra={
                    "namespace": req.namespace,
                    "binding": (req.object.get("metadata") or {}).get("name", req.name),
                    "quota": queue.quota,
                    "reason": queue.reason,
                    "detail": queue.message,
                    "dry_run": req.dryRun,
                },
            )
        return web.Response(body=review.dump(body), content_type="application/json")

    async def quotas(request: web.Request) -> web.Response:
        return await handle(request, "quota")

    async def override_policies(request: web.Request) -> web.Response:
        return await handle(request, "override")

    async def templates(request: web.Request) -> web.Response:
        return await handle(request, "template")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if webhook.draining:
            return web.Response(status=503, text="shutting down\n")
        if webhook.quotas.synced.is_set() and (webhook.cluster is None or webhook.cluster.synced()):
            return web.Response(text="ok\n")
        return web.Response(status=503, text="quota cache not synced\n")

    metrics_handler = metrics_auth.metrics_handler(
        metrics.registry, metrics_authorizer or metrics_auth.LoopbackOnly()
    )

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/validate-resourcebinding", bindings)
    app.router.add_post("/mutate-resourcebinding", mutate)
    app.router.add_post("/validate-karmadaquota", quotas)
    app.router.add_post("/validate-overridepolicy", override_policies)
    app.router.add_post("/validate-template", templates)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app


class CertReloader:
    """Serves with a TLS context whose certificate is reloaded when its files change."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        on_load: Callable[[str], None] | None = None,
        client_ca_file: str | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._on_load = on_load or (lambda _cert_file: None)  # after each successful load
        self._stamp = self._mtimes()
        self.context = tls_context(cert_file, key_file, client_ca_file)
        self._on_load(cert_file)

    def _mtimes(self) -> tuple[float, ...]:
        files = [self.cert_file, self.key_file, *filter(None, [self.client_ca_file])]
        return tuple(os.stat(f).st_mtime for f in files)

    def reload_if_changed(self) -> bool:
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:  # adds a rotated CA (a removed one stays until a restart)
                self.context.load_verify_locations(self.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            log.warning("serving certificate not reloaded", extra={"error": str(e)})
            return False
        self._stamp = stamp
        log.info("serving certificate reloaded", extra={"cert_file": self.cert_file})
        self._on_load(self.cert_file)
        return True

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)  # a polling period, not synchronisation
            self.reload_if_changed()


@contextlib.asynccontextmanager
async def running(config: WebhookConfig) -> AsyncIterator[tuple[Webhook, int]]:
    """Start the whole webhook (client, quotas, batcher, HTTPS server); yields the bound port."""
    metrics = WebhookMetrics()
    client = await KubeClient.connect(config.kubeconfig, user_agent=user_agent("webhook"))

    def count(_: object) -> None:
        metrics.cache_quotas.set(len(quotas))

    quotas = QuotaStore(client, on_put=count, on_delete=count, on_relisted=count)
    store = KubeQuotaBackend(client, quotas)
    metrics.watch_pending(lambda: quotas.overdue(datetime.now(UTC)))
    batcher = Batcher(
        store,
        BatcherConfig(
            reservation_ttl=config.reservation_ttl,
            limited=config.limited,
            max_reservation_bytes=config.max_reservation_bytes,
        ),
        on_batch=metrics.batch_size.observe,
        on_conflict=metrics.conflicts.inc,
        on_write=metrics.observe_write,
    )
    refusals = record_refusals(store, batcher) if config.record_waiting else None
    cluster_quotas = cluster_store(client)
    cluster = ClusterQuotas(
        cluster_quotas,
        NamespaceLabels(client),
        Batcher(
            KubeQuotaBackend(client, cluster_quotas, cluster=True),
            replace(batcher.config),
            on_batch=metrics.batch_size.observe,
            on_conflict=metrics.conflicts.inc,
            on_write=metrics.observe_write,
            model=ClusterKarmadaQuota,
        ),
    )
    templates = TemplateStore(client, kinds=config.kinds)
    webhook = Webhook(
        quotas,
        batcher,
        metrics,
        store.api_seconds,
        refusals,
        config.writers,
        cluster,
        templates,
        config.allowed_overrides,
    )
    certs = CertReloader(
        config.cert_file,
        config.key_file,
        metrics.serving_certificate_loaded,
        config.client_ca_file,
    )
    authorizer = metrics_auth.authorizer(config.metrics_auth, config.metrics_auth_kubeconfig)
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(quotas.run(), name="quota-store"),
        asyncio.create_task(cluster.run(), name="cluster-quotas"),
        asyncio.create_task(certs.watch(config.cert_check_interval), name="cert-reload"),
        *(asyncio.create_task(i.run(), name=f"templates-{i.name}") for i in templates.informers),
    ]

    async def mark_synced() -> None:
        await quotas.synced.wait()
        await cluster_quotas.synced.wait()
        await cluster.labels.synced.wait()
        metrics.cache_synced.set(1)

    tasks.append(asyncio.create_task(mark_synced()))
    plain = None  # up before the HTTPS port: once /readyz answers, /metrics does too
    if config.metrics_port is not None:
        plain = await serve_aux(
            metrics.registry,
            authorizer,
            lambda: not webhook.draining and webhook.quotas.synced.is_set(),
            config.metrics_bind_address,
            config.metrics_port,
            config.aux_limits,
        )
        log.info(
            "metrics serving",
            extra={
                "address": config.metrics_bind_address,
                "port": plain.port,
                "auth": config.metrics_auth,
            },
        )
    listener = await serve(
        build_app(webhook, metrics_authorizer=authorizer),
        config.bind_address,
        config.port,
        certs.context,
        config.limits,
        metrics.connection,
    )
    port = listener.port
    log.info("webhook serving", extra={"address": config.bind_address, "port": port})
    try:
        yield webhook, int(port)
    finally:
        if plain is not None:
            await plain.close()
        await listener.close()
        await authorizer.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await batcher.close()
        await cluster.close()
        if refusals is not None:
            await refusals.close()
        await client.close()
