"""`karmadaquota install apply|delete` against the fake API server served over HTTP
(tests/fake_api.py `HttpFront`: the command's own KubeClient and kubeconfig).

The apiextensions controller is played by `Apiextensions`: it accepts a CRD's names at once and
marks it Established only after a few reads (so waiting is observable). The webhook's /readyz
is served beside it and may answer 503 a few times. The manifests are the kustomize path's own
(api/, webhook/karmada/, controller/karmada/); tests/delivery/test_chart.py checks the
chart's render the same.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from karmadaquota import cli, install
from karmadaquota.kube.client import MERGE_PATCH, KubeClient, KubeError
from tests.fake_api import FakeApiServer, HttpFront, Ref, parse

REPO = Path(__file__).resolve().parents[2]
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/karmadaquotas.quota.karmada.io"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/karmadaquota"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/karmadaquota"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
NAMESPACES = ("karmada-system", "karmada-cluster")  # where the manifests' objects live


@dataclass
class Apiextensions:
    """The apiextensions controller: a CRD's names are accepted at once; it is Established
    once it has been read `established_after` times."""

    api: FakeApiServer
    established_after: int = 2
    reads: int = 0

    def __call__(self, verb: str, ref: Ref, params: Mapping[str, str]) -> None:
        if verb != "GET" or ref.plural != "customresourcedefinitions":
            return
        self.reads += 1
        kind = "Established" if self.reads > self.established_after else "NamesAccepted"
        conditions = [{"type": kind, "status": "True"}]
        self.api.update(CRD, lambda o: o.update(status={"conditions": conditions}))


@dataclass
class Karmada:
    """karmada-apiserver (the fake API server over HTTP) and the webhook's /readyz beside it."""

    api: FakeApiServer
    front: HttpFront
    crds: Apiextensions
    ready_after: int = 0  # /readyz answers 503 this many times first
    readyz_calls: int = 0

    async def readyz(self, request: web.Request) -> web.Response:
        self.front.requests.append(request)
        self.readyz_calls += 1
        if self.readyz_calls <= self.ready_after:
            return web.Response(status=503, text="quota cache not synced\n")
        return web.Response(text="ok")

    @property
    def log(self) -> list[tuple[str, str]]:
        return self.front.log

    def applied(self) -> list[str]:
        return [p for m, p in self.log if m == "PATCH"]

    def stored(self) -> set[str]:
        """The path of every object held, but the namespaces the test made."""
        return {
            f"{group}{'/namespaces/' + ns if ns else ''}/{plural}/{name}"
            for (group, plural), objects in self.api.store.items()
            for ns, name in objects
            if not (plural == "namespaces" and name in NAMESPACES)
        }

    def put(self, path: str, doc: dict[str, Any]) -> None:
        """Another client writes `doc` at `path` (creating it, or replacing its spec)."""
        ref = parse(path)
        doc = {**doc, "metadata": {**doc.get("metadata", {}), "name": ref.name}}
        if ref.key in self.api.objects(ref.kind):
            self.api.update(path, lambda o: o.update(spec=doc.get("spec")))
        else:
            self.api.create(path.rsplit("/", 1)[0], doc)


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """The kustomize path's karmada-apiserver objects, one directory like the chart's ConfigMap
    (with the `..data` entry a mounted ConfigMap has, which must be skipped)."""
    out = tmp_path / "manifests"
    out.mkdir()
    shutil.copy(REPO / "api/crds/quota.karmada.io_karmadaquotas.yaml", out / "crd.yaml")
    for component in ("webhook", "controller"):
        for f in (REPO / component / "karmada").glob("*.yaml"):
            if f.name != "kustomization.yaml":
                shutil.copy(f, out / f"{component}-{f.name}")
    (out / "..data").mkdir()
    (out / "..data" / "junk.yaml").write_text("kind: Nonsense\n")
    return out


@pytest.fixture
async def fake() -> AsyncIterator[tuple[Karmada, KubeClient, str]]:
    api = FakeApiServer()
    for ns in NAMESPACES:
        api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    crds = Apiextensions(api)
    api.before_read = crds
    karmada = Karmada(api, HttpFront(api), crds)
    server = TestServer(karmada.front.app(web.get("/readyz", karmada.readyz)))
    await server.start_server()
    base = str(server.make_url("")).rstrip("/")
    client = KubeClient(base, ssl.create_default_context(), {})
    try:
        yield karmada, client, base
    finally:
        await client.close()
        await server.close()


# ---- apply ---------------------------------------------------------------------------------


async def test_apply_puts_the_crd_first_waits_established_and_registers_last(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    objs = install.load_manifests(manifests)
    await install.apply(client, objs, CA_PEM, timeout=10, poll=0.01)

    assert api.log[0] == ("PATCH", CRD)
    # read until Established, and only then anything else
    first_other = next(i for i, (_, p) in enumerate(api.log) if p != CRD)
    assert api.log[1:first_other] == [("GET", CRD)] * (api.crds.established_after + 1)
    assert api.applied()[-1] == VWC
    assert len(api.applied()) == len(objs)
    # ServiceAccounts before their token Secrets, ClusterRoles before their bindings
    order = api.applied()
    sa = order.index("/api/v1/namespaces/karmada-system/serviceaccounts/karmadaquota-webhook")
    token = order.index("/api/v1/namespaces/karmada-system/secrets/karmadaquota-webhook-token")
    assert sa < token
    cr = order.index("/apis/rbac.authorization.k8s.io/v1/clusterroles/karmadaquota-controller")
    crb = order.index(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/karmadaquota-controller"
    )
    assert cr < crb
    assert (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/karmada-cluster/roles/"
        "karmadaquota-controller-cluster-secrets"
    ) in order


async def test_apply_is_server_side_apply_with_our_field_manager(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    await install.apply(client, install.load_manifests(manifests), CA_PEM, timeout=10, poll=0.01)
    patches = [r for r in api.front.requests if r.method == "PATCH"]
    assert patches
    for r in patches:
        assert r.headers["Content-Type"] == "application/apply-patch+yaml"
        assert dict(r.query) == {"fieldManager": "karmadaquota-install", "force": "true"}


async def test_apply_fills_every_webhooks_ca_bundle(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    await install.apply(client, install.load_manifests(manifests), CA_PEM, timeout=10, poll=0.01)
    webhooks = api.front.bodies[VWC]["webhooks"]
    assert len(webhooks) == 4  # bindings, quotas, overridepolicies, templates
    for w in webhooks:
        assert base64.b64decode(w["clientConfig"]["caBundle"]) == CA_PEM
        assert w["clientConfig"]["url"].startswith("https://karmadaquota-webhook.")
    (queue,) = api.front.bodies[MWC]["webhooks"]
    assert base64.b64decode(queue["clientConfig"]["caBundle"]) == CA_PEM
    assert queue["clientConfig"]["url"].endswith("/mutate-resourcebinding")
    # the manifest on disk is not touched
    on_disk = yaml.safe_load(
        (manifests / "webhook-validatingwebhookconfiguration.yaml").read_text()
    )
    assert on_disk["webhooks"][0]["clientConfig"]["caBundle"] == ""


async def test_a_crd_that_never_becomes_established_stops_before_anything_else(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    api.crds.established_after = 10**6
    with pytest.raises(install.InstallError) as e:
        await install.apply(
            client, install.load_manifests(manifests), CA_PEM, timeout=0.3, poll=0.01
        )
    assert "CustomResourceDefinition karmadaquotas.quota.karmada.io is not Established" in str(
        e.value
    )
    assert "NamesAccepted" in str(e.value)
    assert api.applied() == [CRD]


async def test_the_registration_waits_for_a_ready_webhook(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, base = fake
    api.ready_after = 2
    await install.apply(
        client,
        install.load_manifests(manifests),
        CA_PEM,
        timeout=10,
        poll=0.01,
        wait_webhook_url=f"{base}/readyz",
    )
    assert api.readyz_calls == 3
    ready = api.log.index(("GET", "/readyz"), 0)
    last_ready = len(api.log) - 1 - api.log[::-1].index(("GET", "/readyz"))
    # everything but the registrations is in place before the webhook is asked; they come after
    assert api.applied()[-2:] == [MWC, VWC]
    assert set(api.applied()[:-2]) <= {p for m, p in api.log[:ready] if m == "PATCH"}
    assert api.log.index(("PATCH", MWC)) > last_ready
    assert api.log.index(("PATCH", VWC)) > last_ready


async def test_a_webhook_that_never_gets_ready_is_not_registered(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, base = fake
    api.ready_after = 10**6
    api.crds.established_after = 0
    with pytest.raises(install.InstallError) as e:
        await install.apply(
            client,
            install.load_manifests(manifests),
            CA_PEM,
            timeout=0.5,
            poll=0.01,
            wait_webhook_url=f"{base}/readyz",
        )
    assert f"the webhook is not ready at {base}/readyz" in str(e.value)
    assert "503 quota cache not synced" in str(e.value)
    assert VWC not in api.applied()


async def test_an_api_error_names_the_object_its_file_and_the_servers_words(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/karmadaquota-webhook"
    message = 'clusterroles "karmadaquota-webhook" is forbidden: user cannot escalate'
    api.api.refuse[path] = KubeError(403, "Forbidden", message)
    with pytest.raises(install.InstallError) as e:
        await install.apply(
            client, install.load_manifests(manifests), CA_PEM, timeout=10, poll=0.01
        )
    assert str(e.value) == (
        f"apply ClusterRole karmadaquota-webhook (from webhook-rbac.yaml): 403 Forbidden: {message}"
    )
    assert VWC not in api.applied()


async def test_an_unreachable_server_is_said_so() -> None:
    client = KubeClient("http://127.0.0.1:9", ssl.create_default_context(), {})
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    try:
        with pytest.raises(install.InstallError, match=r"apply Namespace x .*unreachable"):
            await install.apply(client, [install._check(doc, "t.yaml")], timeout=1)
    finally:
        await client.close()


# ---- delete --------------------------------------------------------------------------------


async def test_delete_removes_the_registration_first_and_keeps_the_crd(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    objs = install.load_manifests(manifests)
    await install.apply(client, objs, CA_PEM, timeout=10, poll=0.01)
    api.log.clear()
    await install.delete(client, objs)
    deletes = [p for m, p in api.log if m == "DELETE"]
    assert deletes[0] == VWC
    assert CRD not in deletes
    assert api.stored() == {CRD}
    # token Secrets before their ServiceAccounts, bindings before their roles
    sa = deletes.index("/api/v1/namespaces/karmada-system/serviceaccounts/karmadaquota-webhook")
    token = deletes.index("/api/v1/namespaces/karmada-system/secrets/karmadaquota-webhook-token")
    assert token < sa
    crb = deletes.index(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/karmadaquota-webhook"
    )
    cr = deletes.index("/apis/rbac.authorization.k8s.io/v1/clusterroles/karmadaquota-webhook")
    assert crb < cr


async def test_delete_crd_when_asked_and_tolerate_what_is_already_gone(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    objs = install.load_manifests(manifests)
    api.put(CRD, {"kind": "CustomResourceDefinition"})
    await install.delete(client, objs, delete_crd=True)  # everything else: 404
    deletes = [p for m, p in api.log if m == "DELETE"]
    assert deletes[0] == VWC
    assert deletes[-1] == CRD
    assert len(deletes) == len(objs)
    assert api.stored() == set()


async def test_a_failed_delete_of_the_registration_stops_there(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    api, client, _ = fake
    api.api.refuse[VWC] = KubeError(500, "InternalError", "etcdserver: request timed out")
    with pytest.raises(install.InstallError) as e:
        await install.delete(client, install.load_manifests(manifests))
    assert str(e.value) == (
        "delete ValidatingWebhookConfiguration karmadaquota: "
        "500 InternalError: etcdserver: request timed out"
    )
    assert [m for m, _ in api.log] == ["DELETE"]


# ---- manifests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x, namespace: y}\n",
            "x.yaml: apps/v1 Deployment x is not a kind install handles",
        ),
        (
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n",
            "x.yaml: ServiceAccount x has no metadata.namespace",
        ),
        (
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {}\n",
            "x.yaml: ClusterRole without metadata.name",
        ),
        (
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
            "metadata: {name: x, namespace: y}\n",
            "x.yaml: ClusterRole x is cluster-scoped but has a namespace",
        ),
        ("- a list\n", "x.yaml: a manifest must be a mapping, not list"),
    ],
)
def test_bad_manifests_are_named(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(install.InstallError) as e:
        install.load_manifests(tmp_path)
    assert str(e.value).startswith(error)


def test_an_empty_manifest_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(install.InstallError, match="no manifests found"):
        install.load_manifests(tmp_path)


# ---- the command ---------------------------------------------------------------------------


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}],
                "current-context": "k",
            }
        )
    )
    return path


async def test_the_command_applies_and_deletes(
    fake: tuple[Karmada, KubeClient, str],
    manifests: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, _, base = fake
    kubeconfig = _kubeconfig(tmp_path / "karmada.config", base)
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA_PEM)
    common = ["--kubeconfig", str(kubeconfig), "--manifests", str(manifests), "--timeout=10s"]
    argv = ["install", "apply", *common, "--ca-bundle-file", str(ca)]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert api.applied()[0] == CRD and api.applied()[-1] == VWC
    assert all(r.headers["Authorization"] == "Bearer t0ken" for r in api.front.requests)
    assert all(
        r.headers["User-Agent"].startswith("karmadaquota-install/") for r in api.front.requests
    )

    assert await asyncio.to_thread(cli.main, ["install", "delete", *common]) == 0
    assert api.stored() == {CRD}

    api.api.refuse[VWC] = KubeError(403, "Forbidden", "no")
    api.put(VWC, {})
    assert await asyncio.to_thread(cli.main, ["install", "delete", *common]) == 1
    err = capsys.readouterr().err
    assert (
        "karmadaquota install delete: delete ValidatingWebhookConfiguration karmadaquota: " in err
    )


def test_the_command_checks_its_files_before_connecting(
    manifests: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_pem = tmp_path / "ca.crt"
    not_pem.write_text("hello")
    argv = ["install", "apply", "--kubeconfig", str(tmp_path / "missing.config")]
    assert cli.main([*argv, "--manifests", str(manifests), "--ca-bundle-file", str(not_pem)]) == 1
    assert f"--ca-bundle-file {not_pem}: no PEM certificate" in capsys.readouterr().err
    assert cli.main([*argv, "--manifests", str(manifests)]) == 1
    assert "--kubeconfig" in capsys.readouterr().err


# ---- delete-lease (post-delete) -------------------------------------------------------------

LEASE = "/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases/karmadaquota-controller"


def lease(holder: str, rv: str, renewed_ago: float = 0.0, duration: int = 10) -> dict[str, Any]:
    from datetime import UTC, datetime, timedelta

    from karmadaquota.times import format_time

    renew = format_time(datetime.now(UTC) - timedelta(seconds=renewed_ago), micro=True)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew}
    return {"metadata": {"resourceVersion": rv}, "spec": spec}


async def test_the_lease_is_deleted_only_once_no_controller_holds_it(
    fake: tuple[Karmada, KubeClient, str],
) -> None:
    """A controller still stopping holds the Lease: deleting it then would let it (or a
    follower) create it again and leave it behind; deleting after the release does not."""
    api, client, _ = fake
    api.put(LEASE, lease("controller-0_1", "5"))
    task = asyncio.create_task(
        install.delete_lease(client, "karmada-system", "karmadaquota-controller", 10, 0.05)
    )
    await asyncio.sleep(0.3)
    assert not task.done() and LEASE in api.stored()
    assert ("DELETE", LEASE) not in api.log
    api.put(LEASE, lease("", "6"))  # the leader released it as it stopped
    await asyncio.wait_for(task, 5)
    assert LEASE not in api.stored()
    assert api.log.count(("DELETE", LEASE)) == 1


async def test_an_expired_holder_does_not_keep_the_lease_and_a_renewal_wins(
    fake: tuple[Karmada, KubeClient, str],
) -> None:
    api, client, _ = fake
    api.put(LEASE, lease("crashed_1", "7", renewed_ago=60))
    await install.delete_lease(client, "karmada-system", "karmadaquota-controller", 5, 0.05)
    assert LEASE not in api.stored()
    # never held past the timeout: the holder is named
    api.put(LEASE, lease("controller-0_1", "8"))
    with pytest.raises(install.InstallError, match="still held by 'controller-0_1'"):
        await install.delete_lease(client, "karmada-system", "karmadaquota-controller", 0.2, 0.05)
    assert LEASE in api.stored()
    # already gone: fine
    api.api.delete(LEASE)
    await install.delete_lease(client, "karmada-system", "karmadaquota-controller", 1, 0.05)


def test_delete_lease_takes_namespace_slash_name() -> None:
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["install", "delete-lease", "--lease", "no-namespace"])


async def test_namespaces_holding_quotas_are_labelled_before_the_registration(
    fake: tuple[Karmada, KubeClient, str], manifests: Path
) -> None:
    """An upgrade from before the label: the new registration only calls the webhook for
    labelled namespaces, so every namespace with a quota is labelled first."""
    api, client, _ = fake
    for ns in ("team-a", "team-b"):
        api.api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    for q in (
        {"metadata": {"name": "q1", "namespace": "team-b"}},
        {"metadata": {"name": "q2", "namespace": "team-a"}},
        {"metadata": {"name": "q3", "namespace": "team-a"}, "spec": {"onExceed": "Queue"}},
    ):
        api.api.create("/apis/quota.karmada.io/v1alpha1/karmadaquotas", q)
    await install.apply(client, install.load_manifests(manifests), CA_PEM, timeout=10, poll=0.01)
    patched = api.applied()
    labelled = [p for p in patched if p.count("/") == 4 and p.startswith("/api/v1/namespaces/")]
    assert labelled == ["/api/v1/namespaces/team-a", "/api/v1/namespaces/team-b"]
    enforced = {"quota.karmada.io/enforced": "true"}
    # team-a holds a quota that queues: the queueing webhook's label too; team-b only refuses
    assert api.front.bodies[labelled[0]] == {
        "metadata": {"labels": {**enforced, "quota.karmada.io/queueing": "true"}}
    }
    assert api.front.bodies[labelled[1]] == {"metadata": {"labels": enforced}}
    assert patched.index(labelled[-1]) < patched.index(VWC)
    (request,) = [r for r in api.front.requests if r.path == labelled[0]]
    assert request.headers["Content-Type"] == MERGE_PATCH
