"""ClusterKarmadaQuota: the model, its generated CRD, its validation, and namespace selectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from karmadaquota import api, crdgen, selectors
from karmadaquota.api import ClusterKarmadaQuota, LabelSelector, LabelSelectorRequirement
from karmadaquota.validation import validate_spec

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "api" / "crds" / "quota.karmada.io_clusterkarmadaquotas.yaml"
SAMPLE = ROOT / "api" / "samples" / "cluster" / "team-a.yaml"


def cluster_quota(**spec: Any) -> ClusterKarmadaQuota:
    body = {"hard": {"pods": "10"}, "namespaceSelector": {"matchLabels": {"team": "a"}}, **spec}
    return ClusterKarmadaQuota.model_validate({"metadata": {"name": "team-a"}, "spec": body})


def schema() -> dict[str, Any]:
    root: dict[str, Any] = crdgen.cluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


# ---- the CRD ---------------------------------------------------------------------------------


def test_committed_crd_matches_the_generator() -> None:
    assert CRD_FILE.read_text(encoding="utf-8") == crdgen.render(cluster=True), (
        "api/crds/quota.karmada.io_clusterkarmadaquotas.yaml is stale: run hack/gen-crds"
    )
    chart = ROOT / "charts" / "karmadaquota" / "files" / "crds" / CRD_FILE.name
    assert chart.read_text(encoding="utf-8") == CRD_FILE.read_text(encoding="utf-8")


def test_the_applied_view_crd_is_committed_namespaced_and_read_only_by_design() -> None:
    path = ROOT / "api" / "crds" / "quota.karmada.io_appliedclusterkarmadaquotas.yaml"
    assert path.read_text(encoding="utf-8") == crdgen.render(applied=True), "run hack/gen-crds"
    spec = crdgen.applied_crd()["spec"]
    assert spec["scope"] == "Namespaced" and spec["names"]["shortNames"] == ["ackq"]
    status = spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    # totals and this namespace's usage; no list of the other namespaces
    assert set(status["properties"]) == {
        "clusterQuota",
        "hard",
        "used",
        "namespaceUsed",
        "summary",
        "namespaceSummary",
        "selectedNamespaces",
    }


def test_names_scope_and_columns() -> None:
    spec = crdgen.cluster_crd()["spec"]
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "ClusterKarmadaQuota"
    assert spec["names"]["shortNames"] == ["ckq"]
    assert spec["names"]["categories"] == ["karmada-io"]
    assert crdgen.cluster_crd()["metadata"]["name"] == "clusterkarmadaquotas.quota.karmada.io"
    columns = [c["name"] for c in spec["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Summary", "Namespaces", "Evicted", "Age"]  # like `kubectl get kq`
    assert spec["versions"][0]["subresources"] == {"status": {}}


def test_schema_carries_the_selector_and_a_compact_status() -> None:
    spec = schema()["properties"]["spec"]
    assert "namespaceSelector" in spec["required"]
    sel = spec["properties"]["namespaceSelector"]["properties"]
    assert sel["matchExpressions"]["items"]["properties"]["operator"]["enum"] == [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
    ]
    status = schema()["properties"]["status"]["properties"]
    assert {"hard", "used", "namespaces", "aggregatedStatus", "conditions", "pending"} <= set(
        status
    )
    assert "waiting" not in status and "queued" not in status
    group = status["pending"]["items"]
    assert "namespace" in group["properties"] and "namespace" in group["required"]
    rules = [r["message"] for r in spec["x-kubernetes-validations"]]
    assert any(m.startswith("onExceed") for m in rules)
    assert any(m.startswith("memberEnforcement") for m in rules)


def test_sample_validates_and_conforms() -> None:
    doc = yaml.safe_load(SAMPLE.read_text(encoding="utf-8"))
    quota = ClusterKarmadaQuota.model_validate(doc)
    assert quota.kind == api.CLUSTER_KIND
    assert validate_spec(quota.spec) == []
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "spec": {"hard": {"pods": "1"}}}, schema())


# ---- the status ------------------------------------------------------------------------------


def test_pending_entries_carry_their_namespace_round_trip() -> None:
    wire = {
        "metadata": {"name": "team-a"},
        "spec": {"namespaceSelector": {}},
        "status": {
            "pending": [
                {
                    "namespace": "team-a-dev",
                    "charge": {"pods": "1"},
                    "expires": "2030-01-01T00:00:00Z",
                    "bindings": ["web-deployment/u1"],
                },
                {
                    "namespace": "team-a-prod",
                    "charge": {"pods": "1"},
                    "expires": "2030-01-01T00:00:00Z",
                    "bindings": ["web-deployment/u2/3"],
                },
            ]
        },
    }
    quota = ClusterKarmadaQuota.model_validate(wire)
    got = [
        (r.reservedBy.namespace, r.reservedBy.name, r.generation) for r in quota.status.reservations
    ]
    assert got == [("team-a-dev", "web-deployment", 1), ("team-a-prod", "web-deployment", 3)]
    dumped = quota.status.model_dump(mode="json", exclude_none=True)
    assert dumped["pending"] == wire["status"]["pending"]  # same charge and expiry: 2 groups
    assert "waiting" not in dumped and "queued" not in dumped


def test_a_namespaced_quotas_pending_has_no_namespace() -> None:
    wire = {
        "metadata": {"name": "q", "namespace": "ns"},
        "status": {
            "pending": [
                {"charge": {"pods": "1"}, "expires": "2030-01-01T00:00:00Z", "bindings": ["a/u"]}
            ]
        },
    }
    quota = api.KarmadaQuota.model_validate(wire)
    assert quota.status.reservations[0].reservedBy.namespace == "ns"
    assert "namespace" not in quota.status.model_dump(mode="json")["pending"][0]


# ---- validation ------------------------------------------------------------------------------


def test_queue_and_member_guards_are_refused_with_the_reason() -> None:
    errors = validate_spec(cluster_quota(onExceed="Queue", memberEnforcement="ResourceQuota").spec)
    assert any(e.startswith('spec.onExceed: Unsupported value: "Queue"') for e in errors), errors
    assert any(
        e.startswith('spec.memberEnforcement: Unsupported value: "ResourceQuota"')
        and "one namespace" in e
        for e in errors
    ), errors
    assert validate_spec(cluster_quota().spec) == []
    # the same spec is fine on a namespaced quota
    kq = api.KarmadaQuota.model_validate(
        {"spec": {"hard": {"pods": "1"}, "onExceed": "Queue", "memberEnforcement": "ResourceQuota"}}
    )
    assert validate_spec(kq.spec) == []


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "team", "operator": "In"}]},
            "spec.namespaceSelector.matchExpressions[0].values: Required value: must be "
            "specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]},
            "spec.namespaceSelector.matchExpressions[0].values: Forbidden: may not be "
            "specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]},
            'spec.namespaceSelector.matchExpressions[0].operator: Invalid value: "Gt": not a '
            "valid selector operator",
        ),
        (
            {"matchLabels": {"-team": "a"}},
            'spec.namespaceSelector.matchLabels: Invalid value: "-team": name part must consist',
        ),
        (
            {"matchLabels": {"team": "a b"}},
            'spec.namespaceSelector.matchLabels: Invalid value: "a b": a valid label must be',
        ),
        (
            {"matchLabels": {"Example.com/team": "a"}},
            'Invalid value: "Example.com/team": prefix part a lowercase RFC 1123 subdomain',
        ),
    ],
)
def test_selector_validation_in_kubernetes_words(selector: dict[str, Any], message: str) -> None:
    errors = validate_spec(cluster_quota(namespaceSelector=selector).spec)
    assert any(message in e for e in errors), errors


# ---- selection -------------------------------------------------------------------------------

TABLE = {
    "team-a-dev": {"team": "a", "tier": "dev"},
    "team-a-prod": {"team": "a", "tier": "prod"},
    "team-a-sandbox": {"team": "a", "tier": "sandbox"},
    "team-b": {"team": "b"},
    "plain": {},
}


def sel(labels: dict[str, str] | None = None, *exprs: tuple[str, str, list[str]]) -> LabelSelector:
    return LabelSelector(
        matchLabels=labels or {},
        matchExpressions=[
            LabelSelectorRequirement(key=k, operator=o, values=v) for k, o, v in exprs
        ],
    )


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        (sel({"team": "a"}), ["team-a-dev", "team-a-prod", "team-a-sandbox"]),
        (sel({"team": "a"}, ("tier", "NotIn", ["sandbox"])), ["team-a-dev", "team-a-prod"]),
        (sel(None, ("tier", "In", ["dev", "prod"])), ["team-a-dev", "team-a-prod"]),
        (
            sel(None, ("tier", "NotIn", ["dev"])),
            ["plain", "team-a-prod", "team-a-sandbox", "team-b"],
        ),
        (sel(None, ("tier", "Exists", [])), ["team-a-dev", "team-a-prod", "team-a-sandbox"]),
        (sel(None, ("team", "DoesNotExist", [])), ["plain"]),
        (sel(), sorted(TABLE)),  # empty selects everything, as metav1.LabelSelector does
        (sel(None, ("team", "Gt", ["1"])), []),  # invalid selects nothing
        (sel({"team": "a"}, ("team", "In", ["b"])), []),  # ANDed
    ],
)
def test_selected(selector: LabelSelector, want: list[str]) -> None:
    assert selectors.selected(selector, TABLE) == want
