"""Quota scopes (docs/scopes.md): matching a binding, and Kubernetes' scopeSelector validation."""

from __future__ import annotations

import pytest

from karmadaquota.api import KarmadaQuotaSpec, ScopedResourceSelectorRequirement
from karmadaquota.scopes import (
    BindingTraits,
    Expression,
    expressions,
    matches,
    resource_allowed,
    validate_expression,
    validate_scopes,
)
from tests.conftest import ExprSpec, charge_of, quota

CPU_MEM = {"cpu": "1", "memory": "1Gi"}
PATH = "spec.scopeSelector.matchExpressions[0]"


def traits(priority_class: str = "", best_effort: bool = False) -> BindingTraits:
    return BindingTraits(has_replicas=True, best_effort=best_effort, priority_class=priority_class)


def spec(
    hard: dict[str, str] | None = None,
    scopes: list[str] | None = None,
    exprs: list[ExprSpec] | None = None,
) -> KarmadaQuotaSpec:
    return quota(hard=hard or {}, scopes=scopes or (), expressions=exprs or ()).spec


def expr(scope: str, operator: str, *values: str) -> Expression:
    return Expression(scope, operator, frozenset(values))


# ---------------------------------------------------------------------------------------------
# matching: PriorityClass


@pytest.mark.parametrize(
    ("operator", "values", "high", "low", "none"),
    [
        ("In", ("high",), True, False, False),
        ("In", ("high", "low"), True, True, False),
        ("NotIn", ("high",), False, True, True),
        ("NotIn", ("high", "low"), False, False, True),
        ("Exists", (), True, True, False),
        ("DoesNotExist", (), False, False, True),
    ],
)
def test_priority_class_operators(
    operator: str, values: tuple[str, ...], high: bool, low: bool, none: bool
) -> None:
    e = (expr("PriorityClass", operator, *values),)
    assert matches(e, traits("high")) is high
    assert matches(e, traits("low")) is low
    assert matches(e, traits("")) is none


def test_priority_class_is_read_from_the_binding() -> None:
    e = (expr("PriorityClass", "In", "high"),)
    assert matches(e, charge_of(2, CPU_MEM, priority_class="high").traits)
    assert not matches(e, charge_of(2, CPU_MEM, priority_class="low").traits)
    assert not matches(e, charge_of(2, CPU_MEM).traits)


def test_not_in_and_does_not_exist_match_a_binding_with_no_class() -> None:
    no_class = charge_of(2, CPU_MEM).traits
    assert matches((expr("PriorityClass", "NotIn", "high"),), no_class)
    assert matches((expr("PriorityClass", "DoesNotExist"),), no_class)


# ---------------------------------------------------------------------------------------------
# matching: BestEffort / NotBestEffort


def test_best_effort_and_not_best_effort() -> None:
    best_effort = charge_of(3).traits
    burstable = charge_of(3, CPU_MEM).traits
    gpu_only = charge_of(3, {"nvidia.com/gpu": "1"}).traits
    be, nbe = (expr("BestEffort", "Exists"),), (expr("NotBestEffort", "Exists"),)
    assert matches(be, best_effort)
    assert not matches(nbe, best_effort)
    assert not matches(be, burstable)
    assert matches(nbe, burstable)
    assert not matches(be, gpu_only)
    assert matches(nbe, gpu_only)


# ---------------------------------------------------------------------------------------------
# matching: intersection, bindings without replicas


def test_expressions_intersect() -> None:
    exprs = (expr("PriorityClass", "In", "high"), expr("NotBestEffort", "Exists"))
    assert matches(exprs, charge_of(2, CPU_MEM, priority_class="high").traits)
    assert not matches(exprs, charge_of(2, priority_class="high").traits)  # best effort
    assert not matches(exprs, charge_of(2, CPU_MEM, priority_class="low").traits)


def test_two_priority_class_expressions_intersect() -> None:
    exprs = (expr("PriorityClass", "In", "high", "mid"), expr("PriorityClass", "NotIn", "mid"))
    assert matches(exprs, traits("high"))
    assert not matches(exprs, traits("mid"))
    assert not matches(exprs, traits("low"))


def test_unscoped_quota_matches_everything() -> None:
    assert matches((), charge_of(2, CPU_MEM).traits)
    assert matches((), charge_of(kind="Service", api_version="v1").traits)


@pytest.mark.parametrize(
    "exprs",
    [
        (expr("PriorityClass", "NotIn", "high"),),
        (expr("PriorityClass", "DoesNotExist"),),
        (expr("NotBestEffort", "Exists"),),
        (expr("BestEffort", "Exists"),),
    ],
    ids=["NotIn", "DoesNotExist", "NotBestEffort", "BestEffort"],
)
def test_bindings_without_replicas_never_match_a_scoped_quota(
    exprs: tuple[Expression, ...],
) -> None:
    service = charge_of(kind="Service", api_version="v1").traits
    scaled_to_zero = charge_of(0, CPU_MEM).traits
    assert not matches(exprs, service)
    assert not matches(exprs, scaled_to_zero)


# ---------------------------------------------------------------------------------------------
# expressions(): scopes shorthand + scopeSelector


def test_scopes_list_is_shorthand_for_exists() -> None:
    assert expressions(spec(scopes=["BestEffort"])) == (Expression("BestEffort", "Exists"),)


def test_scopes_and_selector_combine() -> None:
    got = expressions(
        spec(scopes=["NotBestEffort"], exprs=[("PriorityClass", "In", ["high", "mid"])])
    )
    assert got == (
        Expression("NotBestEffort", "Exists"),
        Expression("PriorityClass", "In", frozenset({"high", "mid"})),
    )


def test_no_scopes_no_expressions() -> None:
    assert expressions(spec(hard={"pods": "1"})) == ()


def test_scopes_shorthand_matches_like_the_selector() -> None:
    shorthand = expressions(spec(scopes=["NotBestEffort"]))
    assert matches(shorthand, charge_of(1, CPU_MEM).traits)
    assert not matches(shorthand, charge_of(1).traits)


# ---------------------------------------------------------------------------------------------
# resource_allowed


@pytest.mark.parametrize(
    ("scope", "resource", "allowed"),
    [
        ("BestEffort", "pods", True),
        ("BestEffort", "requests.cpu", False),
        ("BestEffort", "cpu", False),
        ("BestEffort", "requests.nvidia.com/gpu", False),
        ("BestEffort", "count/deployments.apps", False),
        ("NotBestEffort", "pods", True),
        ("NotBestEffort", "requests.cpu", True),
        ("NotBestEffort", "requests.memory", True),
        ("NotBestEffort", "cpu", True),
        ("NotBestEffort", "memory", True),
        ("NotBestEffort", "requests.nvidia.com/gpu", True),
        ("NotBestEffort", "services", False),
        ("PriorityClass", "pods", True),
        ("PriorityClass", "requests.cpu", True),
        ("PriorityClass", "memory", True),
        ("PriorityClass", "requests.nvidia.com/gpu", True),
        ("PriorityClass", "services", False),
        ("PriorityClass", "secrets", False),
        ("PriorityClass", "count/deployments.apps", False),
        ("PriorityClass", "requests.ephemeral-storage", False),
    ],
)
def test_resource_allowed_under_scope(scope: str, resource: str, allowed: bool) -> None:
    operator, values = ("In", ("high",)) if scope == "PriorityClass" else ("Exists", ())
    assert resource_allowed((expr(scope, operator, *values),), resource) is allowed


def test_unscoped_quota_may_track_anything() -> None:
    assert resource_allowed((), "count/deployments.apps")
    assert resource_allowed((), "services")


# ---------------------------------------------------------------------------------------------
# validate_expression: Kubernetes' wording


def requirement(
    scope: str, operator: str, values: list[str] | None = None
) -> ScopedResourceSelectorRequirement:
    return ScopedResourceSelectorRequirement(
        scopeName=scope, operator=operator, values=values or []
    )


@pytest.mark.parametrize(
    ("scope", "operator", "values"),
    [
        ("PriorityClass", "In", ["high"]),
        ("PriorityClass", "NotIn", ["high", "low"]),
        ("PriorityClass", "Exists", []),
        ("PriorityClass", "DoesNotExist", []),
        ("BestEffort", "Exists", []),
        ("NotBestEffort", "Exists", []),
    ],
)
def test_valid_expressions(scope: str, operator: str, values: list[str]) -> None:
    assert validate_expression(requirement(scope, operator, values), PATH) == []


def test_unknown_scope() -> None:
    assert validate_expression(requirement("Terminating", "Exists"), PATH) == [
        f'{PATH}.scopeName: Unsupported value: "Terminating": supported values: '
        '"BestEffort", "NotBestEffort", "PriorityClass"'
    ]


def test_unknown_operator() -> None:
    assert validate_expression(requirement("PriorityClass", "Equals", ["a"]), PATH) == [
        f'{PATH}.operator: Unsupported value: "Equals": supported values: '
        '"DoesNotExist", "Exists", "In", "NotIn"'
    ]


@pytest.mark.parametrize("scope", ["BestEffort", "NotBestEffort"])
@pytest.mark.parametrize("operator", ["In", "NotIn", "DoesNotExist"])
def test_best_effort_scopes_only_support_exists(scope: str, operator: str) -> None:
    values = ["x"] if operator in ("In", "NotIn") else []
    assert validate_expression(requirement(scope, operator, values), PATH) == [
        f"{PATH}.operator: Invalid value: \"{operator}\": must be 'Exists' when scope is any of "
        "BestEffort and NotBestEffort"
    ]


@pytest.mark.parametrize("operator", ["In", "NotIn"])
def test_in_and_not_in_need_values(operator: str) -> None:
    assert validate_expression(requirement("PriorityClass", operator), PATH) == [
        f"{PATH}.values: Required value: must be at least one value when `operator` is "
        "'In' or 'NotIn' for scope selector"
    ]


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_exists_and_does_not_exist_take_no_values(operator: str) -> None:
    errors = validate_expression(requirement("PriorityClass", operator, ["high"]), PATH)
    assert len(errors) == 1
    assert errors[0].startswith(f"{PATH}.values: Invalid value: ")
    assert "high" in errors[0]
    assert errors[0].endswith(
        "must be no value when `operator` is 'Exists' or 'DoesNotExist' for scope selector"
    )


def test_best_effort_with_in_and_no_values_reports_both() -> None:
    errors = validate_expression(requirement("BestEffort", "In"), PATH)
    assert len(errors) == 2
    assert errors[0].startswith(f'{PATH}.operator: Invalid value: "In"')
    assert errors[1].startswith(f"{PATH}.values: Required value")


# ---------------------------------------------------------------------------------------------
# validate_scopes


def test_valid_scoped_specs() -> None:
    assert validate_scopes(spec({"pods": "10"}, scopes=["BestEffort"])) == []
    assert validate_scopes(spec({"pods": "10"}, exprs=[("BestEffort", "Exists", [])])) == []
    assert (
        validate_scopes(
            spec(
                {"pods": "10", "requests.cpu": "4", "memory": "8Gi"},
                scopes=["NotBestEffort"],
                exprs=[("PriorityClass", "In", ["high"])],
            )
        )
        == []
    )


def test_extended_requests_allowed_under_priority_class() -> None:
    s = spec({"requests.nvidia.com/gpu": "8"}, exprs=[("PriorityClass", "In", ["gpu"])])
    assert validate_scopes(s) == []


CONFLICT = "conflicting scopes: BestEffort and NotBestEffort"


@pytest.mark.parametrize(
    ("scopes", "exprs"),
    [
        (["BestEffort", "NotBestEffort"], []),
        ([], [("BestEffort", "Exists", []), ("NotBestEffort", "Exists", [])]),
        (["BestEffort"], [("NotBestEffort", "Exists", [])]),
    ],
    ids=["scopes", "selector", "mixed"],
)
def test_best_effort_with_not_best_effort_conflicts(
    scopes: list[str], exprs: list[ExprSpec]
) -> None:
    errors = validate_scopes(spec({"pods": "1"}, scopes=scopes, exprs=exprs))
    assert len(errors) == 1
    assert errors[0].startswith("spec.scopeSelector: Invalid value: ")
    assert errors[0].endswith(CONFLICT)


def unsupported(name: str) -> str:
    return f'spec.hard[{name}]: Invalid value: "{name}": unsupported scope applied to resource'


def test_best_effort_quota_may_track_only_pods() -> None:
    errors = validate_scopes(
        spec({"pods": "5", "requests.cpu": "1", "cpu": "1"}, scopes=["BestEffort"])
    )
    assert errors == [unsupported("cpu"), unsupported("requests.cpu")]


@pytest.mark.parametrize(
    "name", ["services", "secrets", "count/deployments.apps", "count/services", "configmaps"]
)
def test_priority_class_quota_may_not_track_object_counts(name: str) -> None:
    s = spec({name: "5", "pods": "5"}, exprs=[("PriorityClass", "Exists", [])])
    assert validate_scopes(s) == [unsupported(name)]


def test_not_best_effort_quota_may_not_track_object_counts() -> None:
    s = spec({"services": "5"}, scopes=["NotBestEffort"])
    assert validate_scopes(s) == [unsupported("services")]


def test_unscoped_quota_has_no_scope_errors() -> None:
    assert validate_scopes(spec({"services": "5", "count/jobs.batch": "3", "cpu": "1"})) == []


def test_expression_errors_carry_their_index() -> None:
    s = spec(
        {"pods": "1"},
        exprs=[("PriorityClass", "In", ["high"]), ("PriorityClass", "In", [])],
    )
    errors = validate_scopes(s)
    assert len(errors) == 1
    assert errors[0].startswith("spec.scopeSelector.matchExpressions[1].values: Required value")


def test_a_binding_matches_for_any_pod_it_may_run() -> None:
    """`others`: the pods of its template's versions (a move to another class or QoS)."""
    moving = BindingTraits(
        has_replicas=True,
        best_effort=False,
        priority_class="low",
        others=frozenset({("high", True)}),
    )
    assert matches((expr("PriorityClass", "In", "low"),), moving)
    assert matches((expr("PriorityClass", "In", "high"),), moving)
    assert matches((expr("BestEffort", "Exists"),), moving)
    assert matches((expr("NotBestEffort", "Exists"),), moving)
    # every expression holds for one pod: no pod of class high is NotBestEffort
    assert not matches(
        (expr("PriorityClass", "In", "high"), expr("NotBestEffort", "Exists")), moving
    )
    assert not matches((expr("PriorityClass", "In", "mid"),), moving)
    idle = BindingTraits(False, False, "", frozenset({("high", False)}))
    assert not matches((expr("PriorityClass", "In", "high"),), idle)  # no replicas, no pods
