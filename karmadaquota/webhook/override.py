"""/validate-overridepolicy: what an untrusted writer may make Karmada render, an allow-list.

An OverridePolicy in a namespace with a quota, or a ClusterOverridePolicy that may apply in
one, from an untrusted writer holds only overrides on the allow-list (karmadaquota.overrides;
docs/security.md); anything else is refused naming the rule and how the platform team
extends the list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karmadaquota import api, overrides, trust
from karmadaquota.evaluate import REASON_FORBIDDEN, Decision
from karmadaquota.kube import paths
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import NOT_SYNCED, Admission, written

# what /validate-overridepolicy admits: namespaced and cluster-wide OverridePolicies
OVERRIDE_PLURALS = (api.OVERRIDE_PLURAL, api.CLUSTER_OVERRIDE_PLURAL)


class OverrideAdmission(Admission):
    async def admit_override(self, req: review.Request) -> Decision:
        """An OverridePolicy in a namespace with a quota, or a ClusterOverridePolicy that may
        apply in one: an untrusted writer may write only overrides on the allow-list
        (karmadaquota.overrides; docs/security.md)."""
        plural = req.resource.resource
        what = f"{' and '.join(OVERRIDE_PLURALS)}.{api.OVERRIDE_GROUP}"
        review.expect(req, api.OVERRIDE_GROUP, OVERRIDE_PLURALS, what)
        obj = written(req)
        if obj is None:
            return Decision(True)
        if not self.synced():
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
        # judged by the kinds it selects, the names the quotas track and the members' guards
        judged = self._judged(req.namespace if plural == api.OVERRIDE_PLURAL else None, limited)
        refused = overrides.refusals(obj, self.allowed_overrides, judged)
        if overrides.only_as_before(obj, req.oldObject, refused, self.allowed_overrides, judged):
            return Decision(True)
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

    def _judged(self, namespace: str | None, cluster_quotas: list[str]) -> overrides.Judged:
        """What a namespace tells about an override in it (overrides.Judged): guarded when each
        of its quotas keeps member guards and no ClusterKarmadaQuota (which cannot) selects it;
        the names its quotas track. A ClusterOverridePolicy (`namespace` None), or a
        namespace a cluster quota selects, is judged as if every priced name were tracked."""
        quotas = self.quotas.quotas(namespace) if namespace is not None else []
        if namespace is None or cluster_quotas or not quotas:
            return overrides.Judged(kinds=self.kinds)
        return overrides.Judged(
            guarded=all(q.spec.guarded for q in quotas),
            tracked=frozenset(n for q in quotas for n in q.spec.hard),
            kinds=self.kinds,
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
