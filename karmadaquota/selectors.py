"""Label selectors over namespaces: a cluster quota's `spec.namespaceSelector` (pure).

metav1.LabelSelector as Kubernetes reads it (apimachinery's `LabelSelectorAsSelector`):
`matchLabels` and `matchExpressions` are ANDed; an empty selector selects everything; `NotIn`
and `DoesNotExist` match a namespace without the key. Validation speaks Kubernetes' words
(apimachinery's `ValidateLabelSelector`), every problem at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from karmadaquota.api import LabelSelector, LabelSelectorRequirement

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_PREFIX_MSG = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _key_problems(key: str) -> list[str]:
    """validation.IsQualifiedName's messages for a label key."""
    parts = key.split("/")
    if len(parts) > 2:
        return [
            "a qualified name " + _NAME_MSG.replace("name part ", "", 1) + " with an optional "
            "DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    out = _part_problems(parts[0], "prefix", 253, _PREFIX, _PREFIX_MSG) if len(parts) == 2 else []
    return out + _part_problems(parts[-1], "name", 63, _NAME, _NAME_MSG)


def _part_problems(
    part: str, what: str, most: int, pattern: re.Pattern[str], msg: str
) -> list[str]:
    """The first of IsQualifiedName's checks a key's prefix or name part fails."""
    if not part:
        return [f"{what} part must be non-empty"]
    if len(part) > most:
        return [f"{what} part must be no more than {most} characters"]
    return [] if pattern.match(part) else [msg]


def _value_problems(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _VALUE.match(value):
        out.append(_VALUE_MSG)
    return out


def validate(selector: LabelSelector, path: str) -> list[str]:
    """Every reason `selector` is not a valid metav1.LabelSelector (field path: reason)."""
    errors: list[str] = []
    for key in sorted(selector.matchLabels):
        where = f"{path}.matchLabels"
        errors += [f'{where}: Invalid value: "{key}": {p}' for p in _key_problems(key)]
        value = selector.matchLabels[key]
        errors += [f'{where}: Invalid value: "{value}": {p}' for p in _value_problems(value)]
    for i, req in enumerate(selector.matchExpressions):
        errors += _requirement(req, f"{path}.matchExpressions[{i}]")
    return errors


def _requirement(req: LabelSelectorRequirement, path: str) -> list[str]:
    errors: list[str] = []
    if req.operator in (IN, NOT_IN):
        if not req.values:
            errors.append(
                f"{path}.values: Required value: must be specified when `operator` is 'In' or "
                "'NotIn'"
            )
    elif req.operator in (EXISTS, DOES_NOT_EXIST):
        if req.values:
            errors.append(
                f"{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            )
    else:
        errors.append(
            f'{path}.operator: Invalid value: "{req.operator}": not a valid selector operator'
        )
    errors += [f'{path}.key: Invalid value: "{req.key}": {p}' for p in _key_problems(req.key)]
    for j, value in enumerate(req.values):
        errors += [
            f'{path}.values[{j}]: Invalid value: "{value}": {p}' for p in _value_problems(value)
        ]
    return errors


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether a namespace carrying `labels` is selected. An invalid requirement (an unknown
    operator) selects nothing: a quota refused by validation charges no namespace."""
    for key, value in selector.matchLabels.items():
        if labels.get(key) != value:
            return False
    for req in selector.matchExpressions:
        have = labels.get(req.key)
        if req.operator == IN:
            ok = have is not None and have in req.values
        elif req.operator == NOT_IN:
            ok = have is None or have not in req.values
        elif req.operator == EXISTS:
            ok = have is not None
        elif req.operator == DOES_NOT_EXIST:
            ok = have is None
        else:
            return False
        if not ok:
            return False
    return True


def selected(selector: LabelSelector, table: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The namespaces of `table` (name → labels) the selector picks, sorted."""
    return sorted(ns for ns, labels in table.items() if matches(selector, labels))
