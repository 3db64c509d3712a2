"""What an untrusted writer's OverridePolicy may hold where a quota is: an allow-list
(karmadaquota.overrides, docs/security.md). Each attack issue 34 ran in the members is refused by
name; the overrides a tenant writes every day are not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karmadaquota.overrides import AllowList, InvalidPattern, only_as_before, refusals

CPU = "/spec/template/spec/containers/0/resources/requests/cpu"


def policy(
    overriders: dict[str, Any], *, selectors: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": "op", "namespace": "ns"},
        "spec": {
            "resourceSelectors": selectors
            if selectors is not None
            else [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "overrideRules": [
                {"targetCluster": {"clusterNames": ["m1"]}, "overriders": overriders},
            ],
        },
    }


def plaintext(path: str, value: Any = "x", operator: str = "replace") -> dict[str, Any]:
    return policy({"plaintext": [{"path": path, "operator": operator, "value": value}]})


def refused(doc: dict[str, Any], allowed: AllowList | None = None) -> list[str]:
    return [r.what for r in refusals(doc, allowed)]


# ---- the attacks of issue 34 (and issue 29's) -----------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("/metadata/name", "web-2"),  # one more full copy of the workload per rendered name
        ("/metadata/namespace", "elsewhere"),  # the workload in any namespace of the member
        ("/metadata", {"name": "web-2"}),
        ("/spec/strategy", {"rollingUpdate": {"maxSurge": "100%"}}),  # 4 pods under pods=2
        ("/spec/strategy/rollingUpdate/maxSurge", "100%"),
        ("/spec/minReadySeconds", 3600),
        ("/spec/replicas", 5),
        (CPU, "4"),
        ("/spec/template/spec/containers/0/resources", {"requests": {"cpu": "4"}}),
        ("/spec/template/spec/containers/-", {"name": "more", "image": "x"}),
        ("/spec/template/spec/containers/1", {"name": "more", "image": "x"}),
        ("/spec/template/spec/initContainers/0/restartPolicy", "Always"),
        ("/spec/template/spec/overhead", {"cpu": "4"}),
        ("/spec/template/spec/priorityClassName", "low"),  # a quota's PriorityClass scope
        ("/spec/template/spec/runtimeClassName", "kata"),  # the pod's overhead
        ("/spec/template/spec", {}),
        ("/spec/template", {}),
        ("/spec", {}),
        ("", {}),
        ("/", {}),
        ("spec/replicas", 5),  # not a JSON pointer
        ("/spec/jobTemplate/spec/parallelism", 9),
        ("/spec/template/spec/containers/0/name", "other"),
        ("/data/config", "x"),  # a Deployment's policy: data paths only for ConfigMaps/Secrets
    ],
)
def test_plaintext_off_the_list_is_refused_by_field_and_path(path: str, value: Any) -> None:
    (what,) = refused(plaintext(path, value))
    assert what.startswith(f"spec.overrideRules[0].overriders.plaintext[0]: replace {path or '/'}")


def test_an_image_predicate_aimed_at_a_quantity_is_refused() -> None:
    """Karmada rewrites the string at predicate.path as an image reference: "1" became "2"
    (two cpu per pod under requests.cpu=1)."""
    doc = policy(
        {
            "imageOverrider": [
                {
                    "predicate": {"path": CPU},
                    "component": "Tag",
                    "operator": "replace",
                    "value": "2",
                }
            ]
        }
    )
    assert refused(doc) == [
        f"spec.overrideRules[0].overriders.imageOverrider[0]: predicate.path {CPU}: not on the "
        "allow-list"
    ]
    # an escape makes Karmada's read and its patch differ: refused even on an image path
    escaped = copy.deepcopy(doc)
    escaped["spec"]["overrideRules"][0]["overriders"]["imageOverrider"][0]["predicate"] = {
        "path": "/spec/template/spec/containers/0/image~1x"
    }
    assert "an escape" in refused(escaped)[0]


@pytest.mark.parametrize(
    "overriders",
    [
        {"labelsOverrider": [{"operator": "add", "value": {"a": "b", "team": "x"}}]},
        {"annotationsOverrider": [{"operator": "replace", "value": {"x.example.com/y": "z"}}]},
    ],
)
def test_labels_and_annotations_outside_karmadas_prefixes_are_allowed(
    overriders: dict[str, Any],
) -> None:
    assert refused(policy(overriders)) == []


@pytest.mark.parametrize(
    "key",
    [
        "resourcetemplate.karmada.io/retain-replicas",  # Karmada keeps the members' replicas
        "work.karmada.io/conflict-resolution",
        "karmada.io/managed",
        "quota.karmada.io/enforced",
        "resourcetemplate.karmada.io~1retain-replicas",  # Karmada unescapes '~1' to '/'
    ],
)
def test_karmada_keys_are_refused_whatever_the_route(key: str) -> None:
    for kind in ("labelsOverrider", "annotationsOverrider"):
        for operator in ("add", "replace", "remove"):
            doc = policy({kind: [{"operator": operator, "value": {key: "true"}}]})
            (what,) = refused(doc)
            assert what.startswith(f"spec.overrideRules[0].overriders.{kind}[0]: {operator} {key}")
    label = key.replace("~1", "/").replace("/", "~1")
    for path, value in [
        (f"/metadata/labels/{label}", "true"),
        ("/metadata/labels", {"a": "b", key.replace("~1", "/"): "true"}),
        (f"/spec/template/metadata/annotations/{label}", "true"),
    ]:
        (what,) = refused(plaintext(path, value, "add"))
        assert "Karmada key" in what, what


# ---- what tenants write every day -----------------------------------------------------------


@pytest.mark.parametrize(
    "overriders",
    [
        {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "r.io"}]},
        {
            "imageOverrider": [
                {
                    "predicate": {"path": "/spec/template/spec/containers/0/image"},
                    "component": "Tag",
                    "operator": "replace",
                    "value": "v2",
                }
            ]
        },
        {"commandOverrider": [{"containerName": "app", "operator": "add", "value": ["-v"]}]},
        {"argsOverrider": [{"containerName": "app", "operator": "remove", "value": ["-x"]}]},
        {
            "plaintext": [
                {"path": "/spec/template/spec/containers/0/image", "operator": "replace"},
                {"path": "/spec/template/spec/containers/0/env/-", "operator": "add"},
                {"path": "/spec/template/spec/containers/0/imagePullPolicy", "operator": "add"},
                {"path": "/spec/template/spec/initContainers/0/args", "operator": "add"},
                {"path": "/spec/template/spec/nodeSelector", "operator": "add"},
                {"path": "/spec/template/spec/nodeSelector/zone", "operator": "add"},
                {"path": "/spec/template/spec/tolerations/0", "operator": "replace"},
                {"path": "/spec/template/spec/affinity", "operator": "remove"},
                {"path": "/spec/template/spec/imagePullSecrets", "operator": "add"},
                {
                    "path": "/spec/jobTemplate/spec/template/spec/containers/0/image",
                    "operator": "add",
                },
                {"path": "/metadata/labels/app.kubernetes.io~1name", "operator": "add"},
                {"path": "/metadata/annotations", "operator": "add", "value": {"foo": "bar"}},
                {"path": "/spec/template/metadata/annotations/x", "operator": "add"},
                {"path": "/metadata/labels", "operator": "remove"},
            ]
        },
        {"plaintext": None, "imageOverrider": []},
    ],
)
def test_everyday_overrides_are_allowed(overriders: dict[str, Any]) -> None:
    assert refused(policy(overriders)) == []


def test_a_configmaps_data_may_be_overridden_by_a_policy_selecting_only_configmaps() -> None:
    data = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg"}]
    field = {
        "fieldOverrider": [
            {
                "fieldPath": "/data/db.yaml",
                "yaml": [{"subPath": "/db/host", "operator": "replace", "value": "x"}],
            }
        ]
    }
    replace = {"plaintext": [{"path": "/data/db.yaml", "operator": "replace", "value": "x"}]}
    for overriders in (field, replace):
        assert refused(policy(overriders, selectors=data)) == []
        # a Deployment's (or every kind's) policy: /data is no ConfigMap's, refused
        assert len(refused(policy(overriders))) == 1
        assert len(refused(policy(overriders, selectors=[]))) == 1
    # a fieldOverrider on a workload's string field rewrites it: refused
    (what,) = refused(
        policy({"fieldOverrider": [{"fieldPath": "/metadata/name", "json": []}]}, selectors=data)
    )
    assert what.startswith("spec.overrideRules[0].overriders.fieldOverrider[0]: fieldPath")


# ---- deny by default ------------------------------------------------------------------------


def test_an_unknown_overrider_or_field_is_refused() -> None:
    assert refused(policy({"replicasOverrider": [{"value": 5}]})) == [
        "spec.overrideRules[0].overriders.replicasOverrider: not an overrider on the allow-list"
    ]
    doc = policy({"commandOverrider": [{"containerName": "a", "operator": "add", "path": "/x"}]})
    assert refused(doc) == [
        "spec.overrideRules[0].overriders.commandOverrider[0].path: an unknown field"
    ]
    doc = policy({})
    doc["spec"]["overrideRules"][0]["placement"] = {}
    doc["spec"]["newField"] = 1
    assert refused(doc) == [
        "spec.newField: an unknown field",
        "spec.overrideRules[0].placement: an unknown field",
    ]


def test_the_deprecated_overriders_are_checked_too() -> None:
    doc = {"spec": {"overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "add"}]}}}
    assert refused(doc) == [
        "spec.overriders.plaintext[0]: add /spec/replicas: not on the allow-list"
    ]


@pytest.mark.parametrize(
    "doc",
    [
        {"spec": []},
        {"spec": {"overrideRules": "x"}},
        {"spec": {"overrideRules": [1]}},
        {"spec": {"overrideRules": [{"overriders": {"plaintext": "x"}}]}},
        {"spec": {"overrideRules": [{"overriders": {"plaintext": [1]}}]}},
        {"spec": {"overrideRules": [{"overriders": "x"}]}},
    ],
)
def test_malformed_policies_are_refused(doc: dict[str, Any]) -> None:
    assert len(refused(doc)) == 1


def test_a_policy_without_spec_holds_nothing() -> None:
    assert refused({}) == []


def test_the_platform_team_extends_the_list() -> None:
    path = "/spec/template/spec/priorityClassName"
    assert refused(plaintext(path, "low"))
    extended = AllowList.extended([f"{path}, /spec/template/spec/containers/*/workingDir"])
    assert refused(plaintext(path, "low"), extended) == []
    assert refused(plaintext("/spec/template/spec/containers/3/workingDir"), extended) == []
    assert refused(plaintext("/spec/replicas", 5), extended)  # the rest stays refused
    # the default list stays in the extended one
    assert refused(plaintext("/spec/template/spec/containers/0/image"), extended) == []
    for bad in ("spec/replicas", "/"):
        with pytest.raises(InvalidPattern):
            AllowList.extended([bad])


# ---- only what was there before -------------------------------------------------------------


def test_an_update_may_keep_what_the_old_policy_rendered_and_add_nothing() -> None:
    old = plaintext("/spec/replicas", 5)
    old["spec"]["overrideRules"][0]["overriders"]["labelsOverrider"] = [
        {"operator": "add", "value": {"a": "b"}}
    ]
    new = copy.deepcopy(old)
    new["spec"]["overrideRules"][0]["overriders"]["labelsOverrider"][0]["value"] = {"a": "c"}
    assert only_as_before(new, old, refusals(new))
    assert only_as_before(old, None, []) and not only_as_before(old, None, refusals(old))

    def changed(edit: Any) -> bool:
        doc = copy.deepcopy(old)
        edit(doc["spec"])
        return only_as_before(doc, old, refusals(doc))

    rule = lambda s: s["overrideRules"][0]  # noqa: E731
    # a new value, more clusters, more resources: each renders something the old did not
    assert not changed(lambda s: rule(s)["overriders"]["plaintext"][0].update(value=50))
    assert not changed(lambda s: rule(s).pop("targetCluster"))
    assert not changed(lambda s: s["resourceSelectors"][0].pop("name"))
    assert not changed(lambda s: s.update(overriders=rule(s)["overriders"], overrideRules=[]))
    # the same override once more, or one of two dropped: what renders changes
    twice = lambda s: rule(s)["overriders"]["plaintext"].append(  # noqa: E731
        {"path": "/spec/template/spec/containers/-", "operator": "add", "value": {"name": "x"}}
    )
    older = copy.deepcopy(old)
    twice(older["spec"])
    newer = copy.deepcopy(older)
    twice(newer["spec"])
    assert only_as_before(older, older, refusals(older))
    assert not only_as_before(newer, older, refusals(newer))
    fewer = copy.deepcopy(older)
    fewer["spec"]["overrideRules"][0]["overriders"]["plaintext"].pop(0)
    assert not only_as_before(fewer, older, refusals(fewer))
    # dropping every refused override is always allowed
    clean = copy.deepcopy(older)
    clean["spec"]["overrideRules"][0]["overriders"].pop("plaintext")
    assert only_as_before(clean, older, refusals(clean))


def test_a_huge_number_in_a_refused_override_is_still_named() -> None:
    """A JSON integer beyond 64 bits is valid in a review: the refusal names it, no 500."""
    doc = plaintext("/spec/replicas", 2**70)
    assert not only_as_before(doc, plaintext("/spec/replicas", 1), refusals(doc))
    assert only_as_before(doc, doc, refusals(doc))
