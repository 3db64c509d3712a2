"""The test bed's own reference charge: what docs/charging.md says a ResourceBinding costs, written
from the document and never from the product (`karmadaquota.charge` is what is under test; an
oracle that calls it agrees with every mistake it makes).

Only what the campaigns' bindings use: no resource template (so no template pod, no surge), a
Deployment's `count/deployments.apps`, `pods` = R and R × each request under `requests.<r>` and the
bare `<r>`, with R = max(`spec.replicas`, Σ replicas of the clusters Karmada renders a Work into:
`spec.clusters` (a cluster listed twice: their sum), then `spec.requiredBy` clusters not among them,
then each `gracefulEvictionTasks[].fromCluster` in neither, with the task's replicas or
`spec.replicas`, unless the task is purged `Directly`/`Immediately`). One component is charged like
the legacy fields it replaces; several charge Σ component replicas × requests once per target
cluster (once before scheduling). A negative request or replica count is charged as zero; a binding
queued by a quota (its `quota.karmada.io/queued-by` annotation, suspended, placed nowhere) is
charged nothing. Scopes as Kubernetes' ResourceQuota reads a pod's: BestEffort is replicas without
any request, PriorityClass the replicas' class, and a binding without replicas matches no scope.

Quantities are Kubernetes' (suffixes, decimal exponents), kept exact as fractions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{f"{p}i": Fraction(2 ** (10 * (i + 1))) for i, p in enumerate("KMGTPE")},
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("1500m", "2Gi", "1e3", "1E", 3) exactly; ValueError if it is
    none."""
    m = _QUANTITY.match(str(value).strip())
    if m is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = m.groups()
    scale = Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIX[suffix or ""]
    return Fraction(number) * scale


Usage = dict[str, Fraction]


@dataclass(frozen=True)
class Charged:
    """One binding's charge by quota resource name, and what its scopes look at."""

    total: Usage
    has_replicas: bool
    best_effort: bool
    priority_class: str


def _add(into: Usage, more: Mapping[str, Fraction], times: int = 1) -> None:
    for name, q in more.items():
        into[name] = into.get(name, Fraction(0)) + q * times


def _count(n: Any) -> int:
    return max(0, int(n or 0))


def _one_replica(requirements: Mapping[str, Any] | None) -> tuple[Usage, bool]:
    """(what one replica is charged, whether it is best effort)."""
    requests = {
        r: max(Fraction(0), quantity(v))
        for r, v in ((requirements or {}).get("resourceRequest") or {}).items()
    }
    usage: Usage = {"pods": Fraction(1)}
    for r, q in requests.items():
        usage[f"requests.{r}"] = q
        usage[r] = q
    return usage, all(q == 0 for q in requests.values())


def _placed(spec: Mapping[str, Any]) -> dict[str, int]:
    """Replicas per cluster Karmada renders a Work into."""
    out: dict[str, int] = {}
    for c in spec.get("clusters") or []:
        out[c["name"]] = out.get(c["name"], 0) + _count(c.get("replicas"))
    scheduled = set(out)
    for snapshot in spec.get("requiredBy") or []:
        for c in snapshot.get("clusters") or []:
            if c["name"] not in scheduled and c["name"] not in out:
                out[c["name"]] = _count(c.get("replicas"))
    for task in spec.get("gracefulEvictionTasks") or []:
        if task["fromCluster"] not in out and task.get("purgeMode") not in (
            "Directly",
            "Immediately",
        ):
            kept = task.get("replicas")
            out[task["fromCluster"]] = _count(spec.get("replicas") if kept is None else kept)
    return out


def _queued(binding: Mapping[str, Any]) -> bool:
    spec = binding["spec"]
    annotations = binding["metadata"].get("annotations") or {}
    placed = any(spec.get(k) for k in ("clusters", "gracefulEvictionTasks", "requiredBy"))
    return bool(
        annotations.get("quota.karmada.io/queued-by")
        and (spec.get("suspension") or {}).get("scheduling") is True
        and not placed
    )


def charge(binding: Mapping[str, Any]) -> Charged:
    """The binding's charge by docs/charging.md; ValueError on an unreadable quantity."""
    spec = binding["spec"]
    resource = spec["resource"]
    group = resource["apiVersion"].rpartition("/")[0]
    total: Usage = {f"count/{resource['kind'].lower()}s.{group}": Fraction(1)}
    components = spec.get("components") or []
    placed = _placed(spec)
    requirements = spec.get("replicaRequirements") or {}
    if len(components) > 1:
        one_copy: Usage = {}
        best_effort, has_replicas = True, False
        priority = requirements.get("priorityClassName") or ""
        for comp in components:
            replicas = _count(comp.get("replicas"))
            usage, empty = _one_replica(comp.get("replicaRequirements"))
            if replicas:
                _add(one_copy, usage, replicas)
                has_replicas, best_effort = True, best_effort and empty
            priority = priority or (comp.get("replicaRequirements") or {}).get(
                "priorityClassName", ""
            )
        named = {c["name"] for c in spec.get("clusters") or []}
        copies = max(1, len(spec.get("clusters") or []) + len(set(placed) - named))
        _add(total, one_copy, copies)
    else:
        if components:
            requirements = components[0].get("replicaRequirements") or {}
        replicas = _count(components[0].get("replicas") if components else spec.get("replicas"))
        r = max(replicas, sum(placed.values()))
        usage, best_effort = _one_replica(requirements)
        if r:
            _add(total, usage, r)
        has_replicas, priority = r > 0, requirements.get("priorityClassName") or ""
    if _queued(binding):
        total = {}
    return Charged(total, has_replicas, has_replicas and best_effort, priority)


def matches(quota_spec: Mapping[str, Any], c: Charged) -> bool:
    """Whether the quota's scopes (`scopes`, `scopeSelector`) select the binding."""
    exprs = [{"scopeName": s, "operator": "Exists"} for s in quota_spec.get("scopes") or []]
    exprs += (quota_spec.get("scopeSelector") or {}).get("matchExpressions") or []
    if not exprs:
        return True
    if not c.has_replicas:
        return False
    for e in exprs:
        scope, op, values = e["scopeName"], e["operator"], e.get("values") or []
        if scope == "BestEffort":
            ok = c.best_effort
        elif scope == "NotBestEffort":
            ok = not c.best_effort
        elif op == "Exists":
            ok = c.priority_class != ""
        elif op == "DoesNotExist":
            ok = c.priority_class == ""
        else:
            ok = (c.priority_class in values) == (op == "In")
        if not ok:
            return False
    return True


def charges(bindings: Iterable[Mapping[str, Any]]) -> list[Charged]:
    """The charge of each binding; an unreadable one is charged as zero (the controller counts
    a binding it cannot read as nothing, and says so in the quota's status)."""
    out = []
    for b in bindings:
        try:
            out.append(charge(b))
        except ValueError:
            continue
    return out


def total(quota_spec: Mapping[str, Any], charged: Sequence[Charged], resource: str) -> Fraction:
    """Σ `resource` over the charges the quota's scopes select."""
    return sum(
        (c.total.get(resource, Fraction(0)) for c in charged if matches(quota_spec, c)),
        Fraction(0),
    )
