"""trust.changed_fields: an allow-list of what an untrusted writer's UPDATE may differ in."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from karmadaquota import trust
from tests.webhook_fakes import binding_doc

KEYS = st.text("abcdefghijklmnopqrstuvwxyz./-", min_size=1, max_size=12)
VALUES = st.one_of(st.text(min_size=1, max_size=5), st.integers(1, 9), st.booleans().filter(bool))


def stored() -> dict[str, Any]:
    doc = binding_doc("web", clusters=[("member1", 1)])
    doc["metadata"].update(
        resourceVersion="7",
        generation=3,
        managedFields=[{"manager": "karmada-controller-manager"}],
        labels={"resourcebinding.karmada.io/permanent-id": "p-1"},
        finalizers=["karmada.io/binding-controller"],
    )
    doc["status"] = {"schedulerObservedGeneration": 3}
    return doc


@given(section=st.sampled_from(["", "metadata", "spec"]), key=KEYS, value=VALUES)
def test_any_change_outside_the_status_and_server_written_metadata_is_named(
    section: str, key: str, value: Any
) -> None:
    old = stored()
    new = copy.deepcopy(old)
    target = new[section] if section else new
    if target is new and key in (trust.STATUS, "metadata", "spec"):
        return
    if section == "metadata" and key in trust.SERVER_WRITTEN:
        return
    if target.get(key) == value:
        return
    target[key] = value
    named = trust.changed_fields(old, new)
    assert named == [f"{section}.{key}" if section else key]


def test_what_the_api_server_writes_and_the_status_are_not_changes() -> None:
    old = stored()
    new = copy.deepcopy(old)
    new["metadata"].update(resourceVersion="", generation=4, managedFields=[])
    new["status"] = {"aggregatedStatus": [{"clusterName": "member1", "applied": True}]}
    assert trust.changed_fields(old, new) == []
    assert trust.changed_fields(old, copy.deepcopy(old)) == []


def test_labels_and_annotations_are_named_by_key_in_both_directions() -> None:
    old = stored()
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    new["metadata"]["annotations"] = {"quota.karmada.io/queued-by": "q"}
    assert trust.changed_fields(old, new) == [
        "metadata.annotations[quota.karmada.io/queued-by]",
        "metadata.labels[resourcebinding.karmada.io/permanent-id]",
        "metadata.labels[team]",
    ]


def test_an_empty_value_is_an_absent_one() -> None:
    """As the API server stores them (omitempty): `labels: {}` and no labels are the same."""
    old = binding_doc("web")
    new = copy.deepcopy(old)
    new["metadata"].update(labels={}, finalizers=[])
    new["spec"]["gracefulEvictionTasks"] = []
    assert trust.changed_fields(old, new) == []


def test_listed_names_at_most_ten() -> None:
    assert trust.listed(["a", "b"]) == "a, b"
    assert trust.listed([str(i) for i in range(12)]) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"
