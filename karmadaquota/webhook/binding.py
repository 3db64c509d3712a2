"""/validate-resourcebinding: a binding's charge against every quota limiting its namespace.

A CREATE or UPDATE of a ResourceBinding is charged (karmadaquota.charge, with its template's
pod) behind its namespace's writer and every cluster quota's selecting it; an untrusted writer
may change nothing of a binding but its status in a namespace with a quota
(karmadaquota.trust); a trusted writer's change that charges nothing (Karmada's finalizers,
the garbage collector) is answered at once, whatever the quota cache knows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import aiohttp
from pydantic import ValidationError

from karmadaquota import api, charge, evictions, queued, trust
from karmadaquota.api import ResourceBinding
from karmadaquota.evaluate import REASON_EXCEEDED, REASON_FORBIDDEN, Decision
from karmadaquota.evictions import Readiness
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeError
from karmadaquota.quantity import QuantityError
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import (
    BINDINGS,
    NOT_SYNCED,
    REASON_INVALID,
    REASON_NOT_READY,
    Admission,
    deadline_of,
    invalid_message,
    unreadable_template,
    written,
)
from karmadaquota.webhook.batcher import ChargeRequest


class BindingAdmission(Admission):
    async def admit_binding(self, req: review.Request, budget: float | None = None) -> Decision:
        """Decide a binding review; `budget`: seconds before its caller gives up (a review
        still queued then is answered with a timeout and reserves nothing)."""
        review.expect(req, api.BINDING_GROUP, [api.BINDING_PLURAL], BINDINGS)
        # status and other subresources carry no new charge; admission never releases quota
        # (a DELETE is the controller's)
        deadline = deadline_of(budget)
        obj = written(req)
        if obj is None:
            return Decision(True)
        if req.operation == "UPDATE" and req.oldObject is None:
            raise review.MalformedReview("request.oldObject is required for UPDATE")
        trusted = self.writers.trusts(req.userInfo)
        if trusted and req.oldObject is not None and not _charged_change(req.oldObject, obj):
            # Karmada's finalizers, the garbage collector: charged nothing, whatever the quota
            # cache knows, so a deletion never waits for it
            return Decision(True)
        if not self.synced():
            return NOT_SYNCED
        selecting = await self._selecting(req.namespace, deadline)
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
            new_pod = await self._pod(new, req.namespace, new.spec.replicas == 0, deadline)
            old_pod = (
                await self._pod(old, req.namespace, False, deadline) if old is not None else None
            )
            released = self._released()
            new_charge = charge.with_released(charge.charge(new, new_pod, self.kinds), released)
            old_charge = (
                charge.with_released(charge.charge(old, old_pod, self.kinds), released)
                if old is not None
                else None
            )
        except ValidationError as e:
            return Decision(False, f"invalid ResourceBinding: {api.describe(e)}", REASON_INVALID)
        except QuantityError as e:
            return Decision(False, f"invalid ResourceBinding: {e}", REASON_INVALID)
        except (KubeError, aiohttp.ClientError, TimeoutError, paths.InvalidName) as e:
            return Decision(False, unreadable_template(new.spec.resource, e), REASON_NOT_READY)
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
        if decision.reason == REASON_EXCEEDED and new_charge.evicted:
            # Karmada's scheduler puts this answer in its events: say why a failover waits
            decision = replace(
                decision,
                message=f"{decision.message}; {self._evictions(new, new_charge)}",
            )
        if self.refusals is not None and not req.dryRun:
            self.refusals.observe(req.namespace, new, old, new_charge, old_charge, decision)
        return decision

    def _evictions(self, binding: ResourceBinding, c: charge.Charge) -> str:
        """Why the binding's eviction tasks are charged, cluster by cluster, and how long."""
        return evictions.describe(
            sorted(c.evicted),
            evictions.task_ends(binding),
            self.readiness or Readiness(),
            time.time(),
        )

    def _released(self) -> frozenset[str]:
        """The clusters whose evicted replicas a releasing quota does not charge now."""
        return self.readiness.released(time.time()) if self.readiness is not None else frozenset()

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


def _charged_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an UPDATE changes what a binding's charge reads: its spec, or our queue
    annotation (karmadaquota.queued). A trusted writer's other changes charge nothing: the
    registration sends them only so that an untrusted writer's are refused."""
    return old.get("spec") != new.get("spec") or queued.mark(old) != queued.mark(new)
