"""The ResourceBinding webhook's matchConditions name exactly the fields a charge reads.

A field charged (karmadaquota.api.ResourceBindingSpec) but missing from the expression would let
an UPDATE that changes it skip admission: quota bypassed. A field in the expression that no
longer exists would send UPDATEs for nothing. (tests/test_chart.py checks the chart registers the
same conditions; every e2e test registers them from this manifest.)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from karmadaquota import queued
from karmadaquota.api import ResourceBindingSpec

REPO = Path(__file__).resolve().parents[1]


def binding_webhook() -> dict[str, object]:
    doc = yaml.safe_load((REPO / "webhook/karmada/validatingwebhookconfiguration.yaml").read_text())
    hook: dict[str, object] = next(
        w for w in doc["webhooks"] if w["name"] == "resourcebinding.quota.karmada.io"
    )
    return hook


def test_the_match_condition_compares_every_charged_field_and_only_those() -> None:
    (condition,) = binding_webhook()["matchConditions"]  # type: ignore[misc]
    expression = condition["expression"]
    assert expression.startswith("request.operation != 'UPDATE' ||")
    compared = set(re.findall(r"object\.spec\.(\w+) != oldObject\.spec\.\1\b", expression))
    presence = set(
        re.findall(r"has\(object\.spec\.(\w+)\) != has\(oldObject\.spec\.\1\)", expression)
    )
    assert compared == presence == set(ResourceBindingSpec.model_fields) - NOT_CHARGED


# read for queue order only: a change of it changes no charge
NOT_CHARGED = {"schedulePriority"}


def test_the_match_condition_sends_a_change_of_the_queued_annotation() -> None:
    """Removing (or adding) `quota.karmada.io/queued-by` alone moves a suspended, unplaced
    binding out of (into) the queue, from charged nothing to charged in full: such an UPDATE
    must reach the webhook."""
    (condition,) = binding_webhook()["matchConditions"]  # type: ignore[misc]
    expression = condition["expression"]
    key = f"'{queued.ANNOTATION}'"
    assert f"{key} in object.metadata.annotations" in expression
    assert f"{key} in oldObject.metadata.annotations" in expression


def test_creates_are_always_sent() -> None:
    """CREATE and UPDATE are the registered operations; the condition lets every CREATE through
    (its first clause), so a new binding is always charged."""
    hook = binding_webhook()
    (rule,) = hook["rules"]  # type: ignore[misc]
    assert rule["operations"] == ["CREATE", "UPDATE"]
