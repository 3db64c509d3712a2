"""Run a rendered pod's container from the built image as the kubelet would, on this machine.

kind cannot run here, so no kubelet does: rootful podman with runc stands in. `plan` maps the
pod and container spec to what the container gets in a cluster — and nothing more:

* the root filesystem read-only when `readOnlyRootFilesystem` says so, and **no** tmpfs on
  /tmp, /run, /var/tmp (podman adds those by default; a kubelet does not);
* the declared uid and gid exactly (`runAsUser` without `runAsGroup` runs as gid 0, as
  containerd does), with **no** passwd entry added (podman adds one by default; a kubelet does
  not, and `getpass.getuser()` then fails for the image's 65532);
* the environment the container declares (plus what every runtime sets: PATH from the image,
  HOSTNAME, and HOME=/ for a uid without a passwd entry), never the caller's;
* capabilities dropped, no-new-privileges, the memory limit;
* Secret volumes read-only at their mountPaths (files 0644 as the default `defaultMode`), and
  writable mounts only where an emptyDir is declared;
* the ServiceAccount token, CA and namespace at /var/run/secrets/kubernetes.io/serviceaccount
  when the pod (or its ServiceAccount) automounts it, from a TokenRequest for that account.

Only what cannot hold on one shared machine is substituted, and `Run.substituted` names each:
the host network (no pod network here) with listen addresses bound to 127.0.0.1, free ports for
the ones the args declare, and the in-cluster API server address (KUBERNETES_SERVICE_HOST/PORT)
set to the host cluster's own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.testbed import TestBed
from e2e.testbed.layout import REPO_ROOT
from e2e.testbed.ports import free_port
from e2e.testbed.product import Proc

ENGINE = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
_LISTEN = re.compile(r"--((?:metrics-)?bind-address)=.*")
_PORT = re.compile(r"--((?:metrics-)?port)=\d+")
_SIZE = re.compile(r"^(\d+)(Ki|Mi|Gi)?$")
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Run:
    """One container as the kubelet would start it: everything `podman run` is given."""

    image: str
    args: list[str]
    env: dict[str, str]
    user: str
    read_only: bool
    binds: list[tuple[Path, str]] = field(default_factory=list)  # read-only: local dir -> path
    empty_dirs: list[tuple[str, str]] = field(default_factory=list)  # path, size option
    memory: str | None = None
    cap_drop: list[str] = field(default_factory=list)
    no_new_privileges: bool = False
    ports: dict[str, int] = field(default_factory=dict)  # flag -> local port
    substituted: list[str] = field(default_factory=list)


def _bytes_option(quantity: str) -> str:
    """A Kubernetes memory/size quantity (Ki/Mi/Gi or bytes) as podman's k/m/g suffix."""
    m = _SIZE.match(quantity)
    if m is None:
        raise ValueError(f"size {quantity!r}: only plain bytes and Ki/Mi/Gi are supported here")
    number, unit = m.groups()
    return number + {None: "", "Ki": "k", "Mi": "m", "Gi": "g"}[unit]


def _security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's effective securityContext: its own fields over the pod's."""
    return {**pod.get("securityContext", {}), **container.get("securityContext", {})}


def plan(
    pod: Mapping[str, Any],
    container_name: str,
    volumes: Mapping[str, Path],
    image: str | None = None,
    pod_name: str = "",
    namespace: str = "default",
    service_account: tuple[Path, str] | None = None,
) -> Run:
    """The container `container_name` of the pod spec `pod`, with each Secret or ConfigMap
    volume's files already written to `volumes[name]` (a local directory), as pod `pod_name`
    (default: the container's name) of `namespace` for the downward API; `service_account`:
    (a local directory with the pod's ServiceAccount `token`, `ca.crt` and `namespace`, the
    API server's https URL) when the pod mounts its token. Pure apart from choosing free
    ports."""
    fields = {"metadata.name": pod_name or container_name, "metadata.namespace": namespace}
    (container,) = [c for c in pod["containers"] if c["name"] == container_name]
    security = _security(pod, container)
    assert "runAsUser" in security, f"{container_name}: no runAsUser (would run as the image's)"
    user = f"{security['runAsUser']}:{security.get('runAsGroup', 0)}"
    declared = {v["name"]: v for v in pod.get("volumes", [])}
    run = Run(
        image=image or container["image"],
        args=[],
        env={},
        user=user,
        read_only=bool(security.get("readOnlyRootFilesystem")),
        cap_drop=list(security.get("capabilities", {}).get("drop", [])),
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        memory=(container.get("resources", {}).get("limits", {}) or {}).get("memory"),
    )
    if image:
        run.substituted.append(f"image {container['image']} -> {image}")
    for mount in container.get("volumeMounts", []):
        volume = declared[mount["name"]]
        if "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit")
            run.empty_dirs.append((mount["mountPath"], _bytes_option(size) if size else ""))
        elif "secret" in volume or "configMap" in volume:
            assert mount.get("readOnly", True), f"{mount['name']}: Secret mounted writable"
            run.binds.append((volumes[mount["name"]], mount["mountPath"]))
        else:
            raise AssertionError(f"volume {mount['name']}: only Secrets, ConfigMaps, emptyDirs")
    for arg in container.get("args", []):
        if m := _LISTEN.fullmatch(arg):
            arg = f"--{m.group(1)}=127.0.0.1"
        elif m := _PORT.fullmatch(arg):
            run.ports[f"--{m.group(1)}"] = port = free_port()
            arg = f"--{m.group(1)}={port}"
        run.args.append(arg)
    if run.ports:
        run.substituted.append(
            "host network, listening on 127.0.0.1: "
            + ", ".join(f"{k}={v}" for k, v in run.ports.items())
        )
    if service_account is not None:
        # what the kubelet projects for an automounted token, and the in-cluster address of the
        # API server (the Service `kubernetes`): here the host cluster's own address
        local, url = service_account
        run.binds.append((local, SERVICE_ACCOUNT_DIR))
        address, _, api_port = url.removeprefix("https://").rstrip("/").rpartition(":")
        run.env["KUBERNETES_SERVICE_HOST"], run.env["KUBERNETES_SERVICE_PORT"] = address, api_port
        run.substituted.append(f"the in-cluster API server address: {url}")
    for e in container.get("env", []):
        field_path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field_path in fields:
            run.env[e["name"]] = fields[field_path]  # the downward API
            continue
        assert "value" in e, f"env {e['name']}: only literal values and {sorted(fields)} here"
        run.env[e["name"]] = e["value"]
    return run


def argv(run: Run, name: str) -> list[str]:
    """`podman run` for `run`, in the foreground (signals proxied to the container)."""
    cmd = [*ENGINE, "run", "--rm", "--name", name, "--pull", "never", *ULIMITS]
    cmd += ["--network", "host", "--passwd=false", "--user", run.user, "--env", "HOME=/"]
    if run.read_only:
        cmd += ["--read-only", "--read-only-tmpfs=false"]
    for cap in run.cap_drop:
        cmd += ["--cap-drop", cap]
    if run.no_new_privileges:
        cmd += ["--security-opt", "no-new-privileges"]
    if run.memory:
        cmd += ["--memory", _bytes_option(run.memory)]
    for local, path in run.binds:
        cmd += ["--volume", f"{local}:{path}:ro"]
    for path, size in run.empty_dirs:
        opts = "rw,mode=1777" + (f",size={size}" if size else "")
        cmd += ["--tmpfs", f"{path}:{opts}"]
    for key, value in run.env.items():
        cmd += ["--env", f"{key}={value}"]
    return [*cmd, run.image, *run.args]


def write_volume(files: Mapping[str, bytes], local: Path) -> Path:
    """A Secret's or ConfigMap's data as the kubelet projects it: files 0644 (defaultMode 420)
    in a directory the container's user may read."""
    local.mkdir(parents=True)
    local.chmod(0o755)
    for key, value in files.items():
        path = local / key
        path.write_bytes(value)
        path.chmod(0o644)
    return local


def build_image() -> str:
    """`hack/build-image.sh` (idempotent; installs podman, runc and mmdebstrap when missing):
    the built image's reference."""
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "build-image.sh")],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def engine() -> str:
    """The engine's version line (said in the test output: which engine ran the pods)."""
    assert shutil.which("podman"), "podman is not installed (hack/build-image.sh installs it)"
    out = subprocess.run([*ENGINE, "--version"], capture_output=True, text=True, check=True)
    return f"{out.stdout.strip()} with runc"


def start(bed: TestBed, name: str, run: Run) -> Proc:
    """`run` in the foreground under `podman run`, its output in the bed's logs/<name>.log;
    the returned process's SIGTERM reaches the container (podman proxies signals)."""
    remove(name)
    logs = bed.home.root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv(run, name))}\n".encode())
        out.flush()
        popen = subprocess.Popen(argv(run, name), stdout=out, stderr=subprocess.STDOUT)
    return Proc(name, popen, log)


def remove(name: str) -> None:
    """Remove the container `name` if it is still there (a test that failed mid-way)."""
    subprocess.run([*ENGINE, "rm", "--force", "--time", "5", name], capture_output=True)
