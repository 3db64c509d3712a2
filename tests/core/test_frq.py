"""FederatedResourceQuota -> KarmadaQuota: names, what is not carried over, the YAML stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from karmadaquota import frq, kubectl_plugin
from karmadaquota.api import KarmadaQuota
from karmadaquota.validation import validate_spec


def an_frq(name: str, namespace: str, overall: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "FederatedResourceQuota",
        "metadata": {"name": name, "namespace": namespace, "uid": "u-" + name},
        "spec": {"overall": overall, **spec},
        "status": {"overallUsed": {"cpu": "1"}},
    }


@pytest.mark.parametrize(
    ("frq_name", "kq_name"),
    [
        ("cpu", "requests.cpu"),
        ("memory", "requests.memory"),
        ("ephemeral-storage", "requests.ephemeral-storage"),
        ("hugepages-2Mi", "requests.hugepages-2Mi"),
        ("nvidia.com/gpu", "requests.nvidia.com/gpu"),
        ("pods", "pods"),
        ("count/deployments.apps", "count/deployments.apps"),
        ("requests.cpu", "requests.cpu"),
        ("limits.cpu", "limits.cpu"),
        ("kubernetes.io/foo", "kubernetes.io/foo"),
    ],
)
def test_quota_name(frq_name: str, kq_name: str) -> None:
    assert frq.quota_name(frq_name) == kq_name


def test_convert_maps_bare_names_and_explains_the_rest() -> None:
    c = frq.convert(
        an_frq(
            "team",
            "team-a",
            {
                "cpu": "4",
                "memory": "8Gi",
                "nvidia.com/gpu": "2",
                "pods": "10",
                "limits.memory": "16Gi",
                "storage": "1Ti",
            },
            staticAssignments=[
                {"clusterName": "member1", "hard": {"cpu": "2"}},
                {"clusterName": "member2", "hard": {"cpu": "2"}},
            ],
        )
    )
    assert c.source == "team-a/team"
    assert c.quota is not None
    assert c.quota["spec"] == {
        "hard": {
            "requests.cpu": "4",
            "requests.memory": "8Gi",
            "requests.nvidia.com/gpu": "2",
            "pods": "10",
        }
    }
    assert c.quota["metadata"]["name"] == "team"
    assert c.quota["metadata"]["namespace"] == "team-a"
    # what comes out is a valid KarmadaQuota by our own validation
    assert validate_spec(KarmadaQuota.model_validate(c.quota).spec) == []
    notes = "\n".join(c.notes)
    assert "not carried over: limits.memory=16Gi" in notes and "never enforced limits" in notes
    assert "not carried over: storage=1Ti" in notes
    assert "staticAssignments (member1, member2) not carried over" in notes
    assert "per-cluster" in notes
    assert "pods: Karmada's FederatedResourceQuota never charged this name" in notes


def test_a_bad_quantity_is_named_not_copied() -> None:
    c = frq.convert(an_frq("q", "ns", {"cpu": "lots", "memory": "1Gi"}))
    assert c.quota is not None and c.quota["spec"]["hard"] == {"requests.memory": "1Gi"}
    assert any(n.startswith("not carried over: cpu=lots") for n in c.notes)


def test_two_keys_for_one_name_keep_the_first_and_say_so() -> None:
    c = frq.convert(an_frq("q", "ns", {"cpu": "2", "requests.cpu": "3"}))
    assert c.quota is not None and c.quota["spec"]["hard"] == {"requests.cpu": "2"}
    assert any("requests.cpu=3" in n and "already set" in n for n in c.notes)


def test_nothing_chargeable_writes_no_quota() -> None:
    c = frq.convert(an_frq("q", "ns", {"limits.cpu": "2"}))
    assert c.quota is None
    out = frq.render([c])
    assert yaml.safe_load(out) is None  # only comments: applies as nothing
    assert "nothing in spec.overall can be charged" in out


def test_render_is_a_yaml_stream_with_notes_as_comments_within_100_columns() -> None:
    out = frq.render(
        [
            frq.convert(an_frq("a", "ns1", {"cpu": "1"}, staticAssignments=[{"clusterName": "m"}])),
            frq.convert(an_frq("b", "ns2", {"memory": "1Gi", "limits.cpu": "1"})),
        ]
    )
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs] == [
        ("ns1", "a"),
        ("ns2", "b"),
    ]
    assert docs[0]["spec"]["hard"] == {"requests.cpu": "1"}  # a string, as a quantity must be
    assert all(len(line) <= 100 for line in out.splitlines())
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert "# from FederatedResourceQuota ns1/a" in comments
    assert any("staticAssignments (m)" in line for line in comments)


def test_import_frq_lists_with_kubectl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = {"items": [an_frq("z", "b", {"cpu": "1"}), an_frq("y", "a", {"memory": "2Gi"})]}
    fake = tmp_path / "kubectl"
    log = tmp_path / "args"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {log}\ncat <<'EOF'\n{json.dumps(listed)}\nEOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(fake))
    assert kubectl_plugin.main(["import-frq", "-A", "--context", "karmada"]) == 0
    assert log.read_text().split() == [
        "--context=karmada",
        "get",
        "federatedresourcequotas.policy.karmada.io",
        "-o",
        "json",
        "-A",
    ]
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["metadata"]["namespace"] for d in docs] == ["a", "b"]  # sorted
    assert kubectl_plugin.main(["import-frq", "-n", "team-a"]) == 0
    assert log.read_text().split()[-2:] == ["-n", "team-a"]


def test_import_frq_takes_a_namespace_or_all_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        kubectl_plugin.main(["import-frq", "-n", "x", "-A"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_import_frq_reports_kubectl_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kubectl"
    msg = 'error: the server does not have a resource type "federatedresourcequotas"'
    fake.write_text(f"#!/bin/sh\necho '{msg}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(fake))
    assert kubectl_plugin.main(["import-frq"]) == 1
    assert "does not have a resource type" in capsys.readouterr().err
