"""Per-component kubeconfigs from TokenRequest tokens, and the member-credentials Role narrowed
to the Clusters' Secrets (karmadaquota.credentials), against the one fake API server (extended
here with karmada-apiserver's TokenRequest subresource)."""

from __future__ import annotations

import argparse
import base64
from datetime import timedelta
from typing import Any

import pytest
import yaml

from karmadaquota import credentials
from karmadaquota.cli import _parser
from karmadaquota.kube.client import JSON, Body, NotFound
from tests.fake_api import FakeApiServer, Ref

SA_NS = "karmada-system"
HOST_NS = "karmada-system"
ROLE = "/apis/rbac.authorization.k8s.io/v1/namespaces/karmada-cluster/roles/kq-cluster-secrets"


class TokenIssuer(FakeApiServer):
    """karmada-apiserver's TokenRequest: a new token per request, for an existing account."""

    def __init__(self) -> None:
        super().__init__()
        self.issued: list[tuple[str, int]] = []

    def handle(
        self, method: str, ref: Ref, body: Body | None, params: Any, content_type: str
    ) -> JSON:
        if method == "POST" and ref.plural == "serviceaccounts" and ref.sub == "token":
            path = f"/api/v1/namespaces/{ref.namespace}/serviceaccounts/{ref.name}"
            self.get_object(path)  # NotFound for an unknown account
            assert isinstance(body, dict)
            ttl = int(body["spec"]["expirationSeconds"])
            self.issued.append((ref.name, ttl))
            return {
                "status": {
                    "token": f"token-{ref.name}-{len(self.issued)}",
                    "expirationTimestamp": "2026-12-02T00:00:00Z",
                }
            }
        return super().handle(method, ref, body, params, content_type)


def accounts(api: FakeApiServer) -> None:
    api.create("/api/v1/namespaces/karmada-system", {"metadata": {"name": SA_NS}})
    for name in ("kq-webhook", "kq-controller"):
        api.create(
            f"/api/v1/namespaces/{SA_NS}/serviceaccounts/{name}",
            {"metadata": {"name": name, "namespace": SA_NS}},
        )


SERVER = credentials.Server("https://karmada.example:5443", b"-----BEGIN CERTIFICATE-----\n")
TARGETS = [
    credentials.Target(SA_NS, "kq-webhook", "kq-webhook-karmada"),
    credentials.Target(SA_NS, "kq-controller", "kq-controller-karmada"),
]


def stored_config(host: FakeApiServer, name: str) -> dict[str, Any]:
    secret = host.get_object(f"/api/v1/namespaces/{HOST_NS}/secrets/{name}")
    return dict(yaml.safe_load(base64.b64decode(secret["data"][credentials.KEY])))


async def test_each_component_gets_a_kubeconfig_with_its_own_token() -> None:
    karmada, host = TokenIssuer(), FakeApiServer()
    accounts(karmada)
    host.create("/api/v1/namespaces/karmada-system", {"metadata": {"name": HOST_NS}})
    await credentials.issue(karmada, host, SERVER, TARGETS, HOST_NS, timedelta(days=7), {})
    assert karmada.issued == [("kq-webhook", 604800), ("kq-controller", 604800)]
    for target, token in zip(TARGETS, ("token-kq-webhook-1", "token-kq-controller-2"), strict=True):
        config = stored_config(host, target.secret)
        (user,) = config["users"]
        assert user == {
            "name": f"system:serviceaccount:{SA_NS}:{target.sa_name}",
            "user": {"token": token},
        }
        (cluster,) = config["clusters"]
        assert cluster["cluster"]["server"] == SERVER.url
        assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == SERVER.ca_pem
        secret = host.get_object(f"/api/v1/namespaces/{HOST_NS}/secrets/{target.secret}")
        assert secret["metadata"]["annotations"] == {
            credentials.EXPIRES_ANNOTATION: "2026-12-02T00:00:00Z"
        }


async def test_a_second_run_rotates_the_tokens_in_place() -> None:
    """The rotation: the same Secrets (updated, not recreated: the pods' mounts follow them)."""
    karmada, host = TokenIssuer(), FakeApiServer()
    accounts(karmada)
    host.create("/api/v1/namespaces/karmada-system", {"metadata": {"name": HOST_NS}})
    await credentials.issue(karmada, host, SERVER, TARGETS, HOST_NS, timedelta(hours=1), {})
    first = host.get_object(f"/api/v1/namespaces/{HOST_NS}/secrets/kq-webhook-karmada")
    await credentials.issue(karmada, host, SERVER, TARGETS, HOST_NS, timedelta(hours=1), {})
    second = host.get_object(f"/api/v1/namespaces/{HOST_NS}/secrets/kq-webhook-karmada")
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert stored_config(host, "kq-webhook-karmada")["users"][0]["user"]["token"] == (
        "token-kq-webhook-3"
    )


async def test_an_unknown_service_account_is_an_error_and_writes_nothing() -> None:
    karmada, host = TokenIssuer(), FakeApiServer()
    host.create("/api/v1/namespaces/karmada-system", {"metadata": {"name": HOST_NS}})
    with pytest.raises(NotFound):
        await credentials.issue(karmada, host, SERVER, TARGETS, HOST_NS, timedelta(hours=1), {})
    assert host.writes == []


def test_member_secret_rules_name_only_the_clusters_secrets() -> None:
    clusters = [
        {"spec": {"secretRef": {"namespace": "karmada-cluster", "name": "member2"}}},
        {"spec": {"secretRef": {"namespace": "karmada-cluster", "name": "member1"}}},
        {"spec": {"secretRef": {"namespace": "elsewhere", "name": "member3"}}},
        {"spec": {}},  # a Pull-mode cluster: no secret
    ]
    assert credentials.member_secret_rules(clusters, "karmada-cluster") == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["member1", "member2"],
            "verbs": ["get"],
        }
    ]
    # none named: no rule (an empty resourceNames would grant every Secret)
    assert credentials.member_secret_rules([{"spec": {}}], "karmada-cluster") == []


async def test_the_member_credentials_role_is_narrowed_and_keeps_its_metadata() -> None:
    karmada = TokenIssuer()
    labels = {"app.kubernetes.io/part-of": "karmadaquota"}
    karmada.create(
        ROLE,
        {
            "metadata": {
                "name": "kq-cluster-secrets",
                "namespace": "karmada-cluster",
                "labels": labels,
            },
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
        },
    )
    for name in ("member1", "member2"):
        karmada.create(
            f"{credentials.CLUSTERS}/{name}",
            {
                "metadata": {"name": name},
                "spec": {"secretRef": {"namespace": "karmada-cluster", "name": name}},
            },
        )
    names = await credentials.narrow_member_secrets(
        karmada, "karmada-cluster", "kq-cluster-secrets"
    )
    assert names == ["member1", "member2"]
    role = karmada.get_object(ROLE)
    assert role["metadata"]["labels"] == labels
    assert role["rules"][0]["resourceNames"] == ["member1", "member2"]


@pytest.mark.parametrize("bad", ["kq-webhook=s", "ns/kq-webhook", "ns/=s", "ns/a/b=s", "ns/a=b/c"])
def test_a_malformed_target_is_refused_when_parsing(bad: str) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(
            ["install", "kubeconfigs", f"--issue-kubeconfig={bad}", "--kubeconfig=/k"]
        )


def test_the_kubeconfigs_action_parses_the_charts_arguments() -> None:
    args = _parser().parse_args(
        [
            "install",
            "kubeconfigs",
            "--kubeconfig=/etc/karmada/config/karmada.config",
            "--issue-kubeconfig=karmada-system/kq-webhook=kq-webhook-karmada",
            "--token-ttl=24h",
            "--member-secrets-role=karmada-cluster/kq-cluster-secrets",
        ]
    )
    assert isinstance(args, argparse.Namespace)
    assert args.issue_kubeconfig == [TARGETS[0]]
    assert args.token_ttl == timedelta(hours=24)
