"""Names from a review are checked against Kubernetes' own rules before they reach a URL."""

from __future__ import annotations

import json

import pytest

from karmadaquota.kube import paths
from karmadaquota.webhook import review
from tests.webhook.test_webhook_app import review as review_doc
from tests.webhook_fakes import binding_doc

HOSTILE = [
    "../kube-system",
    "ns/secrets",
    "ns?watch=1",
    "ns%2Fsecrets",
    "ns\n",  # `$` would accept it before a newline; fullmatch does not
    "NS",
    "-ns",
    "ns-",
    "",
    "a" * 64,
    "ns.with.dots",  # a subdomain, not a label: no namespace has dots
]


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_namespace_that_no_namespace_can_have_never_reaches_a_path(bad: str) -> None:
    with pytest.raises(paths.InvalidName, match="invalid namespace"):
        paths.quota(bad, "team-a")
    with pytest.raises(paths.InvalidName):
        paths.bindings(bad) if bad else paths.binding(bad, "x")


@pytest.mark.parametrize("bad", ["../x", "a/b", "x?y", "A", ".x", "x.", "a" * 254, "x..y", ""])
def test_an_object_name_must_be_a_subdomain(bad: str) -> None:
    with pytest.raises(paths.InvalidName, match="invalid name"):
        paths.quota_status("ns", bad)


def test_valid_names_make_the_usual_paths() -> None:
    assert paths.quota("team-a", "q.v1") == (
        "/apis/quota.karmada.io/v1alpha1/namespaces/team-a/karmadaquotas/q.v1"
    )
    assert paths.binding("a" * 63, "b" * 253).endswith("/" + "b" * 253)
    assert paths.quotas() == "/apis/quota.karmada.io/v1alpha1/karmadaquotas"


def test_the_message_is_kubernetes_wording() -> None:
    with pytest.raises(paths.InvalidName) as e:
        paths.quota("A" * 64, "q")
    assert "must be no more than 63 characters" in str(e.value)
    assert "a lowercase RFC 1123 label must consist of" in str(e.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [("namespace", "../kube-system"), ("namespace", "NS"), ("name", "a/b"), ("name", "x?y")],
)
def test_a_review_with_such_a_name_is_malformed(field: str, value: str) -> None:
    doc = review_doc(binding_doc("ok", cpu="1"))
    doc["request"][field] = value
    with pytest.raises(review.MalformedReview, match=f"request.{field}: a lowercase RFC 1123"):
        review.parse(json.dumps(doc).encode())


def test_a_review_without_a_name_is_fine() -> None:
    doc = review_doc(binding_doc("ok", cpu="1"))
    doc["request"]["name"] = ""  # generateName: the name is not known yet
    assert review.parse(json.dumps(doc).encode()).name == ""
