"""ResourceList operations, as Kubernetes' quota helpers (pkg/quota/v1/resources.go) do them.

A ResourceList maps a resource name ("requests.cpu", "pods", "count/deployments.apps") to an
exact Quantity. Every function is pure and returns a new dict; inputs are never mutated, so
lists can be cached and shared between the webhook's batches and the controller.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeAlias

from karmadaquota.quantity import Format, Quantity, QuantityError

__all__ = [
    "COUNT_PODS",
    "COUNT_PREFIX",
    "HUGEPAGES_PREFIX",
    "PODS",
    "REQUESTS_PREFIX",
    "REQUEST_ALIASES",
    "ResourceList",
    "add",
    "canonical_name",
    "count_name",
    "format_pairs",
    "format_resource_list",
    "is_extended",
    "is_zero",
    "less_or_equal",
    "mask",
    "maximum",
    "multiply",
    "parse_resource_list",
    "positive_part",
    "remove_zeros",
    "subtract",
    "to_quota_names",
]

ResourceList: TypeAlias = dict[str, Quantity]

PODS = "pods"
REQUESTS_PREFIX = "requests."
COUNT_PREFIX = "count/"
# Kubernetes' pod evaluator counts it as it counts `pods` (one per pod)
COUNT_PODS = "count/pods"
# Bare standard names a quota may also track under their requests.* name (same usage).
REQUEST_ALIASES: dict[str, str] = {
    "cpu": "requests.cpu",
    "memory": "requests.memory",
    "ephemeral-storage": "requests.ephemeral-storage",
}
# Native resources Kubernetes charges under both the bare and the requests.* name.
HUGEPAGES_PREFIX = "hugepages-"
_ZERO = Quantity.zero()


def parse_resource_list(
    raw: Mapping[str, str | int | float] | None, field: str
) -> dict[str, Quantity]:
    """Parse a wire resource list; errors name `field[name]`, e.g. spec.hard[requests.cpu].

    Values are strings or JSON numbers, as Kubernetes accepts. A number is parsed from its
    shortest repr (what a JSON encoder writes for it), so 1.5 -> "1.5" and 1e-07 -> "1e-07";
    the exponent format of a number literal like 1e3 is lost once JSON decoding made it a float
    (1000.0), which changes only how it prints. Booleans, NaN and infinities are rejected.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(
            repr(raw),
            f"expected a map of resource names to quantities, got {type(raw).__name__}",
            field,
        )
    out: dict[str, Quantity] = {}
    for name, value in raw.items():
        where = f"{field}[{name}]"
        if not isinstance(name, str):
            raise QuantityError(repr(value), f"resource name {name!r} is not a string", where)
        if isinstance(value, str):
            out[name] = Quantity.parse(value, where)
        elif isinstance(value, bool):
            raise QuantityError(repr(value), "must be a string or a number, not bool", where)
        elif isinstance(value, int | float):
            out[name] = Quantity.parse(repr(value), where)
        else:
            raise QuantityError(
                repr(value), f"must be a string or a number, not {type(value).__name__}", where
            )
    return out


def format_resource_list(rl: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical strings, sorted by name: what status fields carry."""
    return {name: str(rl[name]) for name in sorted(rl)}


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """a + b over the union of names (missing counts as zero)."""
    out = dict(a)
    for name, q in b.items():
        have = out.get(name)
        out[name] = q if have is None else have + q
    return out


def total(lists: Iterable[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    """Σ lists, equal to folding `add` over them (values and formats) without a Quantity per
    step: a quota's hundreds of reservations are summed on every admission batch."""
    nanos: dict[str, int] = {}
    formats: dict[str, Format] = {}
    for rl in lists:
        for name, q in rl.items():
            have = nanos.get(name, 0)
            if not have:  # Add's rule: a zero left operand takes the right one's format
                formats[name] = q.format
            nanos[name] = have + q.nanos
    return {name: Quantity(n, formats[name]) for name, n in nanos.items()}


def subtract(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """a - b over the union of names; may go negative (names only in b come out negated)."""
    out = dict(a)
    for name, q in b.items():
        have = out.get(name)
        out[name] = -q if have is None else have - q
    return out


def positive_part(a: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """Negative values become zero (names are kept): an UPDATE never releases quota."""
    return {name: q if q.nanos >= 0 else _ZERO for name, q in a.items()}


def mask(a: Mapping[str, Quantity], names: Collection[str]) -> dict[str, Quantity]:
    """Only the names a quota tracks."""
    keep = names if isinstance(names, AbstractSet) else frozenset(names)
    return {name: q for name, q in a.items() if name in keep}


def less_or_equal(
    a: Mapping[str, Quantity], limit: Mapping[str, Quantity]
) -> tuple[bool, list[str]]:
    """(all within limit, sorted names of `a` that exceed `limit`).

    Names absent from `limit` are unconstrained; names absent from `a` are within it.
    """
    exceeded = sorted(
        name for name, q in a.items() if (cap := limit.get(name)) is not None and q > cap
    )
    return (not exceeded, exceeded)


def is_zero(a: Mapping[str, Quantity]) -> bool:
    """True if every value is zero (an empty list is zero)."""
    return all(q.nanos == 0 for q in a.values())


def maximum(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """The larger value per name over the union (a missing name is not compared)."""
    out = dict(a)
    for name, q in b.items():
        have = out.get(name)
        if have is None or q > have:
            out[name] = q
    return out


def multiply(a: Mapping[str, Quantity], n: int) -> dict[str, Quantity]:
    """Every value x n (per-replica usage x replicas)."""
    return {name: q * n for name, q in a.items()}


def remove_zeros(a: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """Drop zero values."""
    return {name: q for name, q in a.items() if q.nanos != 0}


def canonical_name(name: str) -> str:
    """The requests.* quota name for a bare standard name (cpu -> requests.cpu); else `name`."""
    return REQUEST_ALIASES.get(name, name)


def is_extended(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-qualified name outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name


def plural(kind: str) -> str:
    """A kind's resource name, guessed as Kubernetes' RESTMapper does (Deployment: deployments)."""
    singular = kind.lower()
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def count_name(api_version: str, kind: str) -> str:
    """`count/<resource>.<group>` for a kind."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return f"{COUNT_PREFIX}{plural(kind)}.{group}" if group else f"{COUNT_PREFIX}{plural(kind)}"


def to_quota_names(
    requests: Mapping[str, Quantity], tracked: Collection[str] | None = None
) -> dict[str, Quantity]:
    """Per-replica container requests (bare names) -> the quota names they are charged under.

    As Kubernetes' pod evaluator: cpu, memory, ephemeral-storage and hugepages-* count under
    both the bare and the requests.* name; extended resources (nvidia.com/gpu) only as
    requests.<name>; other names are not chargeable and are dropped. A key that already
    carries the requests. prefix is read as its bare name. With `tracked`, only the names in
    it are produced; with None, every form is.
    """
    keep: Collection[str] | None = tracked
    if tracked is not None and not isinstance(tracked, AbstractSet):
        keep = frozenset(tracked)
    out: dict[str, Quantity] = {}
    for raw_name, q in requests.items():
        name = raw_name.removeprefix(REQUESTS_PREFIX)
        if name in REQUEST_ALIASES or name.startswith(HUGEPAGES_PREFIX):
            forms: tuple[str, ...] = (name, REQUESTS_PREFIX + name)
        elif is_extended(name) and not name.startswith(REQUESTS_PREFIX):
            forms = (REQUESTS_PREFIX + name,)
        else:
            continue
        for form in forms:
            if keep is None or form in keep:
                out[form] = q
    return out


def format_pairs(rl: Mapping[str, Quantity], names: Sequence[str]) -> str:
    """`name=value` pairs for `names` in their order, comma-joined, a missing name as zero.

    As Kubernetes' quota denials print them, e.g. "requests.cpu=2,requests.memory=1Gi".
    """
    return ",".join(f"{n}={rl.get(n, _ZERO)}" for n in names)
