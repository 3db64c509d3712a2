"""One replica as Kubernetes charges a pod (pod_template), and a binding charged with it."""

from __future__ import annotations

from typing import Any

import pytest

from karmadaquota import charge, pod_template
from karmadaquota.api import ResourceBinding
from karmadaquota.evaluate import evaluate
from karmadaquota.pod_template import PodCharge, grows, of_spec, of_template
from karmadaquota.quantity import QuantityError
from tests.conftest import as_strings, binding_doc, view


def container(name: str, requests: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if "limits" in more:
        res["limits"] = more.pop("limits")
    return {"name": name, "image": "app", "resources": res, **more}


# a Deployment rolled without a surge pod: charged its replicas alone (the surge tests set theirs)
NO_SURGE = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def deployment(
    spec: dict[str, Any], name: str = "web", strategy: dict[str, Any] | None = NO_SURGE
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
        "spec": {"replicas": 1, "template": {"spec": spec}},
    }
    if strategy is not None:
        d["spec"]["strategy"] = strategy
    return d


def test_a_sidecar_adds_to_the_containers_where_karmada_takes_the_maximum() -> None:
    spec = {
        "containers": [container("app", {"cpu": "400m"})],
        "initContainers": [container("proxy", {"cpu": "400m"}, restartPolicy="Always")],
    }
    assert as_strings(of_spec(spec).requests) == {"cpu": "800m"}


def test_an_init_container_must_fit_beside_the_sidecars_started_before_it() -> None:
    spec = {
        "containers": [container("app", {"cpu": "100m"})],
        "initContainers": [
            container("proxy", {"cpu": "200m"}, restartPolicy="Always"),
            container("migrate", {"cpu": "1"}),
        ],
    }
    # max(app + proxy = 300m, migrate + proxy = 1200m)
    assert as_strings(of_spec(spec).requests) == {"cpu": "1200m"}


def test_overhead_is_added_to_requests_and_to_the_limits_that_are_set() -> None:
    spec = {
        "containers": [container("app", {"cpu": "1", "memory": "1Gi"}, limits={"cpu": "2"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    pod = of_spec(spec)
    assert as_strings(pod.requests) == {"cpu": "1250m", "memory": "1144Mi"}
    assert as_strings(pod.limits) == {"cpu": "2250m"}  # no memory limit: none is made up
    assert pod.unlimited == frozenset({"memory", "ephemeral-storage"})


def test_pod_level_resources_set_the_total_never_below_the_containers() -> None:
    spec = {
        "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4", "memory": "2Gi"}},
        "containers": [container("a", {"cpu": "500m"}), container("b", {"cpu": "500m"})],
    }
    pod = of_spec(spec)
    assert as_strings(pod.requests) == {"cpu": "2", "memory": "2Gi"}  # memory from its limit
    assert as_strings(pod.limits) == {"cpu": "4", "memory": "2Gi"}
    assert pod.unlimited == frozenset({"ephemeral-storage"})  # the pod's limits cover the rest


def test_a_request_defaults_to_the_limit() -> None:
    pod = of_spec({"containers": [container("app", limits={"cpu": "1", "memory": "1Gi"})]})
    assert as_strings(pod.requests) == {"cpu": "1", "memory": "1Gi"}


def test_only_kinds_with_a_known_pod_template_have_one() -> None:
    assert of_template(deployment({"containers": [container("a", {"cpu": "1"})]})) is not None
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {}}}}
    # no request: a BestEffort pod of no priority class
    assert of_template(job) == PodCharge({}, {}, frozenset(), scopes=frozenset({("", True)}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {"containers": [container("a", {"cpu": "1"})]},
    }
    assert as_strings(of_template(pod).requests) == {"cpu": "1"}  # type: ignore[union-attr]
    assert of_template({"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {}}) is None
    assert of_template({"apiVersion": "example.io/v1", "kind": "Deployment", "spec": {}}) is None


def test_a_bad_quantity_names_its_field() -> None:
    with pytest.raises(QuantityError, match=r"spec.initContainers\[0\].resources.requests"):
        of_spec({"initContainers": [container("x", {"cpu": "lots"})]})


def test_grows_sees_more_requests_more_limits_and_a_limit_removed() -> None:
    one = PodCharge(*[{}, {}], frozenset())  # type: ignore[arg-type]
    base = of_spec({"containers": [container("a", {"cpu": "1"}, limits={"cpu": "1"})]})
    assert not grows(base, base)
    assert grows(of_spec({"containers": [container("a", {"cpu": "2"}, limits={"cpu": "2"})]}), base)
    assert grows(of_spec({"containers": [container("a", {"cpu": "1", "memory": "1"})]}), base)
    assert not grows(one, base)


def charged(pod: PodCharge | None, replicas: int = 2, cpu: str = "400m") -> charge.Charge:
    doc = binding_doc(replicas, {"cpu": cpu, "memory": "1Gi"}, clusters={"m1": replicas})
    return charge.charge(ResourceBinding.model_validate(doc), pod)


def test_a_binding_is_charged_its_pod_as_kubernetes_charges_it_and_its_limits() -> None:
    pod = of_spec(
        {
            "containers": [container("app", {"cpu": "400m", "memory": "1Gi"}, limits=LIMITS)],
            "initContainers": [
                container("proxy", {"cpu": "400m"}, restartPolicy="Always", limits=LIMITS)
            ],
        }
    )
    c = charged(pod)
    assert as_strings(c.total)["requests.cpu"] == "1600m"  # 2 x (400m + 400m sidecar)
    assert as_strings(c.total)["limits.cpu"] == "2"
    assert as_strings(c.total)["limits.memory"] == "4Gi"
    assert as_strings(c.per_cluster["m1"])["limits.cpu"] == "2"
    assert c.missing_limits == frozenset({"ephemeral-storage"})
    assert not c.traits.best_effort


LIMITS = {"cpu": "500m", "memory": "1Gi"}


def test_a_template_never_lowers_the_binding_s_own_charge() -> None:
    small = of_spec({"containers": [container("app", {"cpu": "100m"})]})
    assert as_strings(charged(small).total)["requests.cpu"] == "800m"  # 2 x 400m, as it says
    assert as_strings(charged(small).total)["requests.memory"] == "2Gi"


def test_without_a_template_limits_are_unknown() -> None:
    c = charged(None)
    assert not any(n.startswith("limits.") for n in c.total)
    assert c.missing_limits == frozenset(pod_template.LIMITED)
    assert charge.queued_charge(c).missing_limits == c.missing_limits


def test_a_quota_on_limits_refuses_a_replica_without_them_and_charges_those_it_has() -> None:
    q = view("lim", {"limits.cpu": "2"}, {"limits.cpu": "1"})
    refused = evaluate([q], charged(None))
    assert not refused.allowed and refused.message == "failed quota: lim: must specify limits.cpu"
    with_limits = of_spec({"containers": [container("a", {"cpu": "100m"}, limits={"cpu": "1"})]})
    over = evaluate([q], charged(with_limits))
    assert over.message == (
        "exceeded quota: lim, requested: limits.cpu=2, used: limits.cpu=1, limited: limits.cpu=2"
    )
    fits = evaluate([q], charged(with_limits, replicas=1))
    assert fits.allowed and as_strings(fits.charges["lim"]) == {"limits.cpu": "1"}


@pytest.mark.parametrize(
    ("strategy", "replicas", "surge"),
    [
        (None, 1, 1),  # Kubernetes' default maxSurge 25%, rounded up
        (None, 4, 1),
        (None, 5, 2),
        ({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}, 3, 0),
        ({"rollingUpdate": {"maxSurge": 3}}, 2, 3),
        ({"rollingUpdate": {"maxSurge": "100%"}}, 3, 3),
        ({"type": "Recreate"}, 3, 0),
        (None, 0, 0),
    ],
)
def test_a_deployment_s_rollout_surges_as_kubernetes_resolves_max_surge(
    strategy: dict[str, Any] | None, replicas: int, surge: int
) -> None:
    pod = of_template(deployment({"containers": [container("app", {"cpu": "1"})]}, "web", strategy))
    assert pod is not None and pod_template.surge(pod.surges, replicas) == surge


def test_only_a_deployment_surges_and_its_surge_is_charged_in_every_member() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {}}}}
    assert of_template(job).surges == frozenset()  # type: ignore[union-attr]
    pod = of_template(deployment({"containers": [container("app", {"cpu": "1"})]}, "web", None))
    doc = binding_doc(4, {"cpu": "1"}, clusters={"m1": 3, "m2": 1})
    c = charge.charge(ResourceBinding.model_validate(doc), pod)
    # m1: 3 + ceil(0.75) = 4, m2: 1 + ceil(0.25) = 2
    assert as_strings(c.per_cluster["m1"])["pods"] == "4"
    assert as_strings(c.per_cluster["m2"])["pods"] == "2"
    assert as_strings(c.total)["pods"] == "6" and as_strings(c.total)["requests.cpu"] == "6"
    wider = of_template(deployment(SPEC, "web", MORE))
    assert wider is not None and pod is not None and grows(wider, pod)


SPEC = {"containers": [container("app", {"cpu": "1"})]}
MORE = {"rollingUpdate": {"maxSurge": "50%"}}


def test_replicas_as_karmada_reads_them_with_the_api_server_s_defaults() -> None:
    assert pod_template.replicas_of({"kind": "Deployment", "spec": {}}) == 1
    assert pod_template.replicas_of({"kind": "StatefulSet", "spec": {"replicas": 0}}) == 0
    assert pod_template.replicas_of({"kind": "Scale", "spec": {}}) == 0  # omitted when zero
    assert pod_template.replicas_of({"kind": "Job", "spec": {"parallelism": 4}}) == 4
    assert pod_template.replicas_of({"kind": "Pod", "spec": {}}) is None
    assert pod_template.replicas_of({"kind": "Deployment", "spec": {"replicas": True}}) is None


def test_a_pod_says_its_priority_class_and_whether_it_is_best_effort() -> None:
    low = of_spec({"priorityClassName": "low", "containers": [container("a", {"cpu": "1"})]})
    assert low.scopes == frozenset({("low", False)})
    bare = of_spec({"containers": [container("a")]})
    assert bare.scopes == frozenset({("", True)})
    limited = of_spec({"containers": [container("a", limits={"memory": "1Gi"})]})
    assert limited.scopes == frozenset({("", False)})  # its request defaults to the limit
    both = pod_template.most([low, bare])
    assert both is not None and both.scopes == frozenset({("low", False), ("", True)})


def test_a_move_to_another_priority_class_or_qos_grows_an_image_change_does_not() -> None:
    """Its pods fall under other scoped quotas, which charge them in full."""
    app = container("a", {"cpu": "1"})
    low = of_spec({"priorityClassName": "low", "containers": [app]})
    high = of_spec({"priorityClassName": "high", "containers": [app]})
    assert grows(high, low) and grows(low, high)
    assert grows(of_spec({"priorityClassName": "low", "containers": [container("a")]}), low)
    assert grows(low, of_spec({"priorityClassName": "low", "containers": [container("a")]}))
    image = of_spec({"priorityClassName": "low", "containers": [{**app, "image": "app:2"}]})
    assert not grows(image, low)


def test_a_binding_is_charged_where_each_template_version_s_pods_fall() -> None:
    """The binding names class low; its template moved to high: both classes' quotas match,
    and a quota of high NotBestEffort is not matched by a pod of high that is BestEffort."""
    from karmadaquota import scopes

    app = container("a", {"cpu": "400m", "memory": "1Gi"})
    low = of_spec({"priorityClassName": "low", "containers": [app]})
    high = of_spec({"priorityClassName": "high", "containers": [app]})
    doc = binding_doc(1, {"cpu": "400m", "memory": "1Gi"}, priority_class="low")
    binding = ResourceBinding.model_validate(doc)
    priced = charge.template_change(binding, low, high, 1, 1)
    in_high = (scopes.Expression("PriorityClass", "In", frozenset({"high"})),)
    in_low = (scopes.Expression("PriorityClass", "In", frozenset({"low"})),)
    assert scopes.matches(in_high, priced.new.traits)
    assert scopes.matches(in_low, priced.new.traits)  # the old pods run until the rollout ends
    assert not scopes.matches(in_high, priced.old.traits)
    # entering the quota of high, the binding is charged there in full
    q = view("high", {"pods": "1"}, {"pods": "1"}, expressions=[("PriorityClass", "In", ["high"])])
    refused = evaluate([q], priced.new, priced.old)
    assert not refused.allowed
    assert (
        refused.message == "exceeded quota: high, requested: pods=1, used: pods=1, limited: pods=1"
    )
    q = view("high", {"pods": "2"}, {"pods": "1"}, expressions=[("PriorityClass", "In", ["high"])])
    assert as_strings(evaluate([q], priced.new, priced.old).charges["high"]) == {"pods": "1"}
    best_effort_high = of_spec({"priorityClassName": "high", "containers": [container("a")]})
    mixed = charge.charge(binding, pod_template.most([low, best_effort_high]))
    not_best_effort_high = (*in_high, scopes.Expression("NotBestEffort", "Exists"))
    assert not scopes.matches(not_best_effort_high, mixed.traits)  # per pod, not per field
