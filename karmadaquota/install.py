"""`karmadaquota install apply|delete`: karmadaquota's objects on karmada-apiserver.

The Helm chart (charts/karmadaquota) runs its workloads on the cluster that hosts Karmada, and
its hook Jobs run this command with a kubeconfig for karmada-apiserver to put the rest there:
the KarmadaQuota CRD, the components' ServiceAccounts, token Secrets and RBAC, and the
webhook registrations (the MutatingWebhookConfiguration that queues, then the
ValidatingWebhookConfiguration that charges).

`apply` is server-side apply (field manager `karmadaquota-install`, conflicts forced: the chart
owns these objects) in an order that never refuses a workload for nothing: the CRD first, then
wait until it is Established (the webhook and the controller cannot sync without it), then the
identities and their rights, then — optionally once the webhook answers ready through its
Service — the webhook registration, whose `caBundle` is filled from `--ca-bundle-file`.

With `--issue-kubeconfig`, `apply` then gives each component its own kubeconfig on the host
(`karmadaquota.credentials`: TokenRequest tokens of their ServiceAccounts, written into host
Secrets) and, with `--member-secrets-role`, narrows the controller's read of member
credentials to the Clusters' Secrets; `kubeconfigs` does only that (the chart's rotation
CronJob).

`delete` goes the other way and removes the registration first: it is fail-closed, so a
registration left behind without a webhook refuses every ResourceBinding. The CRD stays unless
`--delete-crd` (deleting it deletes every KarmadaQuota). Namespaces are never deleted.

Why hand-written: a small, fixed set of kinds whose REST paths are known, and the image has no
kubectl. kubernetes_asyncio's dynamic client would need API discovery per kind for no gain;
the project's own `KubeClient` already does JSON over HTTPS with the kubeconfig's credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import ssl
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from karmadaquota import credentials
from karmadaquota.api import ON_EXCEED_QUEUE
from karmadaquota.durations import duration
from karmadaquota.kube import namespaces
from karmadaquota.kube.client import APPLY_PATCH, JSON, MERGE_PATCH, Api, KubeError, NotFound
from karmadaquota.times import parse_time

log = logging.getLogger("karmadaquota.install")

FIELD_MANAGER = "karmadaquota-install"


class InstallError(Exception):
    """What went wrong, naming the object (and its file) and quoting the API server."""


@dataclass(frozen=True)
class Kind:
    """Where objects of one kind live in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, name: str, namespace: str | None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced:
            base += f"/namespaces/{namespace}"
        return f"{base}/{self.plural}/{name}"


_WEBHOOKS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
_ADMISSION = "admissionregistration.k8s.io/v1"
_RBAC = "rbac.authorization.k8s.io/v1"

# In apply order; delete goes through them backwards, but the registrations first.
KINDS: tuple[Kind, ...] = (
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    Kind("v1", "Namespace", "namespaces", False),
    Kind("v1", "ServiceAccount", "serviceaccounts", True),
    Kind("v1", "Secret", "secrets", True),
    Kind(_RBAC, "ClusterRole", "clusterroles", False),
    Kind(_RBAC, "ClusterRoleBinding", "clusterrolebindings", False),
    Kind(_RBAC, "Role", "roles", True),
    Kind(_RBAC, "RoleBinding", "rolebindings", True),
    # the fail-closed validating registration last on apply, first on delete; the mutating one
    # (queueing, failurePolicy Ignore) just before it
    Kind(_ADMISSION, "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False),
    Kind(_ADMISSION, "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False),
)
_BY_KIND = {(k.api_version, k.kind): k for k in KINDS}
_RANK = {k.kind: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True)
class Obj:
    """One manifest, where it came from and where it goes."""

    doc: JSON
    kind: Kind
    source: str

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.doc["metadata"].get("namespace")
        return str(ns) if ns else None

    @property
    def path(self) -> str:
        return self.kind.path(self.name, self.namespace)

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind.kind} {where}"


def _check(doc: Any, source: str) -> Obj:
    if not isinstance(doc, dict):
        raise InstallError(f"{source}: a manifest must be a mapping, not {type(doc).__name__}")
    api_version, kind_name = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name")
    kind = _BY_KIND.get((str(api_version), str(kind_name)))
    if kind is None:
        supported = ", ".join(f"{k.api_version} {k.kind}" for k in KINDS)
        raise InstallError(
            f"{source}: {api_version} {kind_name} {name or ''} is not a kind install handles "
            f"(it handles {supported})"
        )
    if not name:
        raise InstallError(f"{source}: {kind_name} without metadata.name")
    obj = Obj(doc, kind, source)
    if kind.namespaced and not obj.namespace:
        raise InstallError(f"{source}: {kind_name} {name} has no metadata.namespace")
    if not kind.namespaced and obj.namespace:
        raise InstallError(f"{source}: {kind_name} {name} is cluster-scoped but has a namespace")
    return obj


def load_manifests(directory: Path) -> list[Obj]:
    """Every object of the *.yaml, *.yml and *.json files of `directory` (not recursive, hidden
    entries skipped: a mounted ConfigMap keeps its data in `..data/` behind symlinks)."""
    if not directory.is_dir():
        raise InstallError(f"--manifests {directory}: not a directory")
    objs: list[Obj] = []
    for f in sorted(directory.iterdir()):
        if f.name.startswith(".") or f.suffix not in (".yaml", ".yml", ".json"):
            continue
        try:
            docs = list(yaml.safe_load_all(f.read_text()))
        except (OSError, yaml.YAMLError) as e:
            raise InstallError(f"{f}: {e}") from None
        objs.extend(_check(doc, f.name) for doc in docs if doc is not None)
    if not objs:
        raise InstallError(f"--manifests {directory}: no manifests found")
    return objs


def apply_order(objs: Iterable[Obj]) -> list[Obj]:
    return sorted(objs, key=lambda o: _RANK[o.kind.kind])


def delete_order(objs: Iterable[Obj]) -> list[Obj]:
    """Registrations first (fail-closed: never leave one without its webhook), then the rest
    in reverse apply order."""
    return sorted(
        objs,
        key=lambda o: (o.kind.kind not in _WEBHOOKS, -_RANK[o.kind.kind]),
    )


def with_ca_bundle(doc: JSON, ca_pem: bytes) -> JSON:
    """A copy of a webhook configuration with every webhook's clientConfig.caBundle set."""
    out = dict(doc)
    bundle = base64.b64encode(ca_pem).decode()
    out["webhooks"] = [
        {**w, "clientConfig": {**(w.get("clientConfig") or {}), "caBundle": bundle}}
        for w in doc.get("webhooks") or []
    ]
    return out


def _established(crd: JSON) -> bool:
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


async def _call(api: Api, what: str, method: str, path: str, **kw: Any) -> JSON:
    """One request; an API error or an unreachable server becomes an InstallError saying
    what was being done (NotFound passes through: delete tolerates it)."""
    try:
        return await api.request(method, path, **kw)
    except NotFound:
        raise
    except KubeError as e:
        raise InstallError(f"{what}: {e}") from None
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise InstallError(
            f"{what}: karmada-apiserver unreachable: {type(e).__name__}: {e}"
        ) from None


async def _server_apply(api: Api, obj: Obj, doc: JSON) -> JSON:
    what = f"apply {obj} (from {obj.source})"
    try:
        return await _call(
            api,
            what,
            "PATCH",
            obj.path,
            body=doc,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type=APPLY_PATCH,
        )
    except NotFound as e:  # e.g. the namespace does not exist on karmada-apiserver
        raise InstallError(f"{what}: {e}") from None


async def wait_established(api: Api, obj: Obj, timeout: float, interval: float = 0.5) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            last = await _call(api, f"read {obj}", "GET", obj.path)
        except NotFound as e:
            raise InstallError(f"read {obj}: {e}") from None
        if _established(last):
            return
        if loop.time() >= deadline:
            conditions = (last.get("status") or {}).get("conditions") or []
            raise InstallError(
                f"{obj} is not Established after {timeout:g}s; conditions: {conditions}"
            )
        await asyncio.sleep(interval)


async def wait_ready(url: str, ca_file: str | None, timeout: float, interval: float = 1.0) -> None:
    """Until `url` answers 200 (the webhook's /readyz through its Service: a ready pod)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = "no answer"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        while True:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        return
                    last = f"{resp.status} {(await resp.text()).strip()}"
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                last = f"{type(e).__name__}: {e}"
            if loop.time() >= deadline:
                raise InstallError(
                    f"the webhook is not ready at {url} after {timeout:g}s ({last}); "
                    "not registering it (it is fail-closed)"
                )
            await asyncio.sleep(interval)


async def label_quota_namespaces(api: Api) -> None:
    """Label every namespace that holds a KarmadaQuota for enforcement before the registration
    is applied: the ResourceBinding webhook's namespaceSelector matches only labelled
    namespaces, and quotas created before the label existed (an upgrade) have none yet."""
    what = "list KarmadaQuotas (to label their namespaces for enforcement)"
    try:
        listed = await _call(api, what, "GET", "/apis/quota.karmada.io/v1alpha1/karmadaquotas")
    except NotFound:  # the CRD is applied above; a server that lost it has nothing to label
        return
    queueing: dict[str, bool] = {}  # namespace -> one of its quotas says onExceed: Queue
    for q in listed.get("items", []):
        ns = str((q.get("metadata") or {}).get("namespace", ""))
        says_queue = (q.get("spec") or {}).get("onExceed") == ON_EXCEED_QUEUE
        queueing[ns] = queueing.get(ns, False) or says_queue
    for ns in sorted(filter(None, queueing)):
        labels = namespaces.labels(queueing[ns])
        await _call(
            api,
            f"label namespace {ns} " + ",".join(f"{k}={v}" for k, v in labels.items()),
            "PATCH",
            namespaces.path(ns),
            body={"metadata": {"labels": labels}},
            content_type=MERGE_PATCH,
        )
        log.info(
            "namespace labelled for enforcement",
            extra={"namespace": ns, "queueing": queueing[ns]},
        )


async def apply(
    api: Api,
    objs: Sequence[Obj],
    ca_pem: bytes | None = None,
    timeout: float = 120.0,
    wait_webhook_url: str | None = None,
    ca_file: str | None = None,
    poll: float = 0.5,
) -> None:
    """Server-side apply `objs` in kind order (module docstring); `timeout` bounds each wait,
    `poll` is the interval between the checks."""
    ordered = apply_order(objs)
    crds = [o for o in ordered if o.kind.kind == "CustomResourceDefinition"]
    for obj in crds:
        await _server_apply(api, obj, obj.doc)
        log.info("applied", extra={"object": str(obj)})
    for obj in crds:
        await wait_established(api, obj, timeout, poll)
        log.info("established", extra={"object": str(obj)})
    waited = labelled = False
    for obj in ordered:
        if obj.kind.kind == "CustomResourceDefinition":
            continue
        doc = obj.doc
        if obj.kind.kind in _WEBHOOKS:
            if ca_pem is not None:
                doc = with_ca_bundle(doc, ca_pem)
            if wait_webhook_url and not waited:
                await wait_ready(wait_webhook_url, ca_file, timeout, poll)
                log.info("webhook ready", extra={"url": wait_webhook_url})
                waited = True
            if not labelled:
                await label_quota_namespaces(api)
                labelled = True
        await _server_apply(api, obj, doc)
        log.info("applied", extra={"object": str(obj)})


async def delete(api: Api, objs: Sequence[Obj], delete_crd: bool = False) -> None:
    for obj in delete_order(objs):
        if obj.kind.kind == "Namespace":
            continue
        if obj.kind.kind == "CustomResourceDefinition" and not delete_crd:
            log.info("kept", extra={"object": str(obj)})
            continue
        try:
            await _call(api, f"delete {obj}", "DELETE", obj.path)
        except NotFound:
            log.info("already gone", extra={"object": str(obj)})
            continue
        log.info("deleted", extra={"object": str(obj)})


def _lease_free(lease: JSON, now: float) -> bool:
    """Nobody holds the Lease: released (holder cleared) or not renewed within its duration."""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return True
    renewed = parse_time(str(spec.get("renewTime") or ""))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    return renewed is None or renewed.timestamp() + duration < now


async def delete_lease(
    api: Api, namespace: str, name: str, timeout: float, interval: float = 1.0
) -> None:
    """Delete the controller's leader Lease once no controller holds it (the Deployment's pods
    release it as they stop, after `helm uninstall` deleted them), with a precondition on the
    version seen free, so a holder that renewed meanwhile keeps it and we look again."""
    from karmadaquota.controller.leader import lease_path

    path = lease_path(namespace, name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            lease = await _call(api, f"get Lease {namespace}/{name}", "GET", path)
        except NotFound:
            log.info("already gone", extra={"object": f"Lease {namespace}/{name}"})
            return
        if _lease_free(lease, time.time()):
            rv = (lease.get("metadata") or {}).get("resourceVersion", "")
            body = {"preconditions": {"resourceVersion": rv}}
            try:
                await _call(api, f"delete Lease {namespace}/{name}", "DELETE", path, body=body)
            except NotFound:
                return
            except InstallError as e:
                if "409" not in str(e):  # renewed since we read it: look again
                    raise
            else:
                log.info("deleted", extra={"object": f"Lease {namespace}/{name}"})
                return
        if loop.time() >= deadline:
            holder = (lease.get("spec") or {}).get("holderIdentity")
            raise InstallError(f"Lease {namespace}/{name} still held by {holder!r}")
        await asyncio.sleep(interval)


def _namespaced(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAMESPACE/NAME")
    return text


def _target(text: str) -> credentials.Target:
    try:
        return credentials.Target.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub: Any) -> None:
    """`install apply|delete|delete-lease|kubeconfigs` under the `karmadaquota` parser's
    subcommands."""
    i = sub.add_parser("install", help="apply or delete karmadaquota's karmada-apiserver objects")
    actions = i.add_subparsers(dest="action", required=True)
    a = actions.add_parser("apply", help="server-side apply: CRD, identities, RBAC, registration")
    d = actions.add_parser("delete", help="delete them, the webhook registration first")
    lease = actions.add_parser(
        "delete-lease",
        help="delete the controller's leader Lease once no controller holds it (after the "
        "workloads are gone: the chart's post-delete hook)",
    )
    k = actions.add_parser(
        "kubeconfigs",
        help="issue the components' kubeconfigs again (fresh tokens) and narrow the member "
        "credentials they may read (the chart's rotation CronJob)",
    )
    for p in (a, d, lease, k):
        p.add_argument("--kubeconfig", help="karmada-apiserver kubeconfig (default: in-cluster)")
        p.add_argument("--timeout", type=duration, default=duration("2m"))
    for p in (a, d):
        p.add_argument("--manifests", required=True, type=Path, help="directory of manifests")
    for p in (a, k):
        p.add_argument(
            "--issue-kubeconfig",
            action="append",
            default=[],
            type=_target,
            metavar="NAMESPACE/SERVICEACCOUNT=SECRET",
            help="write a kubeconfig with a fresh token of that ServiceAccount on "
            "karmada-apiserver into that Secret on the host (repeatable)",
        )
        p.add_argument(
            "--token-ttl",
            type=duration,
            default=duration("168h"),
            help="lifetime asked of each token (karmada-apiserver may shorten it)",
        )
        p.add_argument(
            "--host-kubeconfig",
            help="the cluster the Secrets go to (default: in-cluster, the pod's own)",
        )
        p.add_argument(
            "--host-namespace",
            help="namespace of the Secrets (default: the pod's own namespace)",
        )
        p.add_argument(
            "--member-secrets-role",
            type=_namespaced,
            metavar="NAMESPACE/NAME",
            help="rewrite this Role on karmada-apiserver to `get` only the Secrets the Clusters "
            "name (Cluster.spec.secretRef)",
        )
    lease.add_argument("--lease", required=True, type=_namespaced, help="NAMESPACE/NAME")
    a.add_argument("--ca-bundle-file", help="PEM CA to set as every webhook's caBundle")
    a.add_argument(
        "--wait-webhook-url",
        help="register the webhook only once this URL answers 200 (e.g. its Service's /readyz), "
        "checked against --ca-bundle-file",
    )
    d.add_argument(
        "--delete-crd",
        action="store_true",
        help="also delete the CRD, and with it every KarmadaQuota",
    )
    d.add_argument(
        "--host-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="also delete this Secret of the pod's own namespace on the host (the kubeconfigs "
        "`--issue-kubeconfig` wrote; repeatable)",
    )


def _read_ca(path: str) -> bytes:
    try:
        ca_pem = Path(path).read_bytes()
    except OSError as e:
        raise InstallError(f"--ca-bundle-file: {e}") from None
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise InstallError(f"--ca-bundle-file {path}: no PEM certificate in it")
    return ca_pem


SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    try:
        return SA_NAMESPACE_FILE.read_text().strip()
    except OSError as e:
        raise InstallError(f"--host-namespace not given and not in a pod ({e})") from None


async def _credentials(args: argparse.Namespace, karmada: Any) -> None:
    """--issue-kubeconfig and --member-secrets-role, with the host client they need."""
    from karmadaquota.kube.client import KubeClient, user_agent

    if args.member_secrets_role:
        namespace, _, name = args.member_secrets_role.partition("/")
        await credentials.narrow_member_secrets(karmada, namespace, name)
    if not args.issue_kubeconfig:
        return
    host_namespace = args.host_namespace or await asyncio.to_thread(_own_namespace)
    creds = karmada.credentials
    ca = await asyncio.to_thread(Path(creds.ca_path).read_bytes) if creds.ca_path else None
    server = credentials.Server(creds.host, ca, creds.insecure)
    try:
        host = await KubeClient.connect(args.host_kubeconfig, user_agent=user_agent("install"))
    except Exception as e:  # no in-cluster credentials, a malformed kubeconfig
        raise InstallError(f"the host cluster: {type(e).__name__}: {e}") from None
    labels = {
        "app.kubernetes.io/part-of": "karmadaquota",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }
    try:
        await credentials.issue(
            karmada, host, server, args.issue_kubeconfig, host_namespace, args.token_ttl, labels
        )
    except KubeError as e:
        raise InstallError(f"issue kubeconfigs: {e}") from None
    finally:
        await host.close()


async def _delete_host_secrets(names: Sequence[str]) -> None:
    """The issued kubeconfigs, from the pod's own namespace (they are no Helm object: the hook
    wrote them)."""
    from karmadaquota.kube.client import KubeClient, user_agent

    namespace = await asyncio.to_thread(_own_namespace)
    host = await KubeClient.connect(None, user_agent=user_agent("install"))
    try:
        for name in names:
            try:
                await _call(
                    host,
                    f"delete host Secret {namespace}/{name}",
                    "DELETE",
                    f"/api/v1/namespaces/{namespace}/secrets/{name}",
                )
            except NotFound:
                log.info("already gone", extra={"object": f"Secret {namespace}/{name}"})
                continue
            log.info("deleted", extra={"object": f"Secret {namespace}/{name}"})
    finally:
        await host.close()


async def _run(args: argparse.Namespace, objs: Sequence[Obj], ca_pem: bytes | None) -> None:
    from karmadaquota.kube.client import KubeClient, user_agent

    try:
        client = await KubeClient.connect(args.kubeconfig, user_agent=user_agent("install"))
    except Exception as e:  # a missing file, a malformed kubeconfig, no credentials in it
        raise InstallError(f"--kubeconfig {args.kubeconfig}: {type(e).__name__}: {e}") from None
    try:
        if args.action == "apply":
            await apply(
                client,
                objs,
                ca_pem,
                args.timeout.total_seconds(),
                wait_webhook_url=args.wait_webhook_url,
                ca_file=args.ca_bundle_file,
            )
            await _credentials(args, client)
        elif args.action == "kubeconfigs":
            await _credentials(args, client)
        elif args.action == "delete":
            await delete(client, objs, delete_crd=args.delete_crd)
            if args.host_secret:
                await _delete_host_secrets(args.host_secret)
        else:
            namespace, _, name = args.lease.partition("/")
            await delete_lease(client, namespace, name, args.timeout.total_seconds())
    finally:
        await client.close()


def main(args: argparse.Namespace) -> int:
    """`karmadaquota install apply|delete|delete-lease`: 0, or 1 with one line on stderr saying
    why."""
    try:
        objs = load_manifests(args.manifests) if args.action in ("apply", "delete") else []
        ca_pem = None
        if args.action == "apply" and args.ca_bundle_file:
            ca_pem = _read_ca(args.ca_bundle_file)
        asyncio.run(_run(args, objs, ca_pem))
    except InstallError as e:
        print(f"karmadaquota install {args.action}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0
