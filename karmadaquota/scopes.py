"""Quota scopes: which bindings a quota tracks, and which resources a scope may track.

Semantics follow Kubernetes' ResourceQuota scopes (scopeSelector) restricted to what a Karmada
ResourceBinding carries: `PriorityClass` reads `replicaRequirements.priorityClassName` (filled by
karmada-controller-manager only with the `ResourceQuotaEstimate` feature gate), `BestEffort`
means replicas without any resource request. A binding without replicas (a Service, a Secret)
never matches a scoped quota, exactly as Kubernetes' scoped quotas never match non-pod objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from karmadaquota import resources
from karmadaquota.api import KarmadaQuotaSpec, ScopedResourceSelectorRequirement

PRIORITY_CLASS = "PriorityClass"
BEST_EFFORT = "BestEffort"
NOT_BEST_EFFORT = "NotBestEffort"
SCOPE_NAMES = (BEST_EFFORT, NOT_BEST_EFFORT, PRIORITY_CLASS)
OPERATORS = ("DoesNotExist", "Exists", "In", "NotIn")

# Resources a scoped quota may track (Kubernetes' pod compute resources, requests only).
_COMPUTE_RESOURCES = frozenset({"pods", "cpu", "memory", "requests.cpu", "requests.memory"})


@dataclass(frozen=True, slots=True)
class Expression:
    """A validated scope expression (frozen so quotas can be cached and shared)."""

    scope: str
    operator: str
    values: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class BindingTraits:
    """What scopes look at on a binding; computed once per binding by `charge`."""

    has_replicas: bool
    best_effort: bool
    priority_class: str
    # (priority class, best effort) of the other pods its members may run: each version of its
    # resource template from the one it names on (`pod_template.PodCharge.scopes`). A quota
    # matching any of them is charged, as Kubernetes charges each of those pods where it runs.
    others: frozenset[tuple[str, bool]] = frozenset()


def expression(e: ScopedResourceSelectorRequirement) -> Expression:
    """One scopeSelector requirement (of a quota or of a limitedResources entry)."""
    return Expression(e.scopeName, e.operator, frozenset(e.values))


def expressions(spec: KarmadaQuotaSpec) -> tuple[Expression, ...]:
    """The quota's scopes as expressions: `scopes` entries become `<scope> Exists`."""
    out = [Expression(s, "Exists") for s in spec.scopes]
    if spec.scopeSelector is not None:
        out.extend(expression(e) for e in spec.scopeSelector.matchExpressions)
    return tuple(out)


def describe(spec: KarmadaQuotaSpec) -> list[str]:
    """The quota's scopes for people, in spec order: `BestEffort`, `PriorityClass In [a, b]`."""
    out = list(spec.scopes)
    if spec.scopeSelector is not None:
        for e in spec.scopeSelector.matchExpressions:
            text = f"{e.scopeName} {e.operator}"
            out.append(f"{text} [{', '.join(e.values)}]" if e.values else text)
    return out


def matches(exprs: Sequence[Expression], traits: BindingTraits) -> bool:
    """True when every expression matches the binding (scopes intersect) for one of the pods
    it may run (`BindingTraits.others`: a template edit that moves its pods to another class
    or QoS is charged where either version's pods fall)."""
    if not exprs:
        return True
    if not traits.has_replicas:
        return False
    if all(_matches_one(e, traits.priority_class, traits.best_effort) for e in exprs):
        return True
    return any(all(_matches_one(e, pc, be) for e in exprs) for pc, be in traits.others)


def _matches_one(e: Expression, pc: str, best_effort: bool) -> bool:
    if e.scope == BEST_EFFORT:
        return best_effort
    if e.scope == NOT_BEST_EFFORT:
        return not best_effort
    if e.operator == "Exists":
        return pc != ""
    if e.operator == "DoesNotExist":
        return pc == ""
    if e.operator == "In":
        return pc in e.values
    return pc not in e.values  # NotIn: also matches a binding with no class


def resource_allowed(exprs: Iterable[Expression], resource: str) -> bool:
    """Whether a quota with these scopes may track `resource` (else a validation error)."""
    for e in exprs:
        if e.scope == BEST_EFFORT:
            if resource != "pods":
                return False
        elif resource not in _COMPUTE_RESOURCES and not _is_extended_request(resource):
            return False
    return True


def _is_extended_request(resource: str) -> bool:
    return resource.startswith(resources.REQUESTS_PREFIX) and "/" in resource


def validate_expression(e: ScopedResourceSelectorRequirement, path: str) -> list[str]:
    """Kubernetes' scopeSelector validation, in its own words."""
    errors: list[str] = []
    if e.scopeName not in SCOPE_NAMES:
        supported = ", ".join(f'"{s}"' for s in SCOPE_NAMES)
        errors.append(
            f'{path}.scopeName: Unsupported value: "{e.scopeName}": supported values: {supported}'
        )
        return errors
    if e.operator not in OPERATORS:
        supported = ", ".join(f'"{o}"' for o in OPERATORS)
        errors.append(
            f'{path}.operator: Unsupported value: "{e.operator}": supported values: {supported}'
        )
        return errors
    if e.scopeName in (BEST_EFFORT, NOT_BEST_EFFORT) and e.operator != "Exists":
        errors.append(
            f"{path}.operator: Invalid value: \"{e.operator}\": must be 'Exists' when scope is "
            f"any of BestEffort and NotBestEffort"
        )
    if e.operator in ("In", "NotIn") and not e.values:
        errors.append(
            f"{path}.values: Required value: must be at least one value when `operator` is "
            "'In' or 'NotIn' for scope selector"
        )
    if e.operator in ("Exists", "DoesNotExist") and e.values:
        errors.append(
            f"{path}.values: Invalid value: {list(e.values)!r}: must be no value when "
            "`operator` is 'Exists' or 'DoesNotExist' for scope selector"
        )
    return errors


def validate_scopes(spec: KarmadaQuotaSpec) -> list[str]:
    """Every expression valid, no BestEffort/NotBestEffort conflict, hard names fit the scopes."""
    errors: list[str] = []
    if spec.scopeSelector is not None:
        for i, e in enumerate(spec.scopeSelector.matchExpressions):
            errors.extend(validate_expression(e, f"spec.scopeSelector.matchExpressions[{i}]"))
    if errors:
        return errors
    exprs = expressions(spec)
    scopes = {e.scope for e in exprs}
    if {BEST_EFFORT, NOT_BEST_EFFORT} <= scopes:
        errors.append(
            "spec.scopeSelector: Invalid value: "
            f"{sorted(scopes)!r}: conflicting scopes: BestEffort and NotBestEffort"
        )
    for name in sorted(spec.hard):
        if not resource_allowed(exprs, name):
            errors.append(
                f'spec.hard[{name}]: Invalid value: "{name}": unsupported scope applied to resource'
            )
    return errors
