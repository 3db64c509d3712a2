"""validate_spec / validate_resource_name: the complete KarmadaQuota check."""

from __future__ import annotations

import pytest

from karmadaquota.api import ClusterKarmadaQuotaSpec, KarmadaQuotaSpec
from karmadaquota.validation import validate_resource_name, validate_spec
from tests.conftest import ExprSpec, quota


def spec(
    hard: dict[str, str | int] | None = None,
    scopes: list[str] | None = None,
    exprs: list[ExprSpec] | None = None,
) -> KarmadaQuotaSpec:
    return quota(hard=hard or {}, scopes=scopes or (), expressions=exprs or ()).spec


def invalid(name: str, reason: str) -> str:
    return f'spec.hard[{name}]: Invalid value: "{name}": {reason}'


# ---------------------------------------------------------------------------------------------
# resource names


@pytest.mark.parametrize(
    "name",
    [
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "requests.hugepages-2Mi",
        "requests.nvidia.com/gpu",
        "requests.example.com/fpga-v2",
        "services",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "count/deployments.apps",
        "count/statefulsets.apps",
        "count/jobs.batch",
        "count/services",
        "count/flinkdeployments.flink.apache.org",
    ],
)
def test_valid_resource_names(name: str) -> None:
    assert validate_resource_name(name) is None


@pytest.mark.parametrize("name", ["limits.cpu", "limits.memory", "limits.ephemeral-storage"])
def test_limits_of_compute_are_accepted(name: str) -> None:
    assert validate_resource_name(name) is None


@pytest.mark.parametrize("name", ["limits.nvidia.com/gpu", "limits.pods", "limits.hugepages-2Mi"])
def test_other_limits_are_rejected_precisely(name: str) -> None:
    assert validate_resource_name(name) == invalid(
        name,
        "must be a standard resource for quota "
        "(limits.cpu, limits.memory, limits.ephemeral-storage)",
    )


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "example.com/fpga"])
def test_bare_extended_name_is_rejected(name: str) -> None:
    assert validate_resource_name(name) == invalid(
        name, f'extended resources are tracked only as "requests.{name}"'
    )


@pytest.mark.parametrize(
    "name",
    [
        "gpus",
        "storage",
        "replicationcontrollers.apps",
        "CPU",
        # requests.<r> for an r that a binding can never be charged for
        "requests.foo",
        "requests.pods",
        "requests.kubernetes.io/something",
    ],
)
def test_unknown_names_are_rejected(name: str) -> None:
    assert validate_resource_name(name) == invalid(name, "must be a standard resource for quota")


@pytest.mark.parametrize(
    "name",
    [
        "requests.storage",
        "persistentvolumeclaims",
        "count/persistentvolumeclaims",
        "fast.storageclass.storage.k8s.io/requests.storage",
        "fast.storageclass.storage.k8s.io/persistentvolumeclaims",
    ],
)
def test_the_names_a_claim_is_charged_are_accepted(name: str) -> None:
    """Issue 42: a StatefulSet's claim templates are charged; their names can be limited."""
    assert validate_resource_name(name) is None


@pytest.mark.parametrize("name", ["requests.", "requests.nvidia.com/", "requests.-cpu"])
def test_malformed_request_names(name: str) -> None:
    assert validate_resource_name(name) == invalid(name, "must be requests.<resource name>")


@pytest.mark.parametrize("name", ["count/", "count/Deployments.apps", "count/jobs.", "count/a b"])
def test_malformed_count_names(name: str) -> None:
    assert validate_resource_name(name) == invalid(name, "must be count/<resource>.<group>")


# ---------------------------------------------------------------------------------------------
# quantities


def test_valid_spec_has_no_errors() -> None:
    assert validate_spec(spec()) == []
    assert (
        validate_spec(
            spec(
                {
                    "requests.cpu": "100",
                    "requests.memory": "200Gi",
                    "pods": 500,
                    "count/deployments.apps": "50",
                    "requests.nvidia.com/gpu": "8",
                    "services": "0",
                }
            )
        )
        == []
    )


def test_bad_quantity_names_the_field() -> None:
    errors = validate_spec(spec({"requests.cpu": "ten"}))
    assert len(errors) == 1
    assert errors[0].startswith('invalid quantity "ten" for spec.hard[requests.cpu]: ')


def test_every_bad_quantity_is_reported_at_once() -> None:
    errors = validate_spec(spec({"requests.cpu": "ten", "requests.memory": "2 Gi", "pods": "3"}))
    assert len(errors) == 2
    assert "spec.hard[requests.cpu]" in errors[0]
    assert "spec.hard[requests.memory]" in errors[1]


def test_negative_quantity_is_rejected() -> None:
    assert validate_spec(spec({"requests.cpu": "-1", "pods": "-500m", "memory": "0"})) == [
        'spec.hard[pods]: Invalid value: "-500m": must be greater than or equal to 0',
        'spec.hard[requests.cpu]: Invalid value: "-1": must be greater than or equal to 0',
    ]


def test_name_and_quantity_errors_are_both_reported() -> None:
    errors = validate_spec(spec({"limits.pods": "4", "requests.cpu": "x"}))
    assert errors[0] == invalid(
        "limits.pods",
        "must be a standard resource for quota "
        "(limits.cpu, limits.memory, limits.ephemeral-storage)",
    )
    assert errors[1].startswith('invalid quantity "x" for spec.hard[requests.cpu]')
    assert len(errors) == 2


# ---------------------------------------------------------------------------------------------
# scopes through validate_spec


@pytest.mark.parametrize("scope", ["PriorityClass", "Terminating", "bestEffort"])
def test_scopes_list_accepts_only_best_effort_scopes(scope: str) -> None:
    errors = validate_spec(spec({"pods": "1"}, scopes=[scope]))
    assert errors[0] == (
        f'spec.scopes[0]: Unsupported value: "{scope}": supported values: '
        '"BestEffort", "NotBestEffort"'
    )


def test_scope_errors_are_included() -> None:
    errors = validate_spec(spec({"pods": "1", "requests.cpu": "1"}, scopes=["BestEffort"]))
    assert errors == [
        invalid("requests.cpu", "unsupported scope applied to resource"),
    ]


def test_priority_class_quota_tracking_services_is_rejected() -> None:
    errors = validate_spec(spec({"services": "1"}, exprs=[("PriorityClass", "In", ["high"])]))
    assert errors == [invalid("services", "unsupported scope applied to resource")]


def test_priority_class_quota_tracking_extended_requests_is_valid() -> None:
    hard: dict[str, str | int] = {"requests.nvidia.com/gpu": "4", "requests.cpu": "8", "pods": 9}
    assert validate_spec(spec(hard, exprs=[("PriorityClass", "In", ["gpu"])])) == []


def test_invalid_selector_is_reported() -> None:
    errors = validate_spec(spec({"pods": "1"}, exprs=[("BestEffort", "In", ["x"])]))
    assert errors == [
        'spec.scopeSelector.matchExpressions[0].operator: Invalid value: "In": must be '
        "'Exists' when scope is any of BestEffort and NotBestEffort"
    ]


def test_conflicting_scopes_through_validate_spec() -> None:
    errors = validate_spec(spec({"pods": "1"}, scopes=["BestEffort", "NotBestEffort"]))
    assert len(errors) == 1
    assert errors[0].endswith("conflicting scopes: BestEffort and NotBestEffort")


def test_many_problems_are_all_reported() -> None:
    errors = validate_spec(
        spec(
            {"limits.pods": "1", "nvidia.com/gpu": "1", "requests.memory": "-1Gi", "services": "1"},
            scopes=["BestEffort"],
        )
    )
    assert len(errors) == 7
    assert any("limits.pods" in e and "standard resource" in e for e in errors)
    assert any("extended resources are tracked only" in e for e in errors)
    assert any("must be greater than or equal to 0" in e for e in errors)
    # every name but pods is outside a BestEffort quota's scope, invalid names included
    assert sum("unsupported scope applied to resource" in e for e in errors) == 4


# ---------------------------------------------------------------------------------------------
# memberEnforcement and clusterHard


def guarded(**raw: object) -> KarmadaQuotaSpec:
    return KarmadaQuotaSpec.model_validate(
        {"hard": {"pods": "10", "requests.cpu": "2"}, "memberEnforcement": "ResourceQuota"} | raw
    )


def test_member_enforcement_defaults_to_guards_and_none_opts_out() -> None:
    """Guards are on unless a quota opts out; a ClusterKarmadaQuota, which cannot have them,
    defaults to None (so that it validates without saying so)."""
    assert KarmadaQuotaSpec().memberEnforcement == "ResourceQuota"
    assert KarmadaQuotaSpec().guarded
    assert not KarmadaQuotaSpec(memberEnforcement="None").guarded
    cluster = ClusterKarmadaQuotaSpec.model_validate(
        {"hard": {"pods": "1"}, "namespaceSelector": {}}
    )
    assert not cluster.guarded
    assert validate_spec(cluster) == []
    assert validate_spec(guarded()) == []
    assert (
        validate_spec(guarded(clusterHard={"member1": {"pods": "10", "requests.cpu": "1"}})) == []
    )


def test_an_unknown_member_enforcement_is_refused_in_kubernetes_words() -> None:
    assert validate_spec(guarded(memberEnforcement="Strict")) == [
        'spec.memberEnforcement: Unsupported value: "Strict": supported values: "None", '
        '"ResourceQuota"'
    ]


def test_cluster_hard_needs_resource_quota() -> None:
    errors = validate_spec(guarded(memberEnforcement="None", clusterHard={"m1": {"pods": "1"}}))
    assert errors == [
        "spec.clusterHard: Forbidden: per-cluster caps need memberEnforcement ResourceQuota "
        "(only member guards can hold a member to them)"
    ]


def test_cluster_hard_is_within_hard_name_by_name() -> None:
    errors = validate_spec(
        guarded(
            clusterHard={
                "member1": {"pods": "11", "requests.memory": "1Gi", "requests.cpu": "-1"},
                "Member_2": {"pods": "x"},
            }
        )
    )
    assert errors == [
        'spec.clusterHard[Member_2]: Invalid value: "Member_2": must be a member cluster name '
        "(a DNS subdomain)",
        'invalid quantity "x" for spec.clusterHard[Member_2][pods]: missing number',
        'spec.clusterHard[member1][pods]: Invalid value: "11": must be less than or equal to '
        "spec.hard[pods] (10)",
        'spec.clusterHard[member1][requests.cpu]: Invalid value: "-1": must be greater than or '
        "equal to 0",
        'spec.clusterHard[member1][requests.memory]: Invalid value: "requests.memory": must be a '
        "resource named in spec.hard",
    ]
