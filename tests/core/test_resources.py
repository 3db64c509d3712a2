"""Tests for karmadaquota.resources: ResourceList operations and quota-name aliasing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karmadaquota import resources as r
from karmadaquota.quantity import Format, Quantity, QuantityError


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def rl(**items: str) -> dict[str, Quantity]:
    """rl(cpu="1") with '_' standing for '.' in names: rl(requests_cpu="1")."""
    return {name.replace("_", "."): q(v) for name, v in items.items()}


# ---------------------------------------------------------------------------------------------
# parse / format


def test_parse_resource_list_strings_and_numbers() -> None:
    got = r.parse_resource_list(
        {
            "requests.cpu": "1500m",
            "requests.memory": "2Gi",
            "pods": 10,
            "ratio": 1.5,
            "tiny": 1e-07,
        },
        "spec.hard",
    )
    assert got == {
        "requests.cpu": q("1500m"),
        "requests.memory": q("2Gi"),
        "pods": q("10"),
        "ratio": q("1500m"),
        "tiny": q("100n"),
    }
    assert got["requests.memory"].format is Format.BINARY_SI
    assert str(got["pods"]) == "10"


def test_parse_resource_list_none_and_empty() -> None:
    assert r.parse_resource_list(None, "spec.hard") == {}
    assert r.parse_resource_list({}, "spec.hard") == {}


def test_parse_resource_list_integral_float() -> None:
    assert r.parse_resource_list({"pods": 3.0}, "f") == {"pods": q("3")}


@pytest.mark.parametrize(
    ("raw", "value", "reason"),
    [
        ({"requests.cpu": "12x"}, '"12x"', 'unknown suffix "x"'),
        ({"requests.cpu": ""}, '""', "empty string"),
        ({"requests.cpu": 2**63}, '"9223372036854775808"', "too large"),
        ({"requests.cpu": 1e300}, '"1e+300"', "too large"),
        ({"requests.cpu": float("nan")}, '"nan"', "missing number"),
        ({"requests.cpu": float("inf")}, '"inf"', "missing number"),
        ({"requests.cpu": True}, '"True"', "not bool"),
        ({"requests.cpu": None}, '"None"', "not NoneType"),
        ({"requests.cpu": ["1"]}, "\"['1']\"", "not list"),
    ],
)
def test_parse_resource_list_errors_name_the_field(
    raw: dict[str, object], value: str, reason: str
) -> None:
    with pytest.raises(QuantityError) as info:
        r.parse_resource_list(raw, "spec.hard")  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"invalid quantity {value} for spec.hard[requests.cpu]: ")
    assert reason in message
    assert info.value.field == "spec.hard[requests.cpu]"


def test_parse_resource_list_not_a_map() -> None:
    with pytest.raises(QuantityError, match="expected a map") as info:
        r.parse_resource_list(["cpu"], "spec.hard")  # type: ignore[arg-type]
    assert info.value.field == "spec.hard"


def test_parse_resource_list_non_string_name() -> None:
    with pytest.raises(QuantityError, match="resource name 1 is not a string"):
        r.parse_resource_list({1: "1"}, "spec.hard")  # type: ignore[dict-item]


def test_format_resource_list_sorted_canonical() -> None:
    got = r.format_resource_list(rl(requests_memory="1024Mi", pods="10", requests_cpu="0.5"))
    assert got == {"pods": "10", "requests.cpu": "500m", "requests.memory": "1Gi"}
    assert list(got) == ["pods", "requests.cpu", "requests.memory"]


# ---------------------------------------------------------------------------------------------
# arithmetic


def test_add_union_and_formats() -> None:
    a = rl(requests_cpu="1", pods="1")
    b = rl(requests_cpu="500m", requests_memory="1Gi")
    got = r.add(a, b)
    assert got == rl(requests_cpu="1500m", pods="1", requests_memory="1Gi")
    assert str(got["requests.memory"]) == "1Gi"
    assert a == rl(requests_cpu="1", pods="1")  # inputs untouched
    assert r.add({}, {}) == {}


def test_subtract_may_go_negative() -> None:
    got = r.subtract(rl(requests_cpu="1", pods="2"), rl(requests_cpu="3", requests_memory="1Gi"))
    assert got == rl(requests_cpu="-2", pods="2", requests_memory="-1Gi")
    assert str(got["requests.memory"]) == "-1Gi"


def test_positive_part() -> None:
    got = r.positive_part(rl(requests_cpu="-1", pods="2", requests_memory="0"))
    assert got == {"requests.cpu": q("0"), "pods": q("2"), "requests.memory": q("0")}
    assert set(got) == {"requests.cpu", "pods", "requests.memory"}


def test_multiply() -> None:
    assert r.multiply(rl(cpu="250m", memory="512Mi"), 4) == rl(cpu="1", memory="2Gi")
    assert str(r.multiply(rl(memory="512Mi"), 4)["memory"]) == "2Gi"
    assert r.multiply(rl(cpu="1"), 0) == rl(cpu="0")


def test_mask() -> None:
    usage = rl(requests_cpu="1", pods="1", requests_memory="1Gi")
    assert r.mask(usage, ["pods", "requests.cpu", "absent"]) == rl(requests_cpu="1", pods="1")
    assert r.mask(usage, {"pods"}) == rl(pods="1")
    assert r.mask(usage, ()) == {}
    assert r.mask(usage, rl(pods="9").keys()) == rl(pods="1")


def test_remove_zeros_and_is_zero() -> None:
    usage = rl(requests_cpu="0", pods="1", requests_memory="0Gi")
    assert r.remove_zeros(usage) == rl(pods="1")
    assert not r.is_zero(usage)
    assert r.is_zero(rl(requests_cpu="0", pods="0m"))
    assert r.is_zero({})


# ---------------------------------------------------------------------------------------------
# less_or_equal


def test_less_or_equal_within() -> None:
    assert r.less_or_equal(rl(requests_cpu="1"), rl(requests_cpu="1")) == (True, [])
    assert r.less_or_equal({}, rl(requests_cpu="1")) == (True, [])


def test_less_or_equal_exceeded_names_sorted() -> None:
    usage = rl(requests_memory="2Gi", requests_cpu="1001m", pods="3", services="9")
    limit = rl(requests_cpu="1", requests_memory="2Gi", pods="2")
    ok, exceeded = r.less_or_equal(usage, limit)
    assert not ok
    assert exceeded == ["pods", "requests.cpu"]  # services is not constrained


def test_less_or_equal_unconstrained_names() -> None:
    assert r.less_or_equal(rl(gpus="100"), rl(requests_cpu="1")) == (True, [])


def test_less_or_equal_negative_limit() -> None:
    assert r.less_or_equal(rl(pods="0"), rl(pods="-1")) == (False, ["pods"])


# ---------------------------------------------------------------------------------------------
# aliasing


def test_canonical_name() -> None:
    assert r.canonical_name("cpu") == "requests.cpu"
    assert r.canonical_name("memory") == "requests.memory"
    assert r.canonical_name("ephemeral-storage") == "requests.ephemeral-storage"
    assert r.canonical_name("requests.cpu") == "requests.cpu"
    assert r.canonical_name("nvidia.com/gpu") == "nvidia.com/gpu"
    assert r.canonical_name("pods") == "pods"


def test_to_quota_names_all_forms() -> None:
    requests = {
        "cpu": q("500m"),
        "memory": q("1Gi"),
        "ephemeral-storage": q("2Gi"),
        "nvidia.com/gpu": q("1"),
        "hugepages-2Mi": q("4Mi"),
    }
    assert r.to_quota_names(requests, None) == {
        "cpu": q("500m"),
        "requests.cpu": q("500m"),
        "memory": q("1Gi"),
        "requests.memory": q("1Gi"),
        "ephemeral-storage": q("2Gi"),
        "requests.ephemeral-storage": q("2Gi"),
        "requests.nvidia.com/gpu": q("1"),
        "hugepages-2Mi": q("4Mi"),
        "requests.hugepages-2Mi": q("4Mi"),
    }
    assert r.to_quota_names(requests) == r.to_quota_names(requests, None)


def test_to_quota_names_never_bare_extended() -> None:
    got = r.to_quota_names(
        {"nvidia.com/gpu": q("2")}, ["nvidia.com/gpu", "requests.nvidia.com/gpu"]
    )
    assert got == {"requests.nvidia.com/gpu": q("2")}


def test_to_quota_names_filters_by_tracked() -> None:
    requests = {"cpu": q("1"), "memory": q("1Gi"), "example.com/fpga": q("1")}
    assert r.to_quota_names(requests, ["requests.cpu"]) == {"requests.cpu": q("1")}
    assert r.to_quota_names(requests, {"cpu"}) == {"cpu": q("1")}
    assert r.to_quota_names(requests, ("cpu", "requests.memory", "requests.example.com/fpga")) == {
        "cpu": q("1"),
        "requests.memory": q("1Gi"),
        "requests.example.com/fpga": q("1"),
    }
    assert r.to_quota_names(requests, []) == {}


def test_to_quota_names_drops_unchargeable() -> None:
    """Native non-compute names are not requests a quota can charge (as in Kubernetes)."""
    got = r.to_quota_names(
        {"pods": q("1"), "storage": q("1Gi"), "kubernetes.io/foo": q("1"), "cpu": q("1")}, None
    )
    assert got == {"cpu": q("1"), "requests.cpu": q("1")}


def test_to_quota_names_accepts_prefixed_input() -> None:
    got = r.to_quota_names({"requests.cpu": q("1"), "requests.nvidia.com/gpu": q("1")}, None)
    assert got == {"cpu": q("1"), "requests.cpu": q("1"), "requests.nvidia.com/gpu": q("1")}


def test_request_aliases_constant() -> None:
    assert r.REQUEST_ALIASES == {
        "cpu": "requests.cpu",
        "memory": "requests.memory",
        "ephemeral-storage": "requests.ephemeral-storage",
    }


# ---------------------------------------------------------------------------------------------
# properties

NAMES = st.sampled_from(["pods", "requests.cpu", "requests.memory", "services", "cpu"])
QUANTITIES = st.builds(Quantity, st.integers(-(10**24), 10**24), st.sampled_from(list(Format)))
LISTS = st.dictionaries(NAMES, QUANTITIES, max_size=5)


def values(a: dict[str, Quantity]) -> dict[str, int]:
    """Nano-units per name, a zero value and a missing name alike (format ignored)."""
    return {name: q.nanos for name, q in r.remove_zeros(a).items()}


@given(LISTS, LISTS)
def test_add_subtract_inverse(a: dict[str, Quantity], b: dict[str, Quantity]) -> None:
    assert values(r.subtract(r.add(a, b), b)) == values(a)
    assert values(r.add(a, b)) == values(r.add(b, a))


@given(LISTS, LISTS)
def test_less_or_equal_matches_definition(
    a: dict[str, Quantity], limit: dict[str, Quantity]
) -> None:
    ok, exceeded = r.less_or_equal(a, limit)
    expected = sorted(n for n in a if n in limit and a[n].nanos > limit[n].nanos)
    assert exceeded == expected
    assert ok == (not expected)


@given(LISTS, st.integers(0, 20))
def test_multiply_is_repeated_add(a: dict[str, Quantity], n: int) -> None:
    total: dict[str, Quantity] = {name: Quantity.zero() for name in a}
    for _ in range(n):
        total = r.add(total, a)
    assert values(r.multiply(a, n)) == values(total)


@given(LISTS)
def test_format_then_parse_round_trip(a: dict[str, Quantity]) -> None:
    bounded = {k: v for k, v in a.items() if abs(v.nanos) <= (2**63 - 1) * 10**9}
    assert r.parse_resource_list(r.format_resource_list(bounded), "status.used") == bounded


@given(st.lists(LISTS, max_size=8))
def test_total_is_add_folded_value_and_format(lists: list[dict[str, Quantity]]) -> None:
    """`total` (one pass over integers) equals folding `add`, printed forms included."""
    folded: dict[str, Quantity] = {}
    for rl in lists:
        folded = r.add(folded, rl)
    summed = r.total(lists)
    assert summed == folded
    assert {n: q.format for n, q in summed.items()} == {n: q.format for n, q in folded.items()}
