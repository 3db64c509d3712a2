"""What an installed karmadaquota must do, checked the same way for every install path
(docs/install.md's kustomize steps in test_install.py, the Helm chart in test_chart.py): its
containers run from the built image under their declared securityContext (e2e.testbed.kubelet),
probes answer on the ports the arguments serve, a quota is admitted, counted, refuses and
releases through the registration, members are observed with the granted rights, and the
webhook drains after SIGTERM.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from e2e.testbed import TestBed, kubelet, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding
from karmadaquota.kube.client import KubeClient, KubeError
from karmadaquota.quantity import Quantity

SYSTEM = "karmada-system"
VWC = "karmadaquota"
RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"


def flag(args: list[str], name: str) -> str | None:
    for a in args:
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
    return None


def volumes(bed: TestBed, host: str, pod: dict[str, Any], root: Path) -> dict[str, Path]:
    """The pod's Secret and ConfigMap volumes as the kubelet projects them (`items` included),
    from the objects applied on the host."""
    out: dict[str, Path] = {}
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            source, kind, name = volume["secret"], "secret", volume["secret"]["secretName"]
        elif "configMap" in volume:
            source, kind, name = volume["configMap"], "configmap", volume["configMap"]["name"]
        else:
            continue
        obj = bed.get(kind, name, cluster=host, namespace=SYSTEM)
        assert obj, f"the pod mounts {kind} {name}: not created"
        if kind == "secret":
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        if source.get("items"):
            missing = [i["key"] for i in source["items"] if i["key"] not in data]
            assert not missing, f"{kind} {name} has no key {missing}"
            data = {i["path"]: data[i["key"]] for i in source["items"]}
        out[volume["name"]] = kubelet.write_volume(data, root / volume["name"])
    return out


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Deployment or Job."""
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def service_account(
    bed: TestBed, host: str, pod: dict[str, Any], root: Path
) -> tuple[Path, str] | None:
    """The pod's ServiceAccount token as the kubelet projects it (a TokenRequest on the host
    for that account, its CA and namespace) and the host's address, when the pod mounts it:
    the pod's automountServiceAccountToken, else its ServiceAccount's, else true."""
    name = pod.get("serviceAccountName", "default")
    automount = pod.get("automountServiceAccountToken")
    if automount is None:
        sa = bed.get("serviceaccount", name, cluster=host, namespace=SYSTEM)
        assert sa, f"the pod runs as ServiceAccount {name}: not created"
        automount = sa.get("automountServiceAccountToken", True)
    if not automount:
        return None
    token = bed.kubectl(
        *("create", "token", name, "-n", SYSTEM, "--duration=1h"), cluster=host
    ).stdout.strip()
    config = yaml.safe_load(bed.kubeconfig(host).read_text())
    (cluster,) = config["clusters"]
    ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"])
    files = {"token": token.encode(), "ca.crt": ca, "namespace": SYSTEM.encode()}
    return kubelet.write_volume(files, root / "serviceaccount"), str(cluster["cluster"]["server"])


def materialize(
    bed: TestBed, host: str, pod: dict[str, Any], root: Path, image: str
) -> tuple[kubelet.Run, dict[str, Any]]:
    """The pod's only container as the kubelet would run it from the built image."""
    (container,) = pod["containers"]
    run = kubelet.plan(
        pod,
        container["name"],
        volumes(bed, host, pod, root),
        image=image,
        pod_name=f"{container['name']}-{root.name}",
        namespace=SYSTEM,
        service_account=service_account(bed, host, pod, root),
    )
    return run, container


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
    declared = int(flag(container["args"], serving_flag) or 0)
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
                async with s.get(url, ssl=ctx if scheme == "https" else True) as r:
                    return r.status == 200

            await eventually(ok, 60, f"{kind} {url} answers 200")


def forbidden_lines(*procs: product.Proc) -> list[str]:
    return [
        line
        for p in procs
        for line in p.log.read_text(errors="replace").splitlines()
        if "is forbidden" in line
    ]


def point_registration_at(bed: TestBed, port: int, ca_bundle: bytes) -> None:
    """What hack/gen-webhook-certs.sh fills in (the caBundle), plus the URL's host and port:
    the applied paths are kept, so a path the webhook does not serve still fails."""
    vwc = bed.get("validatingwebhookconfiguration", VWC)
    assert vwc, "webhook/karmada/ registers the webhook"
    registrations = [("validatingwebhookconfiguration", vwc)]
    mwc = bed.get("mutatingwebhookconfiguration", VWC)  # the queueing one, same name
    if mwc:
        registrations.append(("mutatingwebhookconfiguration", mwc))
    for kind, obj in registrations:
        patch = []
        for i, hook in enumerate(obj["webhooks"]):
            url = urlsplit(hook["clientConfig"]["url"])
            local = f"https://{bed.webhook_host}:{port}{url.path}"
            patch.append(
                {"op": "replace", "path": f"/webhooks/{i}/clientConfig/url", "value": local}
            )
            patch.append(
                {
                    "op": "replace",
                    "path": f"/webhooks/{i}/clientConfig/caBundle",
                    "value": base64.b64encode(ca_bundle).decode(),
                }
            )
        bed.kubectl("patch", kind, VWC, "--type=json", "-p", json.dumps(patch))


def used(bed: TestBed, ns: str, resource: str) -> Quantity | None:
    q = bed.get("karmadaquota", "team", namespace=ns) or {}
    value = q.get("status", {}).get("used", {}).get(resource)
    return None if value is None else Quantity.parse(str(value))


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


async def check_tenant_reads_its_quota(bed: TestBed, ns: str) -> None:
    """A namespace user holding Kubernetes' `view` there (impersonated: `--as`) reads its
    quotas through the karmadaquota-view aggregation and may not write one; holding `edit`
    does not let it write one either; without a binding it reads nothing (what grants the
    read is the binding, not some wider rule)."""
    quota = product.quota(ns, "tenant-made", {"pods": "1000"})
    try:
        for user, role in (("alice", "view"), ("bob", "edit")):
            await bed.akubectl(
                "create",
                "rolebinding",
                f"{user}-{role}",
                "-n",
                ns,
                f"--clusterrole={role}",
                f"--user={user}",
            )

        async def reads(user: str) -> bool:
            out = await bed.akubectl(
                "get", "kq", "-n", ns, "-o", "name", f"--as={user}", check=False
            )
            assert out.returncode == 0, out.stderr
            assert "karmadaquota.quota.karmada.io/team" in out.stdout.split(), out.stdout
            return True

        # the aggregation controller adds the rules to view/edit within moments
        for user in ("alice", "bob"):
            await eventually(functools.partial(reads, user), 30, f"{user} reads {ns}'s quotas")
        for user in ("alice", "bob"):
            made = await bed.akubectl(
                "create", "-f", "-", f"--as={user}", input=json.dumps(quota), check=False
            )
            assert made.returncode != 0 and "forbidden" in made.stderr, (user, made.stderr)
            edited = await bed.akubectl(
                *("patch", "kq", "team", "-n", ns, "--type=merge", f"--as={user}"),
                *("-p", '{"spec":{"hard":{"pods":"1000"}}}'),
                check=False,
            )
            assert edited.returncode != 0 and "forbidden" in edited.stderr, (user, edited.stderr)
        # the printer columns: whether the quota is enforced (its Enforced condition)
        table = (await bed.akubectl("get", "kq", "team", "-n", ns, "--as=alice")).stdout
        header, row = table.splitlines()
        assert dict(zip(header.split(), row.split(), strict=False))["ENFORCED"] == "True", table
        stranger = await bed.akubectl("get", "kq", "-n", ns, "--as=mallory", check=False)
        assert stranger.returncode != 0 and "forbidden" in stranger.stderr, stranger.stderr
        assert bed.get("karmadaquota", "tenant-made", namespace=ns) is None
    finally:
        await bed.akubectl(
            *("delete", "rolebinding", "alice-view", "bob-edit", "-n", ns, "--ignore-not-found")
        )


def run_documented(bed: TestBed, script: str, cwd: Path, what: str) -> None:
    """A shell block of docs/install.md run as written (`bash -euo pipefail`) in `cwd`, with
    the bed's kubectl first on PATH, as a user following the docs would."""
    path = f"{Path(bed.kubectl_binary).parent}{os.pathsep}{os.environ['PATH']}"
    step = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert step.returncode == 0, f"docs/install.md {what}:\n{step.stderr}"


# docs/install.md's "First quota: see a refusal", run as written
FIRST_QUOTA = re.compile(
    r"<!-- install: first quota, (refused|fits) [^\n]*-->\s*```bash\n(.*?)```", re.S
)
INSTALL_MD = Path(__file__).resolve().parents[2] / "docs" / "install.md"


async def check_first_quota_as_documented(bed: TestBed, work: Path) -> None:
    """The documented first steps after an install, against the bed's karmada-apiserver (its
    namespace `team-a` renamed to a fresh one): a Deployment over the quota is refused with
    Kubernetes' words in its events, and once scaled to what fits it is counted."""

    def prepare() -> dict[str, str]:
        work.mkdir(parents=True, exist_ok=True)
        shutil.copy(bed.karmada_kubeconfig, work / "karmada-apiserver.config")
        return dict(FIRST_QUOTA.findall(INSTALL_MD.read_text()))

    blocks = await asyncio.to_thread(prepare)
    assert set(blocks) == {"refused", "fits"}, "docs/install.md: the first-quota steps"
    ns = f"first-quota-{secrets.token_hex(3)}"

    def run(script: str) -> None:
        run_documented(bed, script.replace("team-a", ns), work, "first-quota step")

    try:
        await asyncio.to_thread(run, blocks["refused"])

        def refused() -> bool:
            events = bed.kubectl(
                *("get", "events", "-n", ns, "-o", "json"),
                "--field-selector=involvedObject.name=web",
            ).stdout
            messages = [e.get("message", "") for e in json.loads(events)["items"]]
            assert any(
                "exceeded quota: team" in m and "limited: requests.cpu=2" in m for m in messages
            ), messages
            return True

        await eventually(refused, 60, "the Deployment's events say it exceeded quota: team")
        assert used(bed, ns, "requests.cpu") == Quantity.zero()
        await asyncio.to_thread(run, blocks["fits"])
        await eventually(
            lambda: used(bed, ns, "requests.cpu") == Quantity.parse("2"), 60, "web counted"
        )
    finally:
        await bed.akubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
