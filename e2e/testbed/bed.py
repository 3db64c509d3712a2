"""TestBed: the Karmada control plane plus member clusters, as one object.

Three users share it: the e2e fixtures (`TestBed.start(..., ephemeral=True)`: everything is
stopped at the end of the session, at interpreter exit, on SIGTERM/SIGHUP, and by a reaper
process if the owner dies abruptly), `make up` / `make down` (`up` / `down`: the bed outlives
the command; ``state.json`` lets a fresh process find and stop it) and the benchmarks.

Backends (``KARMADAQUOTA_TESTBED``): ``local`` runs the programs on 127.0.0.1; ``kind`` attaches
to the kubeconfigs that ``hack/kind-up.sh`` wrote (no processes are managed then).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from . import process
from .cluster import MemberCluster, NodeShape
from .karmada import KarmadaControlPlane
from .layout import BUILD_SCRIPT, KARMADA, Home, Inputs, default_home
from .pki import CertFiles, CertificateAuthority
from .process import ProcessRecord, StartupError, Supervisor, stop_in_order
from .report import Reporter
from .rest import RestClient, condition

T = TypeVar("T")
STATE_VERSION = 1
DEFAULT_MEMBERS = ("member1", "member2")
BACKENDS = ("local", "kind")
REAPER = "reaper"


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl run whose message includes kubectl's own error output."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


def backend_from_env() -> str:
    backend = os.environ.get("KARMADAQUOTA_TESTBED", "local")
    if backend not in BACKENDS:
        raise ValueError(f"KARMADAQUOTA_TESTBED={backend!r}: expected one of {BACKENDS}")
    return backend


def build_binaries(components: Sequence[str] = ()) -> None:
    """Run ``hack/build-binaries.sh`` (idempotent: a no-op when everything is up to date)."""
    subprocess.run(["bash", str(BUILD_SCRIPT), *components], check=True)


@dataclass(frozen=True)
class ServingCert:
    """A serving certificate for a local webhook, and the caBundle that trusts it."""

    cert: Path
    key: Path
    ca_bundle: bytes


def _read_state(home: Home) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(home.state_file.read_text())
    except (OSError, ValueError):
        return None
    return state


def _write_state(home: Home, state: Mapping[str, Any]) -> None:
    home.root.mkdir(parents=True, exist_ok=True)
    tmp = home.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.replace(home.state_file)


def _records(state: Mapping[str, Any]) -> list[ProcessRecord]:
    return [ProcessRecord.from_json(p) for p in state.get("processes", [])]


def down(home: Home | Path | None = None, grace: float = 10.0, purge: bool = False) -> list[str]:
    """Stop every process recorded in ``home``'s state file; return the names stopped.

    Works from any process (``make down``), and is a no-op when nothing runs. ``purge`` also
    deletes the clusters' data (etcd, PKI, configs); logs and kubeconfigs stay."""
    h = home if isinstance(home, Home) else Home(Path(home) if home else default_home())
    state = _read_state(h)
    if state is None:
        return []
    me = os.getpid()
    records = [r for r in _records(state) if r.pid != me]
    alive = [r.name for r in records if r.alive() and r.name != REAPER]
    # The reaper is tier -1: it stops first, so that it does not race us.
    stop_in_order(records, grace=grace)
    state = dict(state)
    state["processes"] = []
    state["ready"] = False
    _write_state(h, state)
    if purge:
        shutil.rmtree(h.root / "clusters", ignore_errors=True)
    return alive


class TestBed:
    """A running test bed (or a handle on one)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        home: Home,
        members: Sequence[str],
        backend: str = "local",
        inputs: Inputs | None = None,
    ) -> None:
        self.home = home
        self.members = list(members)
        self.backend = backend
        self.inputs = inputs or Inputs.discover()
        self.supervisor: Supervisor | None = None
        self.start_seconds: float | None = None
        self.reused = False
        self.ephemeral = False
        self._state_lock = threading.Lock()

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        home: Path | None = None,
        members: Sequence[str] = DEFAULT_MEMBERS,
        *,
        nodes: NodeShape | None = None,
        ephemeral: bool = True,
        quiet: bool = False,
        karmada_apiserver_args: Sequence[str] = (),
        karmada_feature_gates: Sequence[str] = (),
        karmada_webhook_args: Sequence[str] = (),
        karmada_controller_manager_args: Sequence[str] = (),
    ) -> TestBed:
        """Start a fresh local test bed in ``home`` (stopping whatever ran there before).

        ``ephemeral``: stop it when this process exits (or dies: a reaper process watches
        it). Otherwise it keeps running after this process exits, until `down`.
        ``karmada_apiserver_args``: extra flags for karmada-apiserver (benchmarks: e.g.
        ``--max-mutating-requests-inflight=1000``). ``karmada_feature_gates``: extra gates for
        karmada-webhook and karmada-controller-manager (e.g.
        ``FederatedQuotaEnforcement=true``); ``karmada_webhook_args``: extra flags for
        karmada-webhook (e.g. ``--kube-api-qps=2000``); ``karmada_controller_manager_args``: extra
        flags for karmada-controller-manager (e.g. `failover.CONTROLLER_MANAGER_ARGS`)."""
        h = Home(home or default_home())
        down(h)
        _wipe(h)
        bed = cls(h, members)
        bed._start_local(
            nodes or NodeShape(),
            ephemeral,
            Reporter(quiet=quiet),
            karmada_apiserver_args,
            karmada_feature_gates,
            karmada_webhook_args,
            karmada_controller_manager_args,
        )
        return bed

    @classmethod
    def attach(cls, home: Path | None = None) -> TestBed:
        """A handle on the bed described by ``home``'s state file (not owned: never stopped
        by this handle unless `stop` is called explicitly)."""
        h = Home(home or default_home())
        state = _read_state(h)
        if state is None:
            raise StartupError(f"no test bed state in {h.state_file}")
        bed = cls(h, state["members"], backend=state.get("backend", "local"))
        if state.get("karmada_version"):  # the Karmada it was started with, whatever the env says
            bed.inputs = dataclasses.replace(bed.inputs, karmada=state["karmada_version"])
        bed.start_seconds = state.get("start_seconds")
        return bed

    @classmethod
    def kind(cls, home: Path | None = None, members: Sequence[str] | None = None) -> TestBed:
        """Attach to kind clusters set up by ``hack/kind-up.sh`` (kubeconfigs in ``home``)."""
        h = Home(home or default_home())
        if members is None:
            env = os.environ.get("KARMADAQUOTA_MEMBERS")
            if env:
                members = env.split(",")
            else:
                members = sorted(
                    p.stem
                    for p in h.kubeconfig_dir.glob("*.config")
                    if p.stem != "karmada-apiserver"
                )
        bed = cls(h, members, backend="kind")
        missing = [str(bed.kubeconfig(c)) for c in bed.clusters if not bed.kubeconfig(c).exists()]
        if missing:
            raise StartupError(f"kind backend: missing {missing}; run hack/kind-up.sh first")
        return bed

    @classmethod
    def up(
        cls,
        home: Path | None = None,
        members: Sequence[str] = DEFAULT_MEMBERS,
        *,
        nodes: NodeShape | None = None,
        quiet: bool = False,
        karmada_apiserver_args: Sequence[str] = (),
    ) -> TestBed:
        """Idempotent ``make up``: reuse a healthy bed with these members, else start one."""
        h = Home(home or default_home())
        if _read_state(h) is not None:
            bed = cls.attach(h.root)
            wanted = Inputs.discover().karmada_version
            if (
                bed.members == list(members)
                and bed.inputs.karmada_version == wanted
                and bed.healthy()
            ):
                bed.reused = True
                return bed
        return cls.start(
            h.root,
            members,
            nodes=nodes,
            ephemeral=False,
            quiet=quiet,
            karmada_apiserver_args=karmada_apiserver_args,
        )

    def _start_local(
        self,
        nodes: NodeShape,
        ephemeral: bool,
        reporter: Reporter,
        karmada_apiserver_args: Sequence[str] = (),
        karmada_feature_gates: Sequence[str] = (),
        karmada_webhook_args: Sequence[str] = (),
        karmada_controller_manager_args: Sequence[str] = (),
    ) -> None:
        missing = self.inputs.missing_programs()
        if missing:
            raise StartupError(
                f"missing programs in {self.inputs.bin_dir}: {', '.join(missing)}; "
                "run hack/build-binaries.sh"
            )
        self.ephemeral = ephemeral
        self._reporter = reporter
        sup = Supervisor(on_start=lambda _c: self._save_state(reporter, ready=False))
        self.supervisor = sup
        sup.adopt_exit_handlers(self._cleanup)
        self.home.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            if ephemeral:
                self._start_reaper(sup)
            karmada = KarmadaControlPlane(
                self.home,
                self.inputs,
                sup,
                reporter,
                karmada_apiserver_args,
                karmada_feature_gates,
                karmada_webhook_args,
                karmada_controller_manager_args,
            )
            members = [
                MemberCluster(m, self.home, self.inputs, sup, reporter, nodes) for m in self.members
            ]
            self._karmada = karmada
            self._member_objs = members
            karmada.prepare()
            for m in members:
                m.prepare()
            reporter.step("testbed", "PKI and configs written")
            self._save_state(reporter, ready=False)
            _run_parallel(karmada, members, sup)
            self.start_seconds = round(reporter.elapsed(), 1)
            reporter.step("testbed", f"ready in {self.start_seconds}s")
            self._save_state(reporter, ready=True)
        except BaseException:
            self.stop()
            raise
        if not ephemeral:
            sup.detach()

    def _start_reaper(self, sup: Supervisor) -> None:
        sup.start(
            REAPER,
            [
                sys.executable,
                "-m",
                "e2e.testbed.reaper",
                str(os.getpid()),
                str(self.home.root),
            ],
            self.home.log(REAPER),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            tier=-1,
        )

    def _save_state(self, reporter: Reporter, ready: bool) -> None:
        with self._state_lock:
            self._save_state_locked(reporter, ready)

    def _save_state_locked(self, reporter: Reporter, ready: bool) -> None:
        sup = self.supervisor
        procs = [c.record.to_json() for c in sup.components if c.record] if sup else []
        karmada: KarmadaControlPlane | None = getattr(self, "_karmada", None)
        members: list[MemberCluster] = getattr(self, "_member_objs", [])
        ports: dict[str, Any] = {}
        servers: dict[str, str] = {}
        if karmada is not None:
            ports[KARMADA] = karmada.ports()
            servers[KARMADA] = karmada.server
        for m in members:
            p = m.core.ports
            ports[m.name] = {
                "etcd-client": p.etcd_client,
                "etcd-peer": p.etcd_peer,
                "kube-apiserver": p.apiserver,
                "kube-controller-manager": p.controller_manager,
                "kube-scheduler": p.scheduler,
            }
            servers[m.name] = m.server
        _write_state(
            self.home,
            {
                "version": STATE_VERSION,
                "backend": self.backend,
                "home": str(self.home.root),
                "members": self.members,
                "ready": ready,
                "ephemeral": self.ephemeral,
                "start_seconds": self.start_seconds,
                "karmada_version": self.inputs.karmada_version,
                "owner_pid": os.getpid(),
                "kubeconfigs": {c: str(self.kubeconfig(c)) for c in self.clusters},
                "servers": servers,
                "ports": ports,
                "processes": procs,
                "steps": reporter.steps,
            },
        )

    def restart_karmada_webhook(self, args: Sequence[str]) -> None:
        """Restart karmada-webhook with extra flags ``args`` (replacing earlier extra flags);
        returns once it serves TLS again. Local beds started by this process only."""
        karmada: KarmadaControlPlane | None = getattr(self, "_karmada", None)
        if karmada is None:
            raise StartupError("restart_karmada_webhook: this handle did not start the bed")
        karmada.restart_webhook(args)

    # ---- lifecycle ---------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Stop every process of this bed (no-op for the kind backend)."""
        if self.backend != "local":
            return []
        if self.supervisor is not None:
            self.supervisor.stop_all()
        return down(self.home)

    def _cleanup(self) -> None:
        """At exit / on a signal: stop the bed unless it was started to outlive us."""
        if self.supervisor is not None and not self.supervisor.detached:
            self.stop()

    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        """Kill one process of this bed (e.g. ``karmada-apiserver``, ``karmada-etcd``,
        ``member1-kube-apiserver``) and wait for it to exit; `restart` brings it back."""
        assert self.supervisor is not None, "kill needs a bed started by this process"
        self.supervisor.get(component).kill(sig)

    def restart(self, component: str, sig: int = signal.SIGKILL, timeout: float = 60) -> float:
        """Kill `component` (unless already dead) and start it again with the same flags, ports
        and data; wait until the bed is healthy. Returns the seconds until healthy."""
        assert self.supervisor is not None, "restart needs a bed started by this process"
        started = time.monotonic()
        self.supervisor.restart(component, sig)
        self._save_state(self._reporter, ready=True)  # its new pid; the start hook said not ready
        self.wait_for(f"bed healthy after restarting {component}", self.healthy, timeout)
        return time.monotonic() - started

    def records(self) -> list[ProcessRecord]:
        state = _read_state(self.home) or {}
        return _records(state)

    def healthy(self) -> bool:
        """All processes alive, karmada-apiserver ready and every member Cluster Ready."""
        if self.backend == "local":
            state = _read_state(self.home) or {}
            records = self.records()
            if not state.get("ready") or not records or not all(r.alive() for r in records):
                return False
        try:
            c = self.rest()
            if not c.ok("/readyz"):
                return False
            return all(
                condition(c.get(f"/apis/cluster.karmada.io/v1alpha1/clusters/{m}"), "Ready")
                == "True"
                for m in self.members
            )
        except Exception:
            return False

    def memory(self) -> dict[str, tuple[int, int]]:
        """Per process: (RSS, peak RSS) in KiB."""
        return {r.name: process.memory_kib(r.pid) for r in self.records() if r.alive()}

    def memory_summary(self) -> str:
        mem = self.memory()
        rss = sum(v[0] for v in mem.values()) / 1024
        peak = sum(v[1] for v in mem.values()) / 1024
        return (
            f"{len(mem)} processes, RSS {rss:.0f} MiB now, sum of per-process peaks {peak:.0f} MiB"
        )

    # ---- access ------------------------------------------------------------------------

    @property
    def clusters(self) -> list[str]:
        """``"karmada"`` followed by the member names."""
        return [KARMADA, *self.members]

    def kubeconfig(self, cluster: str = KARMADA) -> Path:
        return self.home.kubeconfig(cluster)

    @property
    def karmada_kubeconfig(self) -> Path:
        return self.kubeconfig(KARMADA)

    def member_kubeconfig(self, name: str) -> Path:
        if name not in self.members:
            raise KeyError(f"no member {name!r} (members: {self.members})")
        return self.kubeconfig(name)

    @property
    def kubectl_binary(self) -> str:
        local = self.inputs.binary("kubectl")
        return str(local) if os.access(local, os.X_OK) else "kubectl"

    def kubectl(
        self,
        *args: str,
        cluster: str = KARMADA,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against ``cluster``; raises with stderr when ``check``."""
        cmd = [
            self.kubectl_binary,
            f"--kubeconfig={self.kubeconfig(cluster)}",
            f"--cache-dir={self.home.kubectl_cache}",
            *args,
        ]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise KubectlError(
                proc.returncode, cmd, proc.stdout, f"{proc.stderr}\n(cmd: {' '.join(cmd)})"
            )
        return proc

    async def akubectl(
        self,
        *args: str,
        cluster: str = KARMADA,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl` in a worker thread, for tests running on an event loop."""
        return await asyncio.to_thread(
            self.kubectl, *args, cluster=cluster, input=input, check=check, timeout=timeout
        )

    async def aapply(
        self,
        manifest: str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        cluster: str = KARMADA,
        namespace: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.apply, manifest, cluster, namespace)

    async def aget(
        self,
        resource: str,
        name: str | None = None,
        cluster: str = KARMADA,
        namespace: str | None = None,
    ) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.get, resource, name, cluster, namespace)

    def apply(
        self,
        manifest: str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        cluster: str = KARMADA,
        namespace: str | None = None,
        server_side: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply`` a YAML string, one object or a list of objects."""
        args = ["apply", "-f", "-"]
        if server_side:
            args += ["--server-side", "--force-conflicts", "--field-manager=karmadaquota-e2e"]
        if namespace:
            args += ["-n", namespace]
        return self.kubectl(*args, cluster=cluster, input=_to_yaml(manifest))

    def delete(
        self,
        manifest: str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        cluster: str = KARMADA,
        namespace: str | None = None,
        wait: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        args = ["delete", "-f", "-", "--ignore-not-found", f"--wait={str(wait).lower()}"]
        if namespace:
            args += ["-n", namespace]
        return self.kubectl(*args, cluster=cluster, input=_to_yaml(manifest))

    def get(
        self,
        resource: str,
        name: str | None = None,
        cluster: str = KARMADA,
        namespace: str | None = None,
    ) -> dict[str, Any] | None:
        """``kubectl get -o json``; None when the named object does not exist."""
        args = ["get", resource, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        proc = self.kubectl(*args, cluster=cluster, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def rest(self, cluster: str = KARMADA) -> RestClient:
        """A small synchronous REST client for ``cluster`` (local backend: admin cert)."""
        cfg = yaml.safe_load(self.kubeconfig(cluster).read_text())
        return _rest_from_kubeconfig(cfg, self.home.root / "rest-client" / cluster)

    @staticmethod
    def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60) -> T:
        """Poll ``check`` until truthy (deadline ``timeout`` s); the error names ``what``."""
        return process.wait_for(what, check, timeout)

    # ---- webhooks of our own -----------------------------------------------------------

    @property
    def webhook_host(self) -> str:
        """Host the API servers reach a webhook served by this (test) process on:
        ``$KARMADAQUOTA_WEBHOOK_HOST``, else 127.0.0.1 (local) or the kind network's gateway
        that ``hack/kind-up.sh`` recorded in ``<home>/webhook-host``."""
        env = os.environ.get("KARMADAQUOTA_WEBHOOK_HOST")
        if env:
            return env
        if self.backend == "local":
            return "127.0.0.1"
        recorded = self.home.root / "webhook-host"
        return recorded.read_text().strip() if recorded.exists() else "172.18.0.1"

    def webhook_ca(self) -> CertificateAuthority:
        """The CA for webhooks served by tests (created once per bed home)."""
        d = self.home.root / "webhook-pki"
        files = CertFiles(d / "ca.crt", d / "ca.key")
        if files.cert.exists() and files.key.exists():
            return CertificateAuthority.load(files)
        ca = CertificateAuthority.create("karmadaquota-webhook-ca")
        ca.write(d, "ca")
        return ca

    def serving_cert(self, name: str, hosts: Sequence[str] = ()) -> ServingCert:
        """Mint a serving cert for ``webhook_host`` (+127.0.0.1, localhost, ``hosts``)."""
        ca = self.webhook_ca()
        cert = ca.serving(name, [self.webhook_host, *hosts])
        files = cert.write(self.home.root / "webhook-pki", name)
        return ServingCert(files.cert, files.key, ca.cert_pem)

    def register_validating_webhook(
        self,
        name: str,
        url: str,
        ca_bundle: bytes,
        rules: Sequence[Mapping[str, Any]],
        *,
        failure_policy: str = "Fail",
        side_effects: str = "None",
        timeout_seconds: int = 3,
        extra: Mapping[str, Any] | None = None,
        cluster: str = KARMADA,
    ) -> dict[str, Any]:
        """Create/replace a one-webhook ValidatingWebhookConfiguration ``name`` calling
        ``url`` (e.g. ``https://127.0.0.1:8443/validate``); ``extra`` merges into the
        webhook entry (namespaceSelector, matchPolicy, ...). Returns the object applied."""
        import base64

        hook: dict[str, Any] = {
            "name": f"{name}.karmadaquota.io" if "." not in name else name,
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()},
            "rules": [dict(r) for r in rules],
            "failurePolicy": failure_policy,
            "sideEffects": side_effects,
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
        }
        hook.update(extra or {})
        obj: dict[str, Any] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [hook],
        }
        self.apply(obj, cluster=cluster)
        return obj

    def unregister_validating_webhook(self, name: str, cluster: str = KARMADA) -> None:
        self.kubectl(
            "delete", "validatingwebhookconfiguration", name, "--ignore-not-found", cluster=cluster
        )

    # ---- reporting ---------------------------------------------------------------------

    def describe(self) -> str:
        lines = [f"test bed ({self.backend}) in {self.home.root}"]
        for c in self.clusters:
            lines.append(f"  {c:<18} {self.kubeconfig(c)}")
        lines.append(
            f"example: {self.kubectl_binary} --kubeconfig {self.karmada_kubeconfig} get clusters"
        )
        return "\n".join(lines)

    def env(self) -> dict[str, str]:
        """Environment variables describing this bed (``testbed env``)."""
        env = {
            "KARMADAQUOTA_HOME": str(self.home.root),
            "KARMADAQUOTA_TESTBED": self.backend,
            "KARMADA_KUBECONFIG": str(self.karmada_kubeconfig),
            "KUBECONFIG": str(self.karmada_kubeconfig),
        }
        for m in self.members:
            env[f"{m.upper()}_KUBECONFIG"] = str(self.kubeconfig(m))
        return env


def _to_yaml(manifest: str | Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> str:
    if isinstance(manifest, str):
        return manifest
    if isinstance(manifest, Mapping):
        return yaml.safe_dump(dict(manifest), sort_keys=False)
    return yaml.safe_dump_all([dict(m) for m in manifest], sort_keys=False)


def _rest_from_kubeconfig(cfg: Mapping[str, Any], scratch: Path) -> RestClient:
    import base64

    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    scratch.mkdir(parents=True, exist_ok=True)
    ca_file: Path | None = None
    if "certificate-authority-data" in cluster:
        ca_file = scratch / "ca.crt"
        ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    elif "certificate-authority" in cluster:
        ca_file = Path(cluster["certificate-authority"])
    client: CertFiles | None = None
    if "client-certificate-data" in user:
        client = CertFiles(scratch / "client.crt", scratch / "client.key")
        client.cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        fd = os.open(client.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(user["client-key-data"]))
    elif "client-certificate" in user:
        client = CertFiles(Path(user["client-certificate"]), Path(user["client-key"]))
    return RestClient(
        str(cluster["server"]), ca_file=ca_file, client=client, token=user.get("token")
    )


def _wipe(home: Home) -> None:
    """Remove a previous bed's state (only the directories the test bed owns)."""
    for d in ("clusters", "logs", "kubeconfig", "kubectl-cache", "rest-client", "webhook-pki"):
        shutil.rmtree(home.root / d, ignore_errors=True)
    home.state_file.unlink(missing_ok=True)


def _run_parallel(
    karmada: KarmadaControlPlane, members: list[MemberCluster], sup: Supervisor
) -> None:
    """Start the control plane and every member concurrently; join each member as soon as
    both sides are up; then wait until every Cluster is Ready. On the first failure,
    everything is stopped so the other threads fail fast instead of waiting out deadlines."""
    with ThreadPoolExecutor(max_workers=1 + len(members)) as pool:
        try:
            cp = pool.submit(karmada.start)

            def member_up(m: MemberCluster) -> None:
                m.start()
                cp.result()
                karmada.join(m)

            futures: list[Future[None]] = [cp, *(pool.submit(member_up, m) for m in members)]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                error = f.exception()
                if error is not None:
                    raise error
        except BaseException:
            # Stop everything now, so that the other threads fail fast (their watched
            # components exit) instead of waiting out their deadlines.
            sup.stop_all(grace=3)
            raise
    karmada.wait_clusters_ready([m.name for m in members])
