"""Which OverridePolicy overrides change what is charged (karmadaquota.overrides)."""

from __future__ import annotations

from typing import Any

import pytest

from karmadaquota.overrides import charged_overrides, touches_charge


@pytest.mark.parametrize(
    "path",
    [
        "/spec/replicas",
        "/spec/template/spec/containers/0/resources",
        "/spec/template/spec/containers/0/resources/requests/cpu",
        "/spec/template/spec/resources/limits",
        "/spec/template/spec/overhead",
        "/spec/template/spec/containers/-",
        "/spec/template/spec/containers/1",
        "/spec/template/spec/containers",
        "/spec/template/spec/initContainers/0/restartPolicy",
        "/spec/template/spec",
        "/spec/template",
        "/spec",
        "",
        "/",
        "/spec/parallelism",
        "/spec/jobTemplate/spec/completions",
        "/spec/jobTemplate",
        "/metadata/labels/resourcetemplate.karmada.io~1retain-replicas",
    ],
)
def test_paths_that_change_what_is_charged(path: str) -> None:
    assert touches_charge(path)


@pytest.mark.parametrize(
    "path",
    [
        "/metadata/labels/team",
        "/metadata/annotations",
        "/spec/template/metadata/labels",
        "/spec/template/spec/nodeSelector",
        "/spec/template/spec/tolerations/0",
        "/spec/template/spec/containers/0/image",
        "/spec/template/spec/containers/0/env/-",
        "/spec/template/spec/restartPolicy",
        "/data/replicas~1count",  # an escaped '/': the key "replicas/count", not "replicas"
    ],
)
def test_paths_that_change_nothing_charged(path: str) -> None:
    assert not touches_charge(path)


def policy(*ops: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
    if legacy:
        return {"spec": {"overriders": {"plaintext": list(ops)}}}
    return {
        "spec": {
            "overrideRules": [
                {"targetCluster": {"clusterNames": ["m1"]}, "overriders": {"imageOverrider": []}},
                {"overriders": {"plaintext": list(ops)}},
            ]
        }
    }


def test_charged_overrides_are_named_by_field_and_path() -> None:
    p = policy(
        {"path": "/metadata/labels/a", "operator": "add", "value": "b"},
        {"path": "/spec/replicas", "operator": "replace", "value": 5},
    )
    assert charged_overrides(p) == [
        "spec.overrideRules[1].overriders.plaintext[1]: replace /spec/replicas"
    ]
    legacy = policy({"path": "/spec/replicas", "operator": "replace", "value": 5}, legacy=True)
    assert charged_overrides(legacy) == ["spec.overriders.plaintext[0]: replace /spec/replicas"]


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"spec": []},
        {"spec": {"overrideRules": "x"}},
        {"spec": {"overrideRules": [1, {"overriders": {"plaintext": "x"}}]}},
    ],
)
def test_malformed_policies_name_nothing(doc: dict[str, Any]) -> None:
    assert charged_overrides(doc) == []


def test_a_labels_overrider_setting_retain_replicas_is_charged() -> None:
    """With the label on the rendered workload Karmada keeps the members' own replicas."""
    retain = {"resourcetemplate.karmada.io/retain-replicas": "true"}
    p = {
        "spec": {
            "overrideRules": [
                {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"a": "b"}}]}},
                {"overriders": {"labelsOverrider": [{"operator": "add", "value": retain}]}},
                {"overriders": {"labelsOverrider": [{"operator": "remove", "value": retain}]}},
            ]
        }
    }
    assert charged_overrides(p) == [
        "spec.overrideRules[1].overriders.labelsOverrider[0]: add "
        "resourcetemplate.karmada.io/retain-replicas"
    ]
    whole = policy(
        {"path": "/metadata/labels", "operator": "replace", "value": {"a": "b"}},
        {"path": "/metadata/labels", "operator": "replace", "value": retain},
        {"path": "/metadata", "operator": "replace", "value": {"labels": retain}},
    )
    assert charged_overrides(whole) == [
        "spec.overrideRules[1].overriders.plaintext[1]: replace /metadata/labels",
        "spec.overrideRules[1].overriders.plaintext[2]: replace /metadata",
    ]
