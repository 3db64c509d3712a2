"""/validate-template: a resource template that grows is charged when it is written.

Karmada renders the template as it is now into every member on its next sync of the binding,
whether or not our admission of the binding's update follows: a pod that grows (or moves to
another priority class or QoS, so to other scoped quotas: `pod_template.grows`), a scale-up
while the binding has no replicas (Karmada renders the template's own replicas), or a template
that takes the name of one deleted while its binding lingers is charged against the binding
(reserved as its next generation) — priced by `charge.template_change` — and refused in
Kubernetes' words when it does not fit.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from pydantic import ValidationError

from karmadaquota import charge
from karmadaquota.api import ResourceBinding
from karmadaquota.evaluate import Decision
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeError, NotFound
from karmadaquota.pod_template import SCALED, grows, of_template, replicas_of
from karmadaquota.quantity import QuantityError
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import (
    NOT_SYNCED,
    REASON_INVALID,
    REASON_NOT_READY,
    Admission,
    ChargeKey,
    deadline_of,
    read_limit,
    why,
)
from karmadaquota.webhook.batcher import ChargeRequest

# the API server's own retries of a write that lost a compare-and-swap run within milliseconds;
# well below the controller's admission window, after which an unstored charge is dropped
GROWTH_RETRY_WINDOW = 2.0


class TemplateAdmission(Admission):
    async def admit_template(self, req: review.Request, budget: float | None = None) -> Decision:
        """A resource template's pod that grows (or moves to another priority class or QoS: it
        is charged in full in each scoped quota it enters, and the quotas of its old class keep
        their charge until the binding's update), a template scaled up while its binding has no
        replicas (Karmada then renders the template's own replicas into every member:
        charge.unrevised), or a template that takes the name of one deleted while its binding
        lingers: Karmada renders the template as it is now into every member on its next sync
        of the binding, whether or not our admission of the binding's update follows. So the
        growth is charged now, against the binding (reserved as its next generation), and the
        template refused in Kubernetes' words when it does not fit; the binding's update then
        costs nothing more (its old side is charged with the newest template already:
        kube.templates)."""
        deadline = deadline_of(budget)
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
        if not self.synced():
            return NOT_SYNCED
        selecting = await self._selecting(req.namespace, deadline)
        if isinstance(selecting, Decision):
            return Decision(True) if selecting.allowed else selecting
        assert self.templates.client is not None
        limit = read_limit(deadline)
        try:
            async with asyncio.timeout(limit):
                got = await self.templates.client.get(
                    paths.binding(req.namespace, binding_name(kind, name))
                )
                binding = ResourceBinding.model_validate(got)
                # what the binding is charged now (the most of the template versions from the
                # one it names on: kube.templates), and once this version is among them
                charged = await self.templates.fetch(binding.spec.resource, req.namespace)
            priced = charge.template_change(
                binding, charged, new_pod, replicas, old_replicas, self.kinds
            )
            if not grown and not priced.revised and req.operation == "UPDATE":
                return Decision(True)  # scaled: the binding's update carries it (revised)
            new_charge, old_charge = priced.new, priced.old
        except NotFound:
            return Decision(True)  # not propagated: its binding is charged with this template
        except (ValidationError, QuantityError):
            return Decision(True)  # its binding is refused as invalid, whatever it costs
        except (KubeError, aiohttp.ClientError, TimeoutError, paths.InvalidName) as e:
            return Decision(
                False,
                f"karmadaquota webhook: the binding of {name} cannot be read: {why(e, limit)}",
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


def _charge_key(c: charge.Charge) -> ChargeKey:
    """A charge's totals and scopes: an edit to another priority class or QoS costs the same
    totals but is charged in other quotas, so it is not the retry of an admitted one."""
    return tuple(sorted((name, str(q)) for name, q in c.total.items())), c.traits


def binding_name(kind: str, name: str) -> str:
    """The ResourceBinding Karmada's detector makes for a template (names.GenerateBindingName)."""
    return f"{name}-{kind}".lower()
