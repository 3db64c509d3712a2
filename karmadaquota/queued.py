"""Which ResourceBindings are queued by a quota, and so charged nothing (issue 20).

A binding is queued when all three hold:
- it carries our annotation `quota.karmada.io/queued-by` naming the quota that queued it,
- its scheduling is suspended (`spec.suspension.scheduling: true`; Karmada's scheduler skips
  it, so nothing reaches a member),
- it was never placed: `spec.clusters` is empty, and so are `spec.gracefulEvictionTasks` and
  `spec.requiredBy` (an evicted cluster's Work keeps running until its task ends, and Karmada
  renders a binding into the clusters of the bindings that require it).

The third condition is what keeps the zero charge from being bought: scheduling suspension
stops *future* scheduling but leaves a placed binding's workloads running in the members, so a
user who adds our annotation and a suspension to a placed binding still pays for every replica.
Whoever clears the suspension or the annotation, or whoever places it, makes it chargeable in
full again, through the validating webhook (its matchConditions compare the suspension and the
annotation's presence), which refuses what does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karmadaquota.api import ResourceBinding

ANNOTATION = "quota.karmada.io/queued-by"


def queued_by(binding: ResourceBinding) -> str:
    """The quota that queued `binding`, or "" when it is not queued (charged as it asks)."""
    quota = binding.metadata.annotations.get(ANNOTATION, "")
    if not quota:
        return ""
    suspension = binding.spec.suspension
    if suspension is None or suspension.scheduling is not True:
        return ""
    spec = binding.spec
    return "" if spec.clusters or spec.gracefulEvictionTasks or spec.requiredBy else quota


def mark(obj: Mapping[str, Any]) -> str | None:
    """Our annotation's value on a raw object (None without it): a metadata change moves no
    generation."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None


def marked(obj: Mapping[str, Any]) -> bool:
    """Whether a raw object carries our annotation."""
    return mark(obj) is not None
