"""Per-component credentials for karmada-apiserver: least privilege without a manual step.

The webhook and the controller each have a ServiceAccount on karmada-apiserver with only the
rights they use (webhook/karmada/, controller/karmada/, the chart's manifests). This module
turns those identities into what their pods mount on the host cluster: for each component a
token from karmada-apiserver's TokenRequest API (bound to the ServiceAccount, with an expiry)
in a kubeconfig, written into a host Secret. The chart's pre-install/pre-upgrade hook runs it
(`karmadaquota install apply --issue-kubeconfig ...`), before the pods that mount the Secrets
start, and a CronJob runs it again (`karmadaquota install kubeconfigs ...`) well before the
tokens expire: the Secret is updated in place, the kubelet refreshes the mounted file, and the
components load it again on their next 401 (`KubeClient.refresh_credentials`).

It also narrows the controller's read of member credentials to the Secrets the registered
Clusters name (`Cluster.spec.secretRef`) instead of every Secret of `karmada-cluster`: a Role
with `resourceNames`, applied again on every run (a member joined since is readable from the
next run on; until then its pods are not observed, admission is unaffected).

Pure: `kubeconfig`, `member_secret_rules`, `secret`. The rest is thin I/O.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import yaml

from karmadaquota.kube.client import JSON, Api, Conflict, NotFound

log = logging.getLogger("karmadaquota.credentials")

KEY = "karmada.config"  # the key the Deployments mount (their --kubeconfig)
EXPIRES_ANNOTATION = "quota.karmada.io/token-expiration"
CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters"


@dataclass(frozen=True)
class Target:
    """One component: its ServiceAccount on karmada-apiserver, the host Secret to write."""

    sa_namespace: str
    sa_name: str
    secret: str

    @classmethod
    def parse(cls, text: str) -> Target:
        """`NAMESPACE/SERVICEACCOUNT=SECRET` (the flag's form)."""
        account, sep, secret = text.partition("=")
        namespace, slash, name = account.partition("/")
        if not (sep and slash and namespace and name and secret) or "/" in name + secret:
            raise ValueError(f"{text!r}: expected NAMESPACE/SERVICEACCOUNT=SECRET")
        return cls(namespace, name, secret)


@dataclass(frozen=True)
class Server:
    """Where karmada-apiserver is and how to trust it, as the admin kubeconfig says."""

    url: str
    ca_pem: bytes | None = None
    insecure: bool = False


def kubeconfig(server: Server, user: str, token: str) -> str:
    """A kubeconfig with one cluster, one token user and one context (the CA inline: the
    Secret is all the pod mounts)."""
    cluster: dict[str, object] = {"server": server.url}
    if server.ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(server.ca_pem).decode()
    if server.insecure:
        cluster["insecure-skip-tls-verify"] = True
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "karmada-apiserver", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "karmada", "context": {"cluster": "karmada-apiserver", "user": user}}
        ],
        "current-context": "karmada",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def secret(name: str, namespace: str, config: str, expires: str, labels: dict[str, str]) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": {EXPIRES_ANNOTATION: expires},
        },
        "data": {KEY: base64.b64encode(config.encode()).decode()},
    }


def member_secret_rules(clusters: Iterable[JSON], namespace: str) -> list[JSON]:
    """`get` on exactly the Secrets the Clusters name in `namespace`; no rule at all when they
    name none (an empty `resourceNames` would grant every Secret)."""
    names = sorted(
        {
            str(ref["name"])
            for c in clusters
            if (ref := (c.get("spec") or {}).get("secretRef") or {}).get("name")
            and ref.get("namespace") == namespace
        }
    )
    if not names:
        return []
    return [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": names, "verbs": ["get"]}]


async def _put(api: Api, path: str, doc: JSON) -> JSON:
    """Create, or replace what is stored (compare-and-swap on its resourceVersion; once more
    after losing to another writer)."""
    for attempt in range(2):
        try:
            current = await api.get(path)
        except NotFound:
            collection = path.rsplit("/", 1)[0]
            return await api.request("POST", collection, doc)
        body = {**doc, "metadata": {**doc["metadata"], **_version(current)}}
        try:
            return await api.request("PUT", path, body)
        except Conflict:
            if attempt:
                raise
    raise AssertionError("unreachable")


def _version(current: JSON) -> dict[str, str]:
    return {"resourceVersion": str((current.get("metadata") or {}).get("resourceVersion", ""))}


async def issue(
    karmada: Api,
    host: Api,
    server: Server,
    targets: Sequence[Target],
    host_namespace: str,
    ttl: timedelta,
    labels: dict[str, str],
) -> None:
    """A fresh token for each target's ServiceAccount, written as a kubeconfig into its host
    Secret."""
    for t in targets:
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": int(ttl.total_seconds())},
        }
        path = f"/api/v1/namespaces/{t.sa_namespace}/serviceaccounts/{t.sa_name}/token"
        answer = await karmada.request("POST", path, request)
        status = answer.get("status") or {}
        token, expires = str(status.get("token", "")), str(status.get("expirationTimestamp", ""))
        if not token:
            raise ValueError(f"TokenRequest for {t.sa_namespace}/{t.sa_name}: no token returned")
        user = f"system:serviceaccount:{t.sa_namespace}:{t.sa_name}"
        doc = secret(t.secret, host_namespace, kubeconfig(server, user, token), expires, labels)
        await _put(host, f"/api/v1/namespaces/{host_namespace}/secrets/{t.secret}", doc)
        log.info(
            "kubeconfig issued",
            extra={
                "serviceaccount": f"{t.sa_namespace}/{t.sa_name}",
                "secret": t.secret,
                "expires": expires,
            },
        )


async def narrow_member_secrets(karmada: Api, role_namespace: str, role_name: str) -> list[str]:
    """The controller's Role on member credentials, rewritten to the Secrets the Clusters name;
    the names granted."""
    listed = await karmada.get(CLUSTERS)
    rules = member_secret_rules(listed.get("items") or [], role_namespace)
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{role_namespace}/roles/{role_name}"
    current = await karmada.get(path)  # the manifests created it (labels, owner): keep them
    await karmada.request("PUT", path, {**current, "rules": rules})
    names = [n for r in rules for n in r["resourceNames"]]
    log.info("member credentials narrowed", extra={"role": role_name, "secrets": names})
    return names
