"""Validation of a KarmadaQuota spec, in Kubernetes' own words (field path: reason).

The CRD's CEL rules catch what CEL can express when the object is stored; this is the complete
check, served by the webhook's `/validate-karmadaquota` and used by the controller before it
trusts a quota. Returns every problem at once so a user fixes them in one go.
"""

from __future__ import annotations

import re

from karmadaquota.api import KarmadaQuotaSpec
from karmadaquota.quantity import QuantityError
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


def validate_resource_name(name: str) -> str | None:
    """Why `name` cannot be a KarmadaQuota resource, or None when it can."""
    path = f"spec.hard[{name}]"
    if name.startswith("limits."):
        return (
            f'{path}: Invalid value: "{name}": limits are not chargeable: '
            "ResourceBindings carry resource requests only"
        )
    if name.startswith("requests."):
        rest = name.removeprefix("requests.")
        if rest and _QUALIFIED.match(rest):
            return None
        return f'{path}: Invalid value: "{name}": must be requests.<resource name>'
    if name.startswith("count/"):
        rest = name.removeprefix("count/")
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


def validate_spec(spec: KarmadaQuotaSpec) -> list[str]:
    """Every reason this spec is not a valid KarmadaQuota; empty when it is."""
    errors: list[str] = []
    for name in sorted(spec.hard):
        problem = validate_resource_name(name)
        if problem:
            errors.append(problem)
    try:
        hard = parse_resource_list(spec.hard, "spec.hard")
    except QuantityError as e:
        errors.append(str(e))
    else:
        for name in sorted(hard):
            if hard[name].sign < 0:
                errors.append(
                    f'spec.hard[{name}]: Invalid value: "{hard[name]}": '
                    "must be greater than or equal to 0"
                )
    for i, scope in enumerate(spec.scopes):
        if scope not in (BEST_EFFORT, NOT_BEST_EFFORT):
            errors.append(
                f'spec.scopes[{i}]: Unsupported value: "{scope}": supported values: '
                f'"{BEST_EFFORT}", "{NOT_BEST_EFFORT}"'
            )
    errors.extend(validate_scopes(spec))
    return errors
