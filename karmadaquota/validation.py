"""Validation of a KarmadaQuota spec, in Kubernetes' own words (field path: reason).

The CRD's CEL rules catch what CEL can express when the object is stored; this is the complete
check, served by the webhook's `/validate-karmadaquota` and used by the controller before it
trusts a quota. Returns every problem at once so a user fixes them in one go.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from karmadaquota import resources, selectors
from karmadaquota.api import (
    ENFORCEMENT_ENUM,
    ENFORCEMENT_RESOURCE_QUOTA,
    EVICTED_ENUM,
    ON_EXCEED_QUEUE,
    ON_EXCEED_REFUSE,
    RECLAIM_ENUM,
    RECLAIM_NEVER,
    STRATEGY_BEST_EFFORT,
    ClusterKarmadaQuotaSpec,
    KarmadaQuotaSpec,
    QuantityValue,
)
from karmadaquota.pod_template import LIMITED, LIMITS_PREFIX, is_claim_name
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.resources import parse_resource_list
from karmadaquota.scopes import BEST_EFFORT, NOT_BEST_EFFORT, validate_scopes

# Quota names that need no domain prefix (Kubernetes' standard quota resources we can charge).
STANDARD_NAMES = frozenset(
    {
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "services",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
    }
)
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_COUNTED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _chargeable_request(resource: str) -> bool:
    """What a binding can be charged as requests.<resource> (resources.to_quota_names): cpu,
    memory, ephemeral-storage, hugepages-<size>, or an extended resource."""
    return (
        resource in resources.REQUEST_ALIASES
        or resource.startswith(resources.HUGEPAGES_PREFIX)
        or resources.is_extended(resource)
    )


def validate_resource_name(name: str) -> str | None:
    """Why `name` cannot be a KarmadaQuota resource, or None when it can."""
    path = f"spec.hard[{name}]"
    if is_claim_name(name):
        return None  # a StatefulSet's claim templates (karmadaquota.pod_template.claims)
    if name.startswith(LIMITS_PREFIX):
        if name.removeprefix(LIMITS_PREFIX) in LIMITED:
            return None  # charged from the resource template's pod (karmadaquota.pod_template)
        return (
            f'{path}: Invalid value: "{name}": must be a standard resource for quota '
            f"(limits.{', limits.'.join(LIMITED)})"
        )
    if name.startswith(resources.REQUESTS_PREFIX):
        rest = name.removeprefix(resources.REQUESTS_PREFIX)
        if not (rest and _QUALIFIED.match(rest)):
            return f'{path}: Invalid value: "{name}": must be requests.<resource name>'
        if _chargeable_request(rest):
            return None
        # e.g. requests.pods: valid-looking, but no binding is ever charged it
        return f'{path}: Invalid value: "{name}": must be a standard resource for quota'
    if name.startswith(resources.COUNT_PREFIX):
        rest = name.removeprefix(resources.COUNT_PREFIX)
        if _COUNTED.match(rest):
            return None
        return f'{path}: Invalid value: "{name}": must be count/<resource>.<group>'
    if name in STANDARD_NAMES:
        return None
    if "/" in name and _QUALIFIED.match(name):
        return (
            f'{path}: Invalid value: "{name}": extended resources are tracked only as '
            f'"requests.{name}"'
        )
    return f'{path}: Invalid value: "{name}": must be a standard resource for quota'


def _amount(
    rl: Mapping[str, QuantityValue], name: str, where: str, errors: list[str]
) -> Quantity | None:
    """`rl[name]` as a quantity of at least 0; None (the reason in `errors`) when it is not.
    One name at a time, so that every bad quantity is reported, not only the first."""
    try:
        value = parse_resource_list({name: rl[name]}, where)[name]
    except QuantityError as e:
        errors.append(str(e))
        return None
    if value.sign < 0:
        errors.append(
            f'{where}[{name}]: Invalid value: "{value}": must be greater than or equal to 0'
        )
        return None
    return value


def validate_spec(spec: KarmadaQuotaSpec) -> list[str]:
    """Every reason this spec is not a valid KarmadaQuota; empty when it is."""
    errors: list[str] = []
    for name in sorted(spec.hard):
        problem = validate_resource_name(name)
        if problem:
            errors.append(problem)
    for name in sorted(spec.hard):
        _amount(spec.hard, name, "spec.hard", errors)
    for i, scope in enumerate(spec.scopes):
        if scope not in (BEST_EFFORT, NOT_BEST_EFFORT):
            errors.append(
                f'spec.scopes[{i}]: Unsupported value: "{scope}": supported values: '
                f'"{BEST_EFFORT}", "{NOT_BEST_EFFORT}"'
            )
    errors.extend(validate_scopes(spec))
    errors.extend(validate_member_enforcement(spec))
    if spec.failover is not None and spec.failover.evictedReplicas not in EVICTED_ENUM:
        supported = ", ".join(f'"{v}"' for v in EVICTED_ENUM)
        errors.append(
            f'spec.failover.evictedReplicas: Unsupported value: "{spec.failover.evictedReplicas}"'
            f": supported values: {supported}"
        )
    errors.extend(validate_cohort(spec))
    if isinstance(spec, ClusterKarmadaQuotaSpec):
        errors.extend(validate_cluster_spec(spec))
    return errors


_COHORT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate_cohort(spec: KarmadaQuotaSpec) -> list[str]:
    """`cohort` is a DNS label; the limits need one, name only names of `hard`, are at least
    0, and a lending limit is at most hard (Kueue's rules, in Kubernetes' words)."""
    errors: list[str] = []
    if spec.cohort and (not _COHORT.match(spec.cohort) or len(spec.cohort) > 63):
        errors.append(
            f'spec.cohort: Invalid value: "{spec.cohort}": a lowercase RFC 1123 label must '
            "consist of lower case alphanumeric characters or '-', and must start and end "
            "with an alphanumeric character (at most 63 characters)"
        )
    if spec.reclaimWithinCohort not in RECLAIM_ENUM:
        supported = ", ".join(f'"{v}"' for v in RECLAIM_ENUM)
        errors.append(
            f'spec.reclaimWithinCohort: Unsupported value: "{spec.reclaimWithinCohort}": '
            f"supported values: {supported}"
        )
    elif spec.reclaimWithinCohort != RECLAIM_NEVER and not spec.cohort:
        errors.append(
            "spec.reclaimWithinCohort: Forbidden: must be Never when spec.cohort is empty"
        )
    for field in ("borrowingLimit", "lendingLimit"):
        limit = getattr(spec, field)
        if limit is None:
            continue
        if not spec.cohort:
            errors.append(f"spec.{field}: Forbidden: must be empty when spec.cohort is empty")
        for name in sorted(limit):
            if name not in spec.hard:
                errors.append(
                    f'spec.{field}[{name}]: Invalid value: "{name}": must be a name of spec.hard'
                )
                continue
            value = _amount(limit, name, f"spec.{field}", errors)
            if field != "lendingLimit" or value is None:
                continue
            try:
                hard = parse_resource_list({name: spec.hard[name]}, "spec.hard")[name]
            except QuantityError:
                continue  # reported for spec.hard
            if value > hard:
                errors.append(
                    f'spec.lendingLimit[{name}]: Invalid value: "{value}": must be less than or '
                    f"equal to spec.hard[{name}] ({hard})"
                )
    return errors


def validate_cluster_spec(spec: ClusterKarmadaQuotaSpec) -> list[str]:
    """What a ClusterKarmadaQuota adds to a quota spec — its namespace selector — and the
    features of a namespaced quota it cannot have, each with the reason (docs/cluster-quotas.md)."""
    errors = selectors.validate(spec.namespaceSelector, "spec.namespaceSelector")
    if spec.onExceed == ON_EXCEED_QUEUE:
        errors.append(
            f'spec.onExceed: Unsupported value: "{ON_EXCEED_QUEUE}": supported values: '
            f'"{ON_EXCEED_REFUSE}" (a queue admits one namespace\'s bindings in order against '
            "that namespace's quotas; a ClusterKarmadaQuota refuses, and Karmada retries the "
            "refused workload)"
        )
    if spec.queueingStrategy != STRATEGY_BEST_EFFORT:
        errors.append(
            f'spec.queueingStrategy: Unsupported value: "{spec.queueingStrategy}": supported '
            f'values: "{STRATEGY_BEST_EFFORT}" (a ClusterKarmadaQuota keeps no queue to order)'
        )
    if spec.cohort:
        errors.append(
            "spec.cohort: Forbidden: a ClusterKarmadaQuota does not join a cohort yet (the "
            "namespaces' own KarmadaQuotas may)"
        )
    if spec.memberEnforcement == ENFORCEMENT_RESOURCE_QUOTA:
        errors.append(
            f'spec.memberEnforcement: Unsupported value: "{ENFORCEMENT_RESOURCE_QUOTA}": '
            'supported values: "None" (a member guard is a ResourceQuota, which holds one '
            "namespace; a budget shared by many namespaces cannot be split into them without "
            "stranding it)"
        )
    return errors


_CLUSTER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def validate_member_enforcement(spec: KarmadaQuotaSpec) -> list[str]:
    """memberEnforcement is known; clusterHard names member clusters, caps only names of
    `hard`, each at least 0 and at most the global hard, and only with ResourceQuota."""
    errors: list[str] = []
    if spec.memberEnforcement not in ENFORCEMENT_ENUM:
        supported = ", ".join(f'"{v}"' for v in ENFORCEMENT_ENUM)
        errors.append(
            f'spec.memberEnforcement: Unsupported value: "{spec.memberEnforcement}": '
            f"supported values: {supported}"
        )
    if spec.clusterHard and not spec.guarded:
        errors.append(
            "spec.clusterHard: Forbidden: per-cluster caps need memberEnforcement ResourceQuota "
            "(only member guards can hold a member to them)"
        )
    hard: dict[str, Quantity] = {}
    for name in spec.hard:
        try:
            hard[name] = parse_resource_list({name: spec.hard[name]}, "spec.hard")[name]
        except QuantityError:
            continue  # reported for spec.hard
    for cluster in sorted(spec.clusterHard):
        if not _CLUSTER_NAME.match(cluster) or len(cluster) > 253:
            errors.append(
                f'spec.clusterHard[{cluster}]: Invalid value: "{cluster}": must be a member '
                "cluster name (a DNS subdomain)"
            )
        caps = spec.clusterHard[cluster]
        where = f"spec.clusterHard[{cluster}]"
        for name in sorted(caps):
            path = f"spec.clusterHard[{cluster}][{name}]"
            if name not in spec.hard:
                errors.append(
                    f'{path}: Invalid value: "{name}": must be a resource named in spec.hard'
                )
                continue
            value = _amount(caps, name, where, errors)
            if value is not None and name in hard and value > hard[name]:
                errors.append(
                    f'{path}: Invalid value: "{value}": must be less than or equal to '
                    f"spec.hard[{name}] ({hard[name]})"
                )
    return errors
