"""charge(): what one ResourceBinding costs — every row of docs/charging.md."""

from __future__ import annotations

import pytest

from karmadaquota.api import ResourceBinding
from karmadaquota.charge import charge
from karmadaquota.pod_template import PodCharge
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.resources import count_name
from tests.conftest import as_strings, binding, charge_of, component

CPU_MEM = {"cpu": "500m", "memory": "1Gi"}


# ---------------------------------------------------------------------------------------------
# requests.<r>, bare cpu/memory/ephemeral-storage, extended resources, pods


def test_requests_and_bare_names_are_replicas_times_request() -> None:
    c = charge_of(3, {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"})
    assert as_strings(c.total) == {
        "count/deployments.apps": "1",
        "pods": "3",
        "count/pods": "3",
        "cpu": "1500m",
        "requests.cpu": "1500m",
        "memory": "3Gi",
        "requests.memory": "3Gi",
        "ephemeral-storage": "6Gi",
        "requests.ephemeral-storage": "6Gi",
    }


def test_extended_resource_is_charged_only_under_requests_prefix() -> None:
    c = charge_of(4, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})
    assert str(c.total["requests.nvidia.com/gpu"]) == "8"
    assert "nvidia.com/gpu" not in c.total
    assert not any(name.startswith("limits.") for name in c.total)


def test_resource_names_that_are_not_chargeable_are_dropped() -> None:
    c = charge_of(2, {"cpu": "1", "memory": "1Gi", "example": "5"})
    assert "example" not in c.total
    assert "requests.example" not in c.total


def test_integer_quantities_on_the_wire_are_accepted() -> None:
    c = charge_of(3, {"cpu": 2, "memory": "1Gi"})
    assert str(c.total["requests.cpu"]) == "6"


def test_pods_is_the_replica_count_not_a_request() -> None:
    c = charge_of(7, {"cpu": "1", "memory": "1Gi", "pods": "5"})
    assert str(c.total["pods"]) == "7"
    assert "requests.pods" not in c.total


# count/pods: Kubernetes' pod evaluator counts it as it counts pods (one per pod). Issue 34: a
# quota of count/pods=2 was charged nothing, and 5 pods ran.


def test_count_pods_is_charged_as_pods_in_total_and_in_every_member() -> None:
    # 2 replicas duplicated into two members: 4 pods run, 2 in each
    c = charge_of(2, CPU_MEM, clusters={"member1": 2, "member2": 2})
    assert str(c.total["count/pods"]) == "4"
    assert {m: str(u["count/pods"]) for m, u in c.per_cluster.items()} == {
        "member1": "2",
        "member2": "2",
    }


def test_count_pods_counts_a_rollout_s_surge_pods_as_pods() -> None:
    # 4 replicas in one member, maxSurge 25 %: 1 more pod during a rollout, 5 in all
    pod = PodCharge({"cpu": Quantity.parse("100m")}, {}, frozenset(), frozenset({"25%"}))
    c = charge(binding(4, CPU_MEM, clusters={"member1": 4}), pod)
    assert str(c.total["count/pods"]) == "5"
    assert str(c.per_cluster["member1"]["count/pods"]) == "5"


def test_a_propagated_pod_is_one_count_pods_per_member_not_one_more() -> None:
    # a Pod propagated into two members runs two pods; its object is no third
    c = charge_of(1, CPU_MEM, kind="Pod", api_version="v1", clusters={"m1": 1, "m2": 1})
    assert str(c.total["count/pods"]) == "2"
    assert {m: str(u["count/pods"]) for m, u in c.per_cluster.items()} == {"m1": "1", "m2": "1"}


def test_no_replicas_no_count_pods() -> None:
    assert "count/pods" not in charge_of(0, CPU_MEM).total
    assert "count/pods" not in charge_of(kind="Service", api_version="v1").total


def test_zero_replicas_charge_no_pods_and_no_requests() -> None:
    c = charge_of(0, CPU_MEM)
    assert as_strings(c.total) == {"count/deployments.apps": "1"}
    assert c.per_cluster == {}
    assert not c.traits.has_replicas


# ---------------------------------------------------------------------------------------------
# count/<resource>.<group> and legacy object counts


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("apps/v1", "Deployment", "count/deployments.apps"),
        ("apps/v1", "StatefulSet", "count/statefulsets.apps"),
        ("apps/v1", "DaemonSet", "count/daemonsets.apps"),
        ("batch/v1", "Job", "count/jobs.batch"),
        ("batch/v1", "CronJob", "count/cronjobs.batch"),
        ("v1", "Service", "count/services"),
        ("v1", "Secret", "count/secrets"),
        ("v1", "ConfigMap", "count/configmaps"),
        ("v1", "PersistentVolumeClaim", "count/persistentvolumeclaims"),
        # "...y" -> "...ies", "...s" -> "...ses" (Kubernetes' UnsafeGuessKindToResource)
        ("networking.k8s.io/v1", "NetworkPolicy", "count/networkpolicies.networking.k8s.io"),
        ("networking.k8s.io/v1", "Ingress", "count/ingresses.networking.k8s.io"),
        ("example.io/v1beta1", "Status", "count/statuses.example.io"),
        ("flink.apache.org/v1beta1", "FlinkDeployment", "count/flinkdeployments.flink.apache.org"),
    ],
)
def test_count_name_guesses_plural_and_group(api_version: str, kind: str, expected: str) -> None:
    assert count_name(api_version, kind) == expected
    c = charge_of(kind=kind, api_version=api_version)
    assert str(c.total[expected]) == "1"


@pytest.mark.parametrize(
    ("kind", "legacy"),
    [
        ("Service", "services"),
        ("Secret", "secrets"),
        ("ConfigMap", "configmaps"),
        ("PersistentVolumeClaim", "persistentvolumeclaims"),
    ],
)
def test_core_kinds_also_count_under_their_legacy_name(kind: str, legacy: str) -> None:
    c = charge_of(kind=kind, api_version="v1")
    assert as_strings(c.total) == {legacy: "1", f"count/{legacy}": "1"}


def test_legacy_name_only_for_the_core_group() -> None:
    c = charge_of(kind="Service", api_version="serving.knative.dev/v1")
    assert as_strings(c.total) == {"count/services.serving.knative.dev": "1"}


def test_workloads_have_no_legacy_object_count() -> None:
    c = charge_of(2, CPU_MEM)
    assert not {"services", "secrets", "configmaps", "persistentvolumeclaims"} & set(c.total)


def test_object_count_is_one_per_binding_whatever_the_replicas_and_placement() -> None:
    c = charge_of(3, CPU_MEM, clusters={"member1": 3, "member2": 3, "member3": 3})
    assert str(c.total["count/deployments.apps"]) == "1"
    assert str(c.total["pods"]) == "9"


def test_bindings_without_replicas_still_count_toward_count_names() -> None:
    c = charge_of(kind="Secret", api_version="v1", clusters={"member1": 0, "member2": 0})
    assert as_strings(c.total) == {"secrets": "1", "count/secrets": "1"}
    assert not c.traits.has_replicas
    assert not c.traits.best_effort
    assert c.missing_requests == frozenset()
    assert all("pods" not in usage for usage in c.per_cluster.values())


# ---------------------------------------------------------------------------------------------
# R = max(spec.replicas, Σ spec.clusters[].replicas)


@pytest.mark.parametrize(
    ("replicas", "clusters", "expected_r"),
    [
        pytest.param(4, None, 4, id="before-scheduling"),
        pytest.param(5, {"member1": 2, "member2": 3}, 5, id="divided"),
        pytest.param(3, {"member1": 3, "member2": 3}, 6, id="duplicated"),
        pytest.param(3, {"member1": 3, "member2": 3, "member3": 3}, 9, id="duplicated-3"),
        pytest.param(2, {"member1": 3, "member2": 2}, 5, id="scale-down-mid-flight"),
        pytest.param(6, {"member1": 2, "member2": 2}, 6, id="scale-up-mid-flight"),
        pytest.param(0, {"member1": 2}, 2, id="placed-without-spec-replicas"),
    ],
)
def test_replicas_charged_are_max_of_intent_and_placement(
    replicas: int, clusters: dict[str, int] | None, expected_r: int
) -> None:
    c = charge_of(replicas, {"cpu": "250m", "memory": "100Mi"}, clusters=clusters)
    assert str(c.total["pods"]) == str(expected_r)
    assert c.total["requests.cpu"].nanos == expected_r * 250 * 10**6
    assert c.total["requests.memory"].nanos == expected_r * 100 * 2**20 * 10**9


def test_per_cluster_breakdown_follows_placement() -> None:
    c = charge_of(5, {"cpu": "1", "memory": "1Gi"}, clusters={"member1": 2, "member2": 3})
    assert set(c.per_cluster) == {"member1", "member2"}
    assert as_strings(c.per_cluster["member1"]) == {
        "count/deployments.apps": "1",
        "pods": "2",
        "count/pods": "2",
        "cpu": "2",
        "requests.cpu": "2",
        "memory": "2Gi",
        "requests.memory": "2Gi",
    }
    assert str(c.per_cluster["member2"]["requests.cpu"]) == "3"
    assert str(c.per_cluster["member2"]["pods"]) == "3"


def test_per_cluster_breakdown_duplicated() -> None:
    c = charge_of(3, {"cpu": "1", "memory": "1Gi"}, clusters={"member1": 3, "member2": 3})
    for usage in c.per_cluster.values():
        assert str(usage["requests.cpu"]) == "3"
        assert str(usage["pods"]) == "3"
    assert str(c.total["requests.cpu"]) == "6"


def test_cluster_with_zero_replicas_holds_no_pods() -> None:
    c = charge_of(2, CPU_MEM, clusters={"member1": 2, "member2": 0})
    assert "pods" not in c.per_cluster["member2"]
    assert "requests.cpu" not in c.per_cluster["member2"]


def test_clusters_under_graceful_eviction_are_charged_until_the_task_ends() -> None:
    # The evicted cluster's Work keeps running until the task is removed (issue 29: a task
    # added by hand moved the binding and kept 2 + 2 pods running, charged 2).
    clusters = {"member1": 2, "member2": 3}
    plain = charge_of(5, CPU_MEM, clusters=clusters)
    evicting = charge_of(5, CPU_MEM, clusters=clusters, evictions={"member3": 4, "member4": None})
    assert str(evicting.total["pods"]) == "14"  # 2 + 3 + 4 + spec.replicas for member4
    assert str(evicting.per_cluster["member3"]["pods"]) == "4"
    assert str(evicting.per_cluster["member4"]["pods"]) == "5"
    assert evicting.per_cluster["member1"] == plain.per_cluster["member1"]


def test_an_eviction_task_of_a_scheduled_cluster_is_not_charged_twice() -> None:
    c = charge_of(2, CPU_MEM, clusters={"member1": 2}, evictions={"member1": 2})
    assert str(c.total["pods"]) == "2"


def test_required_by_clusters_are_charged_with_their_replicas() -> None:
    # issue 29: spec.requiredBy with a second cluster and 5 replicas ran 5 pods there.
    c = charge_of(1, CPU_MEM, clusters={"member1": 1}, required_by={"member2": 5, "member1": 9})
    assert str(c.per_cluster["member2"]["pods"]) == "5"
    assert str(c.per_cluster["member1"]["pods"]) == "1"  # scheduled there: rendered as such
    assert str(c.total["pods"]) == "6"


def test_required_by_negative_replicas_are_invalid() -> None:
    c = charge_of(1, CPU_MEM, clusters={"member1": 1}, required_by={"member2": -3})
    assert c.invalid == (
        "spec.requiredBy[0].clusters[0].replicas: Invalid value: -3: must be greater than or "
        "equal to 0",
    )


def test_multi_component_is_charged_once_per_rendered_cluster() -> None:
    comps = [component("a", 1, {"cpu": "1"}), component("b", 2, {"cpu": "1"})]
    c = charge_of(clusters={"member1": 0}, components=comps, evictions={"member2": None})
    assert str(c.total["requests.cpu"]) == "6"


@pytest.mark.parametrize(
    ("api_version", "kind"), [("apps/v1", "DaemonSet"), ("batch/v1", "CronJob")]
)
def test_workloads_karmada_cannot_count_are_named(api_version: str, kind: str) -> None:
    c = charge_of(0, None, api_version=api_version, kind=kind)
    group = api_version.split("/")[0]
    assert c.uncounted == (f"spec.resource: {kind}.{group}: Karmada cannot count its replicas",)


def test_preserved_resources_are_named_and_a_deployment_is_counted() -> None:
    assert charge_of(2, CPU_MEM).uncounted == ()
    assert charge_of(2, CPU_MEM, preserve=False).uncounted == ()
    (reason,) = charge_of(2, CPU_MEM, preserve=True).uncounted
    assert reason.startswith("spec.preserveResourcesOnDeletion: true")


# ---------------------------------------------------------------------------------------------
# components


def test_single_component_is_charged_like_the_legacy_fields() -> None:
    legacy = charge_of(3, CPU_MEM, clusters={"member1": 1, "member2": 2}, priority_class="high")
    comp = charge_of(
        components=[component("main", 3, CPU_MEM, priority_class="high")],
        clusters={"member1": 1, "member2": 2},
    )
    assert comp.total == legacy.total
    assert comp.per_cluster == legacy.per_cluster
    assert comp.traits == legacy.traits
    assert comp.missing_requests == legacy.missing_requests


def test_single_component_replicas_are_max_of_intent_and_placement() -> None:
    c = charge_of(components=[component("main", 2, CPU_MEM)], clusters={"m1": 3, "m2": 3})
    assert str(c.total["pods"]) == "6"


def flink_components() -> list[dict[str, object]]:
    return [
        component("jobmanager", 1, {"cpu": "1", "memory": "1Gi"}),
        component("taskmanager", 4, {"cpu": "2", "memory": "2Gi"}),
    ]


def test_multi_component_before_scheduling_charges_one_copy() -> None:
    c = charge_of(components=flink_components(), kind="FlinkDeployment", api_version="f.io/v1")
    assert as_strings(c.total) == {
        "count/flinkdeployments.f.io": "1",
        "pods": "5",
        "count/pods": "5",
        "cpu": "9",
        "requests.cpu": "9",
        "memory": "9Gi",
        "requests.memory": "9Gi",
    }
    assert c.per_cluster == {}


def test_multi_component_charges_a_full_copy_per_target_cluster() -> None:
    c = charge_of(components=flink_components(), clusters={"member1": 0, "member2": 0})
    assert str(c.total["requests.cpu"]) == "18"
    assert str(c.total["requests.memory"]) == "18Gi"
    assert str(c.total["pods"]) == "10"
    assert str(c.total["count/deployments.apps"]) == "1"
    for usage in c.per_cluster.values():
        assert str(usage["requests.cpu"]) == "9"
        assert str(usage["pods"]) == "5"


def test_multi_component_traits_and_missing_requests() -> None:
    c = charge_of(
        components=[
            component("a", 1, {"cpu": "1"}, priority_class="high"),
            component("b", 2, {"cpu": "1", "memory": "1Gi"}),
            component("idle", 0),  # no replicas: its missing requests do not matter
        ]
    )
    assert c.missing_requests == frozenset({"memory"})
    assert c.traits.has_replicas
    assert not c.traits.best_effort
    assert c.traits.priority_class == "high"


def test_multi_component_without_any_request_is_best_effort() -> None:
    c = charge_of(components=[component("a", 1), component("b", 2)])
    assert c.traits.best_effort
    assert c.missing_requests == frozenset({"cpu", "memory"})
    assert str(c.total["pods"]) == "3"


def test_multi_component_without_replicas_has_none() -> None:
    c = charge_of(components=[component("a", 0), component("b", 0)])
    assert not c.traits.has_replicas
    assert not c.traits.best_effort
    assert c.missing_requests == frozenset()
    assert "pods" not in c.total


# ---------------------------------------------------------------------------------------------
# traits and missing requests


def test_traits_of_a_burstable_binding() -> None:
    c = charge_of(2, CPU_MEM, priority_class="high")
    assert c.traits.has_replicas
    assert not c.traits.best_effort
    assert c.traits.priority_class == "high"
    assert c.missing_requests == frozenset()


def test_replicas_without_requests_are_best_effort() -> None:
    assert charge_of(2).traits.best_effort
    assert charge_of(2, {}).traits.best_effort
    assert not charge_of(2, {"nvidia.com/gpu": "1"}).traits.best_effort


def test_missing_requests_name_what_is_not_requested() -> None:
    assert charge_of(2).missing_requests == frozenset({"cpu", "memory"})
    assert charge_of(2, {"memory": "1Gi"}).missing_requests == frozenset({"cpu"})
    assert charge_of(2, {"cpu": "1"}).missing_requests == frozenset({"memory"})


def test_no_missing_requests_without_replicas() -> None:
    assert charge_of(0).missing_requests == frozenset()


def test_prefixed_request_keys_count_as_specified() -> None:
    c = charge_of(2, {"requests.cpu": "1", "requests.memory": "1Gi"})
    assert str(c.total["requests.cpu"]) == "2"
    assert c.missing_requests == frozenset()


def test_binding_without_priority_class() -> None:
    assert charge_of(2, CPU_MEM).traits.priority_class == ""


# ---------------------------------------------------------------------------------------------
# errors and the wire model


def test_bad_quantity_raises_naming_the_field() -> None:
    with pytest.raises(QuantityError) as info:
        charge_of(2, {"cpu": "1 core"})
    assert info.value.field == "spec.replicaRequirements.resourceRequest[cpu]"
    assert "spec.replicaRequirements.resourceRequest[cpu]" in str(info.value)
    assert '"1 core"' in str(info.value)


def test_bad_quantity_in_a_component_names_the_component() -> None:
    with pytest.raises(QuantityError) as info:
        charge_of(
            components=[component("a", 1, CPU_MEM), component("b", 1, {"memory": "12Q"})],
        )
    assert info.value.field == "spec.components[1].replicaRequirements.resourceRequest[memory]"


def test_unknown_binding_fields_are_ignored() -> None:
    raw = binding(2, CPU_MEM).model_dump()
    raw["spec"]["placement"] = {"replicaScheduling": {"replicaSchedulingType": "Divided"}}
    raw["spec"]["resource"]["resourceVersion"] = "123"
    raw["status"] = {"schedulerObservedGeneration": 1}
    reparsed = ResourceBinding.model_validate(raw)
    assert charge(reparsed).total == charge_of(2, CPU_MEM).total


def test_charge_is_deterministic_and_does_not_mutate_the_binding() -> None:
    b = binding(3, CPU_MEM, clusters={"member1": 1, "member2": 2})
    before = b.model_dump()
    first, second = charge(b), charge(b)
    assert first == second
    assert b.model_dump() == before


# ---------------------------------------------------------------------------------------------
# negative and absurd values: charged as zero, named in Kubernetes' wording


def test_negative_request_is_charged_as_zero_and_named() -> None:
    c = charge_of(3, {"cpu": "-4", "memory": "1Gi"})
    assert str(c.total["requests.cpu"]) == "0"
    assert str(c.total["requests.memory"]) == "3Gi"
    assert c.invalid == (
        'spec.replicaRequirements.resourceRequest[cpu]: Invalid value: "-4": '
        "must be greater than or equal to 0",
    )


def test_negative_replicas_anywhere_are_charged_as_zero_and_named() -> None:
    c = charge_of(-2, {"cpu": "1", "memory": "1Gi"}, clusters={"m1": -1, "m2": 2})
    assert str(c.total["pods"]) == "2"  # max(0, 0 + 2)
    assert as_strings(c.per_cluster["m1"]) == {"count/deployments.apps": "1"}
    assert c.invalid == (
        "spec.replicas: Invalid value: -2: must be greater than or equal to 0",
        "spec.clusters[0].replicas: Invalid value: -1: must be greater than or equal to 0",
    )


def test_negative_values_in_components_are_charged_as_zero_and_named() -> None:
    c = charge_of(
        0,
        components=[
            component("a", -3, {"cpu": "1", "memory": "1Gi"}),
            component("b", 2, {"cpu": "-500m", "memory": "1Gi"}),
        ],
        clusters={"m1": 1},
    )
    assert str(c.total["requests.cpu"]) == "0"
    assert str(c.total["requests.memory"]) == "2Gi"
    assert str(c.total["pods"]) == "2"
    assert c.invalid == (
        "spec.components[0].replicas: Invalid value: -3: must be greater than or equal to 0",
        'spec.components[1].replicaRequirements.resourceRequest[cpu]: Invalid value: "-500m": '
        "must be greater than or equal to 0",
    )


def test_a_valid_binding_has_no_invalid_fields() -> None:
    assert charge_of(2, CPU_MEM, clusters={"m1": 2}).invalid == ()


def test_huge_values_are_exact() -> None:
    c = charge_of(2**31 - 1, {"cpu": "1E", "memory": "1Gi"})
    assert c.total["requests.cpu"].nanos == (2**31 - 1) * 10**18 * 10**9
    assert str(c.total["requests.cpu"]) == f"{2**31 - 1}E"
    assert c.invalid == ()
