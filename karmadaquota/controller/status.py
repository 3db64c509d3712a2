"""Status helpers (pure): the human summary, condition bookkeeping, and the write decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from karmadaquota.api import Condition, KarmadaQuotaStatus, format_time
from karmadaquota.quantity import Quantity

COND_READY = "Ready"
COND_VALID = "Valid"
COND_MEMBER_OBSERVED = "MemberObserved"
# Present (False) only while some binding of the namespace is charged as zero where invalid.
COND_BINDINGS_CHARGED = "BindingsCharged"
# karmada-apiserver sends the namespace's bindings to the webhook (kube.namespaces' label)
COND_ENFORCED = "Enforced"
# memberEnforcement ResourceQuota: some member's pods request more than Karmada placed there
COND_OUT_OF_BAND = "OutOfBandUsage"
# memberEnforcement ResourceQuota: every member holds its guard as the share policy wants
COND_GUARDED = "Guarded"
CONDITION_ORDER = (
    COND_READY,
    COND_VALID,
    COND_MEMBER_OBSERVED,
    COND_BINDINGS_CHARGED,
    COND_ENFORCED,
    COND_OUT_OF_BAND,
    COND_GUARDED,
)

_ZERO = Quantity.zero()


def summary(used: Mapping[str, Quantity], hard: Mapping[str, Quantity]) -> str:
    """`pods: 30/500, requests.cpu: 12/100` — every hard name, sorted, canonical quantities."""
    return ", ".join(f"{n}: {used.get(n, _ZERO)}/{hard[n]}" for n in sorted(hard))


def merge_conditions(
    current: Sequence[Condition], wanted: Sequence[Condition], now: datetime
) -> list[Condition]:
    """`wanted` conditions, keeping lastTransitionTime of those whose status did not change.

    Conditions of other types (set by someone else) are kept after ours.
    """
    by_type = {c.type: c for c in current}
    ours = {c.type for c in wanted}
    out: list[Condition] = []
    for w in sorted(wanted, key=_order):
        old = by_type.get(w.type)
        stamp = (
            old.lastTransitionTime
            if old is not None and old.status == w.status and old.lastTransitionTime
            else format_time(now)
        )
        out.append(w.model_copy(update={"lastTransitionTime": stamp}))
    out.extend(c for c in current if c.type not in ours)
    return out


def _order(c: Condition) -> tuple[int, str]:
    try:
        return (CONDITION_ORDER.index(c.type), c.type)
    except ValueError:
        return (len(CONDITION_ORDER), c.type)


def dump(status: KarmadaQuotaStatus) -> dict[str, Any]:
    """The status as it goes on the wire (what is compared and written)."""
    out: dict[str, Any] = status.model_dump(mode="json", exclude_none=True)
    return out


def needs_write(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True unless the object's status already says exactly what we would write.

    The API server drops empty maps and lists of a status, so absent and empty are the same.
    """
    return bool(_normal(current or {}) != _normal(desired))


def _normal(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items() if v not in ({}, [], None, "")}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value
