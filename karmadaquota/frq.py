"""FederatedResourceQuota (policy.karmada.io/v1alpha1) -> KarmadaQuota, for migrating users.

Pure: `convert` maps one FRQ object (JSON from the API server) to a KarmadaQuota plus the notes
a user must read; `render` prints them as a YAML stream for `kubectl apply -f -`, every note a
YAML comment. The kubectl plugin's `import-frq` does the fetching.

Names: an FRQ's `spec.overall` is compared with a binding's `replicaRequirements.resourceRequest`,
whose keys are bare resource names (`cpu`, `nvidia.com/gpu`). A KarmadaQuota uses ResourceQuota
names, so `cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>` and extended resources become
`requests.<name>`; names a KarmadaQuota already understands (`pods`, `count/<r>.<g>`, …) stay;
what it cannot charge (`storage`, …) and the limits it never enforced (`limits.*`) are named in a
comment, not dropped silently.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from karmadaquota import api, resources
from karmadaquota.pod_template import LIMITS_PREFIX
from karmadaquota.quantity import QuantityError
from karmadaquota.resources import REQUEST_ALIASES, REQUESTS_PREFIX, parse_resource_list
from karmadaquota.validation import validate_resource_name

# Karmada's FRQ never enforced limits (it charges resourceRequest keys only): a migration that
# carried them over would start refusing workloads the FRQ admitted, without limits.
LIMITS_NOT_ENFORCED = (
    "Karmada's FederatedResourceQuota never enforced limits; add it to the KarmadaQuota by "
    "hand to have karmadaquota enforce it (replicas without that limit are then refused)"
)
FRQ_GROUP = "policy.karmada.io"
FRQ_PLURAL = "federatedresourcequotas"
FRQ_RESOURCE = f"{FRQ_PLURAL}.{FRQ_GROUP}"
IMPORTED_FROM = f"{api.GROUP}/imported-from"

STATIC_ASSIGNMENTS_WHY = (
    "karmadaquota holds one global limit at admission on the Karmada control plane and does "
    "not split it into per-cluster ResourceQuotas; the scheduler places replicas anywhere "
    "inside the global budget. The member ResourceQuotas Karmada derived from them keep "
    "applying until the FederatedResourceQuota is deleted; create ResourceQuotas in the "
    "members yourself if you need per-cluster caps."
)


@dataclass
class Conversion:
    """One FRQ's KarmadaQuota (None when nothing in it can be charged) and what to read."""

    source: str
    quota: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def quota_name(frq_name: str) -> str:
    """The KarmadaQuota name for an FRQ `spec.overall` key (resourceRequest's bare names)."""
    if frq_name in REQUEST_ALIASES:
        return REQUEST_ALIASES[frq_name]
    if frq_name.startswith(resources.HUGEPAGES_PREFIX):
        return REQUESTS_PREFIX + frq_name
    prefixed = frq_name.startswith((REQUESTS_PREFIX, "limits.", resources.COUNT_PREFIX))
    if resources.is_extended(frq_name) and not prefixed:
        return REQUESTS_PREFIX + frq_name
    return frq_name


def _bad_quantity(name: str, value: Any) -> str | None:
    try:
        parse_resource_list({name: value}, "spec.overall")
    except QuantityError as e:
        return str(e)
    return None


def convert(frq: Mapping[str, Any]) -> Conversion:
    """The KarmadaQuota enforcing what `frq`'s `spec.overall` limits, with notes."""
    meta = frq.get("metadata") or {}
    spec = frq.get("spec") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    out = Conversion(source=f"{namespace}/{name}", quota=None)
    hard: dict[str, Any] = {}
    for frq_key in sorted(spec.get("overall") or {}):
        value = spec["overall"][frq_key]
        kq_key = quota_name(frq_key)
        problem = (
            LIMITS_NOT_ENFORCED
            if kq_key.startswith(LIMITS_PREFIX)
            else validate_resource_name(kq_key) or _bad_quantity(kq_key, value)
        )
        if problem:
            out.notes.append(f"not carried over: {frq_key}={value}: {problem}")
            continue
        if kq_key in hard:
            out.notes.append(
                f"not carried over: {frq_key}={value}: {kq_key} is already set from another key"
            )
            continue
        hard[kq_key] = value
        if kq_key != frq_key:
            out.notes.append(f"{frq_key} -> {kq_key}")
        else:  # every name FRQ charges is a bare resourceRequest name, and those are renamed
            out.notes.append(
                f"{kq_key}: Karmada's FederatedResourceQuota never charged this name (it charges "
                "resourceRequest keys only); karmadaquota does — check the limit fits today's usage"
            )
    assignments = spec.get("staticAssignments") or []
    if assignments:
        clusters = ", ".join(str(a.get("clusterName", "?")) for a in assignments)
        why = STATIC_ASSIGNMENTS_WHY
        out.notes.append(f"staticAssignments ({clusters}) not carried over: {why}")
    if not hard:
        out.notes.append("no KarmadaQuota written: nothing in spec.overall can be charged")
        return out
    out.quota = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {IMPORTED_FROM: f"{FRQ_RESOURCE}/{name}"},
        },
        "spec": {"hard": hard},
    }
    return out


def render(conversions: Iterable[Conversion]) -> str:
    """A YAML stream for `kubectl apply -f -`: one document per quota, notes as comments."""
    docs = []
    for c in conversions:
        lines = [f"# from FederatedResourceQuota {c.source}"]
        for note in c.notes:
            lines += textwrap.wrap(note, 98, initial_indent="# ", subsequent_indent="#   ")
        text = "\n".join(lines) + "\n"
        if c.quota is not None:
            text += yaml.safe_dump(c.quota, sort_keys=False, default_flow_style=False)
        docs.append(text)
    return "---\n".join(docs)
