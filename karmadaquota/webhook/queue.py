"""/mutate-resourcebinding: a new binding a quota with `onExceed: Queue` cannot take is
created queued (suspended, naming the quota: karmadaquota.queueing); it is charged nothing
there, and charged in full by the validating route when the controller lets it go.
"""

from __future__ import annotations

import aiohttp
from pydantic import ValidationError

from karmadaquota import api, charge, queueing
from karmadaquota.api import ResourceBinding
from karmadaquota.evaluate import QuotaView
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeError
from karmadaquota.quantity import QuantityError
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import BINDINGS, Admission


class QueueAdmission(Admission):
    async def mutate_binding(self, req: review.Request) -> queueing.QueueDecision | None:
        """Whether a new binding is created queued (suspended, naming the quota); None leaves
        it as it is. Never refuses: whatever is wrong with the binding, the validating route
        says, and a binding left unqueued is charged there in full (the safe side)."""
        review.expect(req, api.BINDING_GROUP, [api.BINDING_PLURAL], BINDINGS, "mutates")
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
