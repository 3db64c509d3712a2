"""/validate-karmadaquota: a KarmadaQuota's or ClusterKarmadaQuota's spec in Kubernetes'
words (what the CRD's CEL rules cannot check: karmadaquota.validation). No side effect."""

from __future__ import annotations

from pydantic import ValidationError

from karmadaquota import api, validation
from karmadaquota.api import KarmadaQuota
from karmadaquota.evaluate import Decision
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import REASON_INVALID, Admission, invalid_message, written


class QuotaAdmission(Admission):
    async def admit_quota(self, req: review.Request) -> Decision:
        """Validate a KarmadaQuota. No side effect: the controller labels its namespace for
        enforcement (kube.namespaces), so a forged review can change nothing."""
        return self.validate_quota(req)

    def validate_quota(self, req: review.Request) -> Decision:
        """A KarmadaQuota's or ClusterKarmadaQuota's spec, in Kubernetes' words."""
        what = f"{api.PLURAL}.{api.GROUP} and {api.CLUSTER_PLURAL}.{api.GROUP}"
        review.expect(req, api.GROUP, [api.PLURAL, api.CLUSTER_PLURAL], what)
        model: type[KarmadaQuota] = KarmadaQuota
        kind = api.KIND
        if req.resource.resource == api.CLUSTER_PLURAL:
            model, kind = api.ClusterKarmadaQuota, api.CLUSTER_KIND
        obj = written(req)
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
