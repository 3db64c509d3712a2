"""Whoever can reach a port, on the real bed (DESIGN.md §15, docs/security.md "Network").

- With `--client-ca-file`, a forged AdmissionReview from a client without a certificate is
  refused at TLS, while karmada-apiserver — given a client certificate by its
  AdmissionConfiguration's kubeConfigFile — still reaches the webhook and is answered.
- Without it, forged reviews change nothing but a bounded pending charge: no namespace label
  moves, and what is held never passes hard.
- The health/metrics ports drop idle and half-sent connections at the header deadline and keep
  their connection cap.
- `/metrics` answers 401 without a token, 403 to an identity not granted `get /metrics`, 200 to
  one that is (TokenReview + SubjectAccessReview against karmada-apiserver here).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.pki import CertificateAuthority
from e2e.testbed.ports import free_port
from e2e.testbed.storm import binding
from karmadaquota.api import ENFORCED_LABEL, ENFORCED_VALUE, KarmadaQuota
from karmadaquota.quantity import Quantity

pytestmark = pytest.mark.e2e

BINDINGS = {"group": "work.karmada.io", "version": "v1alpha2", "resource": "resourcebindings"}
QUOTAS = {"group": "quota.karmada.io", "version": "v1alpha1", "resource": "karmadaquotas"}


def forged(obj: dict[str, Any], resource: dict[str, str], uid: str) -> bytes:
    meta = obj["metadata"]
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "resource": resource,
                "namespace": meta["namespace"],
                "name": meta["name"],
                "operation": "CREATE",
                "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
                "object": obj,
            },
        }
    ).encode()


async def post(url: str, body: bytes, ctx: ssl.SSLContext) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
        s.post(url, data=body, ssl=ctx, headers={"Content-Type": "application/json"}) as r,
    ):
        text = await r.text()
        return r.status, (json.loads(text) if r.status == 200 else {"text": text})


def labels(bed: TestBed, ns: str) -> dict[str, str]:
    return dict(((bed.get("namespace", ns) or {}).get("metadata") or {}).get("labels") or {})


def held_pods(bed: TestBed, ns: str, name: str) -> Quantity:
    q = bed.get("karmadaquota", name, namespace=ns) or {}
    total = Quantity.parse("0")
    for r in KarmadaQuota.model_validate(q).status.reservations if q else []:
        total = total + Quantity.parse(str(r.reserved.get("pods", "0")))
    return total


@pytest.fixture(scope="module")
async def crd(testbed: TestBed) -> None:
    await asyncio.to_thread(product.install_crd, testbed)


# ---- client certificates ------------------------------------------------------------------


def admission_config(directory: Path, port: int, client_ca: CertificateAuthority) -> Path:
    """An AdmissionConfiguration whose kubeConfigFile gives karmada-apiserver a client
    certificate for the webhook at 127.0.0.1:<port> (docs/security.md shows the same)."""
    files = client_ca.client("karmada-apiserver").write(directory, "kas-webhook-client")
    kubeconfig = directory / "webhook-client.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": f"127.0.0.1:{port}",
                        "user": {
                            "client-certificate": str(files.cert),
                            "client-key": str(files.key),
                        },
                    }
                ],
            }
        )
    )
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    path = directory / "admission.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {"name": "ValidatingAdmissionWebhook", "configuration": plugin},
                    {"name": "MutatingAdmissionWebhook", "configuration": plugin},
                ],
            }
        )
    )
    return path


def restart_apiserver_with(bed: TestBed, extra: list[str]) -> float:
    """karmada-apiserver reads the webhook kubeconfig once, at start: restart it with `extra`
    in place of the flags a previous call added."""
    assert bed.supervisor is not None, "a bed started by this session"
    c = bed.supervisor.get("karmada-apiserver")
    base = [a for a in c.argv if not a.startswith("--admission-control-config-file=")]
    c.argv = [*base, *extra]
    return bed.restart("karmada-apiserver", timeout=120)


async def start_mtls_webhook(
    bed: TestBed, port: int, client_ca: Path
) -> tuple[product.WebhookProc, int]:
    """A webhook requiring client certificates; ready by its metrics port (the probes' port:
    the HTTPS one refuses them now)."""
    cert = bed.serving_cert("sec-mtls")
    metrics_port = free_port()
    proc = product.start(
        bed,
        "sec-mtls",
        [
            "webhook",
            f"--kubeconfig={bed.karmada_kubeconfig}",
            f"--tls-cert-file={cert.cert}",
            f"--tls-private-key-file={cert.key}",
            "--bind-address=127.0.0.1",
            f"--port={port}",
            "--metrics-bind-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--client-ca-file={client_ca}",
            "--shutdown-delay=0s",
        ],
    )
    hook = product.WebhookProc(proc, port, cert.ca_bundle, metrics_port)
    try:
        await product.wait_ready(
            f"http://127.0.0.1:{metrics_port}/readyz", hook.ssl_context(), proc
        )
    except BaseException:
        proc.stop()
        raise
    return hook, metrics_port


def tls_exchange(port: int, ctx: ssl.SSLContext) -> bytes:
    """A TLS 1.2 handshake with 127.0.0.1:`port`, then a GET: the answer's first bytes. TLS
    1.2, so that a refused client certificate fails the client's handshake (with 1.3 the
    client's side completes first and only an EOF follows); a closed port raises
    ConnectionRefusedError instead, which is no ssl.SSLError."""
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return tls.recv(64)


async def test_with_client_ca_a_forged_review_is_refused_at_tls_and_karmada_apiserver_gets_through(
    testbed: TestBed, crd: None, namespace: str
) -> None:
    ns = namespace
    directory = testbed.home.root / "security-pki"
    directory.mkdir(parents=True, exist_ok=True)
    client_ca = CertificateAuthority.create("kas-webhook-client-ca")
    ca_files = client_ca.write(directory, "client-ca")
    port = free_port()
    config = admission_config(directory, port, client_ca)
    controller, _ = product.start_controller(testbed, "controller-security-mtls")
    hook, _ = await start_mtls_webhook(testbed, port, ca_files.cert)
    seconds = await asyncio.to_thread(
        restart_apiserver_with, testbed, [f"--admission-control-config-file={config}"]
    )
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        # the port is open and serving: a certificate of the client CA gets an HTTP answer
        good = hook.ssl_context()
        kas = client_ca.client("karmada-apiserver").write(directory, "kas-client")
        good.load_cert_chain(kas.cert, kas.key)
        answer = await asyncio.to_thread(tls_exchange, port, good)
        assert answer.startswith(b"HTTP/1.1 "), answer
        # no certificate: the handshake itself fails (not the connection), nothing is read
        with pytest.raises(ssl.SSLError):
            await asyncio.to_thread(tls_exchange, port, hook.ssl_context())
        # a certificate from another CA: refused the same way
        other = CertificateAuthority.create("not-the-client-ca").client("attacker")
        other_files = other.write(directory, "attacker")
        ctx = hook.ssl_context()
        ctx.load_cert_chain(other_files.cert, other_files.key)
        with pytest.raises(ssl.SSLError):
            await asyncio.to_thread(tls_exchange, port, ctx)
        # karmada-apiserver's own calls get through: the quota webhook (fail-closed) admits a
        # quota, the binding webhook refuses a binding over it
        await testbed.aapply(product.quota(ns, "team", {"pods": "1"}))
        await eventually(
            lambda: bool(testbed.get("karmadaquota", "team", namespace=ns)),
            30,
            "the quota stored through the webhook",
        )
        await eventually(
            lambda: (
                "pods"
                in (testbed.get("karmadaquota", "team", namespace=ns) or {})
                .get("status", {})
                .get("used", {})
            ),
            30,
            "the controller initialises status.used",
        )
        two = json.dumps(binding(ns, "two", replicas=2))

        async def refused() -> str | None:
            # dry-run: the webhook is called (sideEffects NoneOnDryRun), nothing is stored;
            # until karmada-apiserver sees the namespace's enforced label it is not called
            proc = await testbed.akubectl(
                "create", "--dry-run=server", "-f", "-", input=two, check=False
            )
            return proc.stderr if "exceeded quota: team" in proc.stderr else None

        message = await eventually(refused, 60, "karmada-apiserver's review refused over quota")
        assert "requested: pods=2" in str(message)
        print(f"karmada-apiserver restarted with the AdmissionConfiguration in {seconds:.1f}s")
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()
        await asyncio.to_thread(restart_apiserver_with, testbed, [])


# ---- forged reviews without client certificates --------------------------------------------


async def test_forged_reviews_change_no_label_and_hold_at_most_hard(
    testbed: TestBed, crd: None, namespace: str
) -> None:
    ns = namespace
    other = f"{ns}-x"
    testbed.kubectl("create", "namespace", other)
    controller, _ = product.start_controller(testbed, "controller-security-forged")
    hook = await product.start_webhook(testbed, "sec-forged", "60s")
    try:
        await testbed.aapply(product.quota(ns, "team", {"pods": "3"}))
        await eventually(
            lambda: (
                "pods"
                in (testbed.get("karmadaquota", "team", namespace=ns) or {})
                .get("status", {})
                .get("used", {})
            ),
            30,
            "the controller initialises status.used",
        )
        await eventually(
            lambda: labels(testbed, ns).get(ENFORCED_LABEL) == ENFORCED_VALUE,
            30,
            "the quota's namespace enforced",
        )
        before = {n: labels(testbed, n) for n in (ns, other)}
        ctx = hook.ssl_context()  # the attacker trusts the serving CA, presents nothing
        base = hook.base
        # a quota review for a namespace holding none (the old path labelled it)
        q = product.quota(other, "evil", {"pods": "1000"})
        status, answer = await post(f"{base}/validate-karmadaquota", forged(q, QUOTAS, "q"), ctx)
        assert status == 200, answer
        # binding creates: more than hard, in one burst
        bodies = [
            forged(binding(ns, f"forged-{i}", cpu="10m", replicas=1), BINDINGS, f"b-{i}")
            for i in range(10)
        ]
        answers = await asyncio.gather(
            *(post(f"{base}/validate-resourcebinding", b, ctx) for b in bodies)
        )
        allowed = sum(1 for s, a in answers if s == 200 and a["response"]["allowed"])
        assert allowed <= 3, answers
        # names that would aim a URL elsewhere are refused as malformed
        bad = binding(ns, "x", replicas=1)
        bad["metadata"]["namespace"] = "../kube-system"
        status, answer = await post(
            f"{base}/validate-resourcebinding", forged(bad, BINDINGS, "bad"), ctx
        )
        assert status == 400 and "RFC 1123" in answer["text"], answer
        # nothing else moved: no label, and what is held is bounded by hard
        assert {n: labels(testbed, n) for n in (ns, other)} == before
        assert testbed.get("karmadaquota", "evil", namespace=other) is None
        assert held_pods(testbed, ns, "team") <= Quantity.parse("3")
        assert not (testbed.get("resourcebinding", namespace=ns) or {}).get("items")
    finally:
        hook.proc.stop()
        controller.stop()
        testbed.kubectl("delete", "namespace", other, "--ignore-not-found", "--wait=false")


# ---- the health and metrics ports ----------------------------------------------------------


async def _closed_within(reader: asyncio.StreamReader, limit: float) -> float:
    """Seconds until the server closed the connection: EOF, or a reset (it closed with our
    half-sent request unread); fails after `limit`."""
    started = time.monotonic()
    async with asyncio.timeout(limit):
        try:
            while await reader.read(1024):
                pass
        except ConnectionResetError:
            pass
    return time.monotonic() - started


async def hold_connections(port: int, n: int, cap: int, deadline: float) -> dict[str, float]:
    """Open `n` idle connections (half of them half-sent); those over `cap` are closed at once,
    the rest at the header deadline. Returns the figures."""
    conns = []
    for i in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        if i % 2:
            w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
            await w.drain()
        conns.append((r, w))
    opened = time.monotonic()
    try:
        waits = await asyncio.gather(*(_closed_within(r, deadline + 10) for r, _ in conns))
    finally:
        for _, w in conns:
            w.close()
    at_once = sum(1 for w in waits if w < deadline / 2)
    assert at_once >= n - cap, f"{at_once} closed at once; the cap is {cap} of {n}"
    latest = max(waits)
    assert latest < deadline + 5, f"the last idle connection lived {latest:.1f}s"
    return {"closed_at_once": at_once, "last_closed_s": round(time.monotonic() - opened, 2)}


async def test_aux_ports_drop_idle_and_half_sent_connections_and_keep_their_cap(
    testbed: TestBed, crd: None
) -> None:
    flags = ["--metrics-read-timeout=2s", "--metrics-max-connections=20"]
    controller, cport = product.start_controller(testbed, "controller-security-aux", *flags)
    hook = await product.start_webhook(testbed, "sec-aux", "60s", False, *flags)
    try:
        await product.wait_ready(
            f"http://127.0.0.1:{cport}/healthz", hook.ssl_context(), controller
        )
        assert hook.metrics_port is not None
        for name, port in (("controller", cport), ("webhook", hook.metrics_port)):
            figures = await hold_connections(port, 60, 20, 2.0)
            print(f"{name} aux port, 60 idle connections: {figures}")
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{port}/healthz") as r,
            ):
                assert (r.status, await r.text()) == (200, "ok\n"), name
    finally:
        hook.proc.stop()
        controller.stop()


# ---- /metrics authentication and authorization ---------------------------------------------


async def metrics_status(url: str, token: str | None, ctx: ssl.SSLContext | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
        s.get(url, headers=headers, ssl=ctx if ctx is not None else True) as r,
    ):
        text = await r.text()
        if r.status != 200:
            assert "quota_namespace" not in text
        return r.status


@pytest.fixture
async def tokens(testbed: TestBed, namespace: str) -> AsyncIterator[dict[str, str]]:
    """Tokens of two ServiceAccounts on karmada-apiserver: `scraper` may get /metrics."""
    ns = namespace
    role = f"metrics-reader-{ns}"
    await testbed.aapply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": ns}}
            for n in ("scraper", "nobody")
        ]
        + [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
            },
        ]
    )
    out = {}
    for n in ("scraper", "nobody"):
        proc = await testbed.akubectl("create", "token", n, "-n", ns)
        out[n] = proc.stdout.strip()
    try:
        yield out
    finally:
        testbed.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")


async def test_metrics_answer_401_403_and_200_to_a_granted_token(
    testbed: TestBed, crd: None, tokens: dict[str, str]
) -> None:
    auth = ["--metrics-auth=tokenreview", f"--metrics-auth-kubeconfig={testbed.karmada_kubeconfig}"]
    controller, cport = product.start_controller(testbed, "controller-security-auth", *auth)
    hook = await product.start_webhook(testbed, "sec-auth", "60s", False, *auth)
    try:
        await product.wait_ready(
            f"http://127.0.0.1:{cport}/healthz", hook.ssl_context(), controller
        )
        urls = [
            (f"http://127.0.0.1:{cport}/metrics", None),
            (f"http://127.0.0.1:{hook.metrics_port}/metrics", None),
            (f"{hook.base}/metrics", hook.ssl_context()),
        ]
        for url, ctx in urls:
            assert await metrics_status(url, None, ctx) == 401, url
            assert await metrics_status(url, "not-a-token", ctx) == 401, url
            assert await metrics_status(url, tokens["nobody"], ctx) == 403, url
            assert await metrics_status(url, tokens["scraper"], ctx) == 200, url
    finally:
        hook.proc.stop()
        controller.stop()
