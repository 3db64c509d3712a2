"""The install of docs/install.md, done for real on the bed as an operator would.

`kubectl apply -k` puts `api/`, `webhook/karmada/` and `controller/karmada/` on
karmada-apiserver and `webhook/`, `controller/` on a host cluster (a member of the bed plays the
host); the kubeconfig step of docs/install.md runs as written (TokenRequest tokens of the
ServiceAccounts the manifests create). The webhook and the controller run from the image built
from this tree (hack/build-image.sh) exactly as the applied Deployments declare — args, env,
securityContext, the applied Secrets read-only at their mountPaths, only the declared emptyDirs
writable (e2e.testbed.kubelet) — with the identities the RBAC manifests grant. Only what cannot
hold on one shared machine is substituted, each named in e2e.testbed.kubelet: the host network
with listen addresses 127.0.0.1 and free ports; and the webhook registration's URL host (the
Service is not reachable from the bed) and its caBundle, which `hack/gen-webhook-certs.sh` fills
in.

Drift fails the test: a flag the CLI does not accept, a Secret or key the Deployment mounts that
the documented steps do not create, a probe or Service port that is not the one the arguments
serve, or a right the RBAC manifests do not grant (`is forbidden` in a log, or a check below).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from e2e.testbed import TestBed, kubelet, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding
from karmadaquota.kube.client import KubeClient, KubeError
from karmadaquota.quantity import Quantity

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "karmada-system"
VWC = "karmadaquota"
KARMADA_KUSTOMIZATIONS = ["webhook/karmada", "controller/karmada"]
HOST_KUSTOMIZATIONS = ["webhook", "controller"]
# The documented kubeconfig step, run as written.
KUBECONFIG_STEP = re.compile(r"<!-- install: kubeconfigs[^\n]*-->\s*```bash\n(.*?)```", re.S)
RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"


def _flag(args: list[str], name: str) -> str | None:
    for a in args:
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
    return None


def materialize(
    bed: TestBed, host: str, deployment: dict[str, Any], root: Path, image: str
) -> tuple[kubelet.Run, dict[str, Any]]:
    """The Deployment's only container as the kubelet would run it from the built image: its
    Secret volumes' data, as applied on the host, projected into local directories."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes: dict[str, Path] = {}
    for volume in pod.get("volumes", []):
        if "secret" not in volume:
            continue
        name = volume["secret"]["secretName"]
        secret = bed.get("secret", name, cluster=host, namespace=SYSTEM)
        assert secret, f"{deployment['metadata']['name']} mounts Secret {name}: not created"
        data = {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}
        volumes[volume["name"]] = kubelet.write_volume(data, root / volume["name"])
    return kubelet.plan(pod, container["name"], volumes, image=image), container


def container_port(container: dict[str, Any], port: str | int) -> int:
    """A probe's or Service's port (name or number) as the container's port number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"port {port!r} is not a port of container {container['name']}"
    return int(named[port])


async def probe(
    container: dict[str, Any], serving_flag: str, launch: kubelet.Run, ctx: Any
) -> None:
    """Every probe of the container targets the port its arguments serve, on a path that
    answers 200 (the local port substituted)."""
    declared = int(_flag(container["args"], serving_flag) or 0)
    async with aiohttp.ClientSession() as s:
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            http = (container.get(kind) or {}).get("httpGet")
            if not http:
                continue
            assert container_port(container, http["port"]) == declared, (
                f"{kind} targets port {http['port']}, the process serves {serving_flag}={declared}"
            )
            scheme = http.get("scheme", "HTTP").lower()
            url = f"{scheme}://127.0.0.1:{launch.ports[serving_flag]}{http['path']}"

            async def ok(url: str = url, scheme: str = scheme) -> bool:
                async with s.get(url, ssl=ctx if scheme == "https" else None) as r:
                    return r.status == 200

            await eventually(ok, 60, f"{kind} {url} answers 200")


def forbidden_lines(*procs: product.Proc) -> list[str]:
    return [
        line
        for p in procs
        for line in p.log.read_text(errors="replace").splitlines()
        if "is forbidden" in line
    ]


@contextlib.contextmanager
def installed(bed: TestBed, host: str, work: Path) -> Iterator[None]:
    """docs/install.md steps 1-4 with kubectl; everything but the CRD removed afterwards."""

    def kubectl(*args: str, cluster: str = "karmada") -> str:
        return bed.kubectl(*args, cluster=cluster).stdout

    try:
        if not bed.get("namespace", SYSTEM, cluster=host):
            kubectl("create", "namespace", SYSTEM, cluster=host)
        kubectl("apply", "-k", str(REPO / "api"))
        for k in KARMADA_KUSTOMIZATIONS:
            kubectl("apply", "-k", str(REPO / k))
        # the kubeconfig step as documented, against the bed's kubeconfigs
        shutil.copy(bed.karmada_kubeconfig, work / "karmada-apiserver.config")
        shutil.copy(bed.kubeconfig(host), work / "host.config")
        (script,) = KUBECONFIG_STEP.findall((REPO / "docs" / "install.md").read_text())
        path = f"{Path(bed.kubectl_binary).parent}{os.pathsep}{os.environ['PATH']}"
        step = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env={**os.environ, "PATH": path},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert step.returncode == 0, f"docs/install.md kubeconfig step:\n{step.stderr}"
        for k in HOST_KUSTOMIZATIONS:
            kubectl("apply", "-k", str(REPO / k), cluster=host)
        yield
    finally:
        # the registration first: with failurePolicy Fail it would refuse every binding
        bed.kubectl("delete", "validatingwebhookconfiguration", VWC, "--ignore-not-found")
        for k in KARMADA_KUSTOMIZATIONS:
            bed.kubectl("delete", "-k", str(REPO / k), "--ignore-not-found", check=False)
        for k in HOST_KUSTOMIZATIONS:
            bed.kubectl("delete", "-k", str(REPO / k), "--ignore-not-found", cluster=host)
        for name in ("webhook-config", "controller-config", "webhook-cert"):
            bed.kubectl(
                *("delete", "secret", f"karmadaquota-{name}", "-n", SYSTEM, "--ignore-not-found"),
                cluster=host,
            )


def point_registration_at(bed: TestBed, port: int, ca_bundle: bytes) -> None:
    """What hack/gen-webhook-certs.sh fills in (the caBundle), plus the URL's host and port:
    the applied paths are kept, so a path the webhook does not serve still fails."""
    vwc = bed.get("validatingwebhookconfiguration", VWC)
    assert vwc, "webhook/karmada/ registers the webhook"
    patch = []
    for i, hook in enumerate(vwc["webhooks"]):
        url = urlsplit(hook["clientConfig"]["url"])
        local = f"https://{bed.webhook_host}:{port}{url.path}"
        patch.append({"op": "replace", "path": f"/webhooks/{i}/clientConfig/url", "value": local})
        patch.append(
            {
                "op": "replace",
                "path": f"/webhooks/{i}/clientConfig/caBundle",
                "value": base64.b64encode(ca_bundle).decode(),
            }
        )
    bed.kubectl(
        "patch", "validatingwebhookconfiguration", VWC, "--type=json", "-p", json.dumps(patch)
    )


@pytest.fixture
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


def used(bed: TestBed, ns: str, resource: str) -> Quantity | None:
    q = bed.get("karmadaquota", "team", namespace=ns) or {}
    value = q.get("status", {}).get("used", {}).get(resource)
    return None if value is None else Quantity.parse(str(value))


async def test_install_as_documented_refuses_and_counts(
    testbed: TestBed, api: KubeClient, namespace: str, tmp_path: Path, image: str
) -> None:
    """Both Deployments' containers run from the built image under their declared
    securityContext (e2e.testbed.kubelet): read-only root, uid/gid without a passwd entry,
    only the declared emptyDirs writable. Before the fix the webhook died at start-up with
    `No usable temporary directory found` and the controller with `getpwuid(): uid not found`."""
    host = sorted(testbed.members)[0]
    cert = testbed.serving_cert("install-webhook")
    procs: list[product.Proc] = []
    with installed(testbed, host, tmp_path):
        # the serving certificate Secret, as hack/gen-webhook-certs.sh creates it on the host
        testbed.kubectl(
            *("-n", SYSTEM, "create", "secret", "tls", "karmadaquota-webhook-cert"),
            f"--cert={cert.cert}",
            f"--key={cert.key}",
            cluster=host,
        )
        deployments = {
            name: testbed.get("deployment", f"karmadaquota-{name}", cluster=host, namespace=SYSTEM)
            for name in ("webhook", "controller")
        }
        assert all(deployments.values()), "webhook/ and controller/ create both Deployments"
        hook, hook_c = materialize(testbed, host, deployments["webhook"], tmp_path / "wh", image)
        ctrl, ctrl_c = materialize(testbed, host, deployments["controller"], tmp_path / "c", image)
        try:
            procs.append(kubelet.start(testbed, "install-webhook", hook))
            procs.append(kubelet.start(testbed, "install-controller", ctrl))
            port = hook.ports["--port"]
            ctx = product.WebhookProc(procs[0], port, cert.ca_bundle).ssl_context()
            await product.wait_ready(f"https://127.0.0.1:{port}/readyz", ctx, procs[0])
            await probe(hook_c, "--port", hook, ctx)
            await probe(ctrl_c, "--metrics-port", ctrl, None)
            await asyncio.to_thread(point_registration_at, testbed, port, cert.ca_bundle)
            await check_ports(testbed, host, deployments)
            await check_end_to_end(testbed, api, namespace)
            assert forbidden_lines(*procs) == []
            for p in procs:
                assert p.popen.poll() is None, f"{p.name} exited:\n{p.tail()}"
            await check_drain(procs[0], port, ctx)
        finally:
            for p in procs:
                p.stop()
                kubelet.remove(p.name)


async def check_drain(webhook: product.Proc, port: int, ctx: Any) -> None:
    """SIGTERM (as the kubelet sends it): /readyz fails at once so endpoints drop the pod, but
    reviews are still answered until --shutdown-delay has passed; then the process exits 0."""
    webhook.popen.send_signal(signal.SIGTERM)
    base = f"https://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s:

        async def not_ready() -> bool:
            async with s.get(f"{base}/readyz", ssl=ctx) as r:
                return r.status == 503

        await eventually(not_ready, 10, "/readyz fails after SIGTERM")
        # still serving: a malformed review gets the webhook's own 400, not a refused connection
        async with s.post(f"{base}/validate-resourcebinding", data=b"{}", ssl=ctx) as r:
            assert r.status == 400, await r.text()
    code = await asyncio.to_thread(webhook.popen.wait, 30)
    assert code == 0, webhook.tail()
    assert "draining" in webhook.log.read_text()


async def check_ports(bed: TestBed, host: str, deployments: dict[str, Any]) -> None:
    """The Service reaches the webhook's serving port; the scrape annotation names the
    controller's metrics port."""
    svc = bed.get("service", "karmadaquota-webhook", cluster=host, namespace=SYSTEM)
    assert svc, "webhook/ creates the Service the registration names"
    (webhook_c,) = deployments["webhook"]["spec"]["template"]["spec"]["containers"]
    serving = int(_flag(webhook_c["args"], "--port") or 0)
    for p in svc["spec"]["ports"]:
        assert container_port(webhook_c, p["targetPort"]) == serving
    template = deployments["controller"]["spec"]["template"]
    (ctrl_c,) = template["spec"]["containers"]
    scrape = template["metadata"].get("annotations", {}).get("prometheus.io/port")
    assert scrape == _flag(ctrl_c["args"], "--metrics-port")


async def check_end_to_end(bed: TestBed, api: KubeClient, ns: str) -> None:
    """A quota admitted through the registration, counted by the controller's identity, a
    binding refused and one admitted by the webhook's, usage released, a leader elected and
    member clusters observed with the rights granted."""
    await bed.aapply(product.quota(ns, "team", {"requests.cpu": "1", "pods": "4"}))
    await eventually(lambda: used(bed, ns, "requests.cpu") is not None, 60, "status.used")
    await api.post(RB_PATH.format(ns=ns), binding(ns, "a", cpu="600m"))
    with pytest.raises(KubeError, match=r"exceeded quota: team, requested: requests\.cpu=600m"):
        await api.post(RB_PATH.format(ns=ns), binding(ns, "b", cpu="600m"))
    await eventually(
        lambda: used(bed, ns, "requests.cpu") == Quantity.parse("600m"), 60, "a counted"
    )
    await bed.akubectl("delete", "resourcebinding", "a", "-n", ns, "--wait=false")
    await eventually(lambda: used(bed, ns, "requests.cpu") == Quantity.zero(), 60, "a released")
    lease = bed.get("lease", "karmadaquota-controller", namespace=SYSTEM) or {}
    assert lease.get("spec", {}).get("holderIdentity"), "the controller holds the leader Lease"

    def members_observed() -> bool:
        q = bed.get("karmadaquota", "team", namespace=ns) or {}
        conditions = {c["type"]: c for c in q.get("status", {}).get("conditions", [])}
        member = conditions.get("MemberObserved", {})
        assert member.get("status") == "True", member
        return True

    await eventually(members_observed, 60, "member clusters watched with the granted rights")
