"""Controller binding index: compact charges, event/relist ordering, from-scratch aggregation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import resources
from karmadaquota.charge import charge
from karmadaquota.controller.index import (
    BindingIndex,
    IndexedBinding,
    Interner,
    add,
    aggregate,
    compact,
    observe,
    safe_observe,
)
from karmadaquota.scopes import BindingTraits, Expression
from tests.conftest import binding, raw_binding


def entry(index: BindingIndex, **kw: Any) -> tuple[str, str, IndexedBinding]:
    seen = observe(raw_binding(**kw), index.intern)
    assert seen.entry is not None
    return seen.namespace, seen.uid, seen.entry


def as_text(nanos: Mapping[str, int]) -> dict[str, str]:
    from karmadaquota.quantity import Quantity

    return {n: str(Quantity(v)) for n, v in nanos.items()}


# ---------------------------------------------------------------------------------------------
# compact form


def test_compact_keeps_every_name_of_total_and_clusters() -> None:
    c = charge(binding(3, {"cpu": "500m"}, clusters={"m1": 1, "m2": 2}))
    u = compact(c, Interner())
    assert set(u.names) == set(c.total)
    total = dict(zip(u.names, u.total, strict=True))
    assert total["requests.cpu"] == 1_500_000_000
    assert total["pods"] == 3 * 10**9
    per = {name: dict(zip(u.names, v, strict=True)) for name, v in u.clusters}
    assert per["m2"]["cpu"] == 1_000_000_000
    assert per["m1"]["count/deployments.apps"] == 10**9


def test_interner_shares_equal_values_and_is_bounded() -> None:
    i = Interner(limit=2)
    a = i(("cpu", "pods"))
    assert i(("cpu", "pods")) is a
    i(1)
    big = 10**12 + 7
    assert i(big) == big
    assert len(i) == 2


def test_two_identical_bindings_share_their_compact_parts() -> None:
    index = BindingIndex()
    _, _, a = entry(index, name="a")
    _, _, b = entry(index, name="b")
    assert a.usage.names is b.usage.names
    assert a.usage.total is b.usage.total


# ---------------------------------------------------------------------------------------------
# what the index keeps (version order is the informer's: tests/kube/test_kube_informer.py)


def test_the_same_entry_again_is_not_a_change() -> None:
    index = BindingIndex()
    ns, uid, e = entry(index, rv=5)
    assert index.upsert(ns, uid, e)
    assert not index.upsert(ns, uid, entry(index, rv=5)[2])
    assert index.upsert(ns, uid, entry(index, rv=6, replicas=7)[2])
    assert len(index) == 1


def test_a_deletion_is_remembered_until_a_later_relist() -> None:
    index = BindingIndex()
    ns, uid, e = entry(index, rv=5)
    index.upsert(ns, uid, e)
    assert index.remove(ns, uid, 9)
    assert not index.remove(ns, uid, 9)  # not indexed any more
    assert index.deleted(uid) and len(index) == 0 and index.bindings(ns) == {}
    index.remove("team-a", "uid-later", 15)
    index.forget_deletions_before(10)  # a list taken at 10 reflects the first deletion
    assert not index.deleted(uid)
    assert index.deleted("uid-later")


def test_a_deleting_binding_keeps_its_charge_until_it_is_gone() -> None:
    index = BindingIndex()
    ns, uid, e = entry(index, rv=5)
    index.upsert(ns, uid, e)
    seen = observe(raw_binding(rv=6, deleting=True), index.intern)
    assert seen.entry is not None  # its workloads run until Karmada has removed them
    index.apply(seen)
    kept = index.get(ns, uid)
    assert kept is not None and kept.usage == e.usage
    assert not index.deleted(uid)
    index.remove(ns, uid, 7)
    assert index.get(ns, uid) is None and index.deleted(uid)


def test_malformed_binding_is_indexed_as_zero_and_says_why() -> None:
    raw = raw_binding(requests={"cpu": "lots"})
    seen = safe_observe(raw, Interner())
    assert seen is not None and seen.entry is not None
    assert seen.entry.usage.names == ()  # charged as zero, so a reservation for it is released
    assert seen.entry.invalid == (
        'invalid ResourceBinding: invalid quantity "lots" for '
        "spec.replicaRequirements.resourceRequest[cpu]: missing number",
    )


def test_namespaces_are_separate() -> None:
    index = BindingIndex()
    for ns in ("a", "b"):
        n, uid, e = entry(index, namespace=ns, uid=f"u-{ns}")
        index.upsert(n, uid, e)
    assert index.namespaces() == ["a", "b"]
    assert list(index.bindings("a")) == ["u-a"]
    assert index.bindings("zzz") == {}


# ---------------------------------------------------------------------------------------------
# aggregation


def test_aggregate_masks_to_hard_names_and_zero_fills() -> None:
    index = BindingIndex()
    for name, replicas in (("a", 2), ("b", 3)):
        ns, uid, e = entry(
            index, name=name, replicas=replicas, clusters={"m1": replicas - 1, "m2": 1}
        )
        index.upsert(ns, uid, e)
    totals = aggregate(
        index.bindings("team-a").values(), {"requests.cpu", "pods", "requests.nvidia.com/gpu"}, ()
    )
    assert as_text(totals.used) == {
        "pods": "5",
        "requests.cpu": "5",
        "requests.nvidia.com/gpu": "0",
    }
    assert as_text(totals.per_cluster["m1"]) == {
        "pods": "3",
        "requests.cpu": "3",
        "requests.nvidia.com/gpu": "0",
    }
    assert as_text(totals.per_cluster["m2"])["pods"] == "2"


def test_aggregate_filters_by_scope() -> None:
    index = BindingIndex()
    for name, pc in (("hi", "high"), ("lo", "low"), ("none", "")):
        ns, uid, e = entry(index, name=name, priority_class=pc, replicas=1)
        index.upsert(ns, uid, e)
    entries = list(index.bindings("team-a").values())
    high = aggregate(entries, {"pods"}, (Expression("PriorityClass", "In", frozenset({"high"})),))
    assert as_text(high.used) == {"pods": "1"}
    not_high = aggregate(
        entries, {"pods"}, (Expression("PriorityClass", "NotIn", frozenset({"high"})),)
    )
    assert as_text(not_high.used) == {"pods": "2"}


def test_aggregate_of_nothing_is_all_zero() -> None:
    totals = aggregate([], {"pods", "requests.cpu"}, ())
    assert totals.used == {"pods": 0, "requests.cpu": 0}
    assert totals.per_cluster == {}


def test_aggregate_skips_bindings_without_tracked_names() -> None:
    index = BindingIndex()
    ns, uid, e = entry(index, replicas=1)
    index.upsert(ns, uid, e)
    totals = aggregate(index.bindings(ns).values(), {"count/secrets"}, ())
    assert totals.used == {"count/secrets": 0}


_QTY = st.sampled_from(["100m", "250m", "1", "2", "1500m", "64Mi", "1Gi", "3"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.fixed_dictionaries(
                {}, optional={"cpu": _QTY, "memory": _QTY, "nvidia.com/gpu": _QTY}
            ),
            st.dictionaries(st.sampled_from(["m1", "m2", "m3"]), st.integers(0, 4), max_size=3),
            st.sampled_from(["", "high", "low"]),
        ),
        max_size=12,
    )
)
def test_aggregate_equals_the_sum_of_charges(bindings: list[Any]) -> None:
    """The compact path adds up to exactly what summing `charge()` results gives."""
    index = BindingIndex()
    expected: dict[str, Any] = {}
    expected_m1: dict[str, Any] = {}
    names = {"requests.cpu", "cpu", "memory", "pods", "requests.nvidia.com/gpu"}
    for i, (replicas, reqs, clusters, pc) in enumerate(bindings):
        raw = raw_binding(
            f"b{i}",
            replicas=replicas,
            requests=reqs,
            clusters=clusters or None,
            priority_class=pc,
        )
        seen = observe(raw, index.intern)
        assert seen.entry is not None
        index.apply(seen)
        b = binding(replicas, reqs, clusters=clusters or None, priority_class=pc)
        c = charge(b)
        expected = resources.add(expected, resources.mask(c.total, names))
        expected_m1 = resources.add(expected_m1, resources.mask(c.per_cluster.get("m1", {}), names))
    totals = aggregate(index.bindings("team-a").values(), names, ())
    for n in names:
        want = expected.get(n)
        assert totals.used[n] == (want.nanos if want is not None else 0), n
        got_m1 = totals.per_cluster.get("m1", {}).get(n, 0)
        want_m1 = expected_m1.get(n)
        assert got_m1 == (want_m1.nanos if want_m1 is not None else 0), n


def test_traits_are_kept() -> None:
    index = BindingIndex()
    _, _, e = entry(index, requests={}, replicas=2)
    assert e.usage.traits == BindingTraits(True, True, "")


def test_sums_of_parts_are_the_aggregate_of_the_whole_and_versions_move_with_changes() -> None:
    """A cluster quota sums its namespaces' cached sums (`index.add`): equal to one aggregate
    over all their bindings, per cluster too; a namespace's version moves on every change of
    its bindings (a cached sum is taken again) and not on a delivery of the same version."""
    index = BindingIndex()
    for ns, name, clusters in (
        ("a", "x", {"m1": 1, "m2": 2}),
        ("a", "y", {"m2": 1}),
        ("b", "z", {"m3": 3}),
        ("c", "w", None),
    ):
        ns_, uid, e = entry(index, name=name, namespace=ns, uid=f"{ns}-{name}", clusters=clusters)
        assert index.upsert(ns_, uid, e)
    names = ("requests.cpu", "pods")
    whole = aggregate([b for ns in "abc" for b in index.bindings(ns).values()], names, ())
    parts = add([aggregate(index.bindings(ns).values(), names, ()) for ns in "abc"], names)
    assert parts == whole and set(parts.per_cluster) == {"m1", "m2", "m3"}
    before = index.version("a")
    ns_, uid, e = entry(index, name="x", namespace="a", uid="a-x", clusters={"m1": 1, "m2": 2})
    assert not index.upsert(ns_, uid, e) and index.version("a") == before  # the same again
    ns_, uid, e = entry(index, name="x", namespace="a", uid="a-x", rv=2, replicas=5)
    assert index.upsert(ns_, uid, e) and index.version("a") == before + 1
    assert index.remove("a", "a-y", 3) and index.version("a") == before + 2
    assert not index.remove("a", "a-y", 4) and index.version("a") == before + 2
    assert index.version("b") == 1 and index.version("nowhere") == 0
