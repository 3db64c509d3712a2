"""`make up` / `make down`: karmadaquota running on the local test bed, with a sample quota.

    python -m e2e.testbed.demo up     # after `python -m e2e.testbed up`
    python -m e2e.testbed.demo down   # stops the webhook and the controller

`up` installs the CRD, starts the webhook and the controller as background processes (pids in
`$KARMADAQUOTA_HOME/karmadaquota.json`, logs in `$KARMADAQUOTA_HOME/logs/`), registers the
webhook, creates namespace `team-a` with a KarmadaQuota and a Deployment spread over the
members, then prints `kubectl get kq` and `kubectl karmadaquota describe` and commands to try.
Idempotent: processes that are still alive are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from e2e.testbed import TestBed, default_home, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy

NAMESPACE = "team-a"
QUOTA = {"requests.cpu": "4", "requests.memory": "8Gi", "pods": "20"}
START = time.monotonic()


def step(text: str) -> None:
    print(f"[karmadaquota {time.monotonic() - START:5.1f}s] {text}", flush=True)


def _state_file(bed: TestBed) -> Path:
    return bed.home.root / "karmadaquota.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _load(bed: TestBed) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(_state_file(bed).read_text())
    except (OSError, ValueError):
        return {}
    return state


def sample(members: list[str]) -> list[dict[str, Any]]:
    """The sample: the quota, and a Deployment divided evenly over every member."""
    return [
        product.quota(NAMESPACE, NAMESPACE, QUOTA),
        deployment(NAMESPACE, "web", 6, {"cpu": "250m", "memory": "512Mi"}),
        divided_policy(NAMESPACE, "web", members, "web"),
    ]


async def up(bed: TestBed) -> None:
    state = _load(bed)
    step("installing the KarmadaQuota CRD")
    await asyncio.to_thread(product.install_crd, bed)
    if state.get("controller") and _alive(state["controller"]):
        step(f"controller already running (pid {state['controller']})")
    else:
        step("starting the controller")
        controller, port = product.start_controller(bed, "karmadaquota-controller", detach=True)
        state.update(controller=controller.popen.pid, controller_metrics=port)
    if state.get("webhook") and _alive(state["webhook"]):
        step(f"webhook already running (pid {state['webhook']})")
    else:
        step("starting the webhook")
        hook = await product.start_webhook(bed, "karmadaquota-webhook", detach=True)
        state.update(
            webhook=hook.proc.popen.pid, webhook_port=hook.port, webhook_metrics=hook.metrics_port
        )
        step("registering the webhook with karmada-apiserver")
        await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle)
    _state_file(bed).write_text(json.dumps(state, indent=2))
    step(f"creating namespace {NAMESPACE}, its KarmadaQuota and a Deployment over the members")
    await bed.akubectl("create", "namespace", NAMESPACE, check=False)
    await bed.aapply(sample(list(bed.members)))

    def counted() -> bool:
        q = bed.get("karmadaquota", NAMESPACE, namespace=NAMESPACE) or {}
        return bool(q.get("status", {}).get("used", {}).get("pods") == "6")

    await eventually(counted, 120, "the sample Deployment's usage in status.used")
    step("ready")
    show(bed)


def show(bed: TestBed) -> None:
    kc = shlex.quote(str(bed.karmada_kubeconfig))
    kubectl = shlex.quote(bed.kubectl_binary)
    print()
    print(f"$ kubectl get kq -n {NAMESPACE}")
    print(bed.kubectl("get", "kq", "-n", NAMESPACE).stdout)
    print(f"$ kubectl karmadaquota describe {NAMESPACE} -n {NAMESPACE}")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "karmadaquota.kubectl_plugin",
            "describe",
            NAMESPACE,
            "-n",
            NAMESPACE,
            f"--kubeconfig={bed.karmada_kubeconfig}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    print(out.stdout or out.stderr)
    print("Try it (copy-paste):")
    print(f"  export KUBECONFIG={kc}")
    print(f"  alias kubectl={kubectl}")
    plugin_dir = Path(sys.executable).parent
    if (plugin_dir / "kubectl-karmadaquota").exists():
        path = shlex.quote(str(plugin_dir))
        print(f"  export PATH={path}:$PATH                # the kubectl karmadaquota plugin")
    print(f"  kubectl -n {NAMESPACE} scale deployment/web --replicas=30   # refused: over quota")
    print(f"  kubectl -n {NAMESPACE} get events --field-selector involvedObject.name=web")
    print(f"  kubectl -n {NAMESPACE} scale deployment/web --replicas=2    # frees quota")
    print(f"  kubectl -n {NAMESPACE} get kq -w                            # watch usage move")
    print("  make down                                              # stop everything")


def down(home: Path) -> None:
    try:
        state = json.loads((home / "karmadaquota.json").read_text())
    except (OSError, ValueError):
        return
    for key in ("webhook", "controller"):
        pid = state.get(key)
        if pid and _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)  # waiting for exit with a deadline
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            step(f"stopped {key} (pid {pid})")
    (home / "karmadaquota.json").unlink(missing_ok=True)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.testbed.demo", description=__doc__)
    p.add_argument("command", choices=("up", "down", "show"))
    args = p.parse_args()
    home = default_home()
    if args.command == "down":
        down(home)
        return 0
    bed = TestBed.attach(home)
    if not bed.healthy():
        print(f"no healthy test bed in {home}: run `make up`", file=sys.stderr)
        return 1
    if args.command == "show":
        show(bed)
        return 0
    asyncio.run(up(bed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
