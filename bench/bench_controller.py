"""The controller's CPU per create, for two source trees side by side in one bed.

One real test bed, one webhook (this tree), and the controller of each tree in turn — never two
at once — each through the same storm: N concurrent ResourceBinding creates in a fresh
namespace whose KarmadaQuota has room for all of them. The controller's CPU time (from /proc)
is counted from just before the storm until the quota's status settles (`used` = the admitted
count, no reservation left), divided by the creates admitted (48 at a time). Rounds alternate
the trees so that machine noise hits both.

    python -m bench.bench_controller --baseline /path/to/other/checkout [--count 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_admission import RB, cpu_seconds
from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.ports import free_port
from e2e.testbed.storm import binding, storm
from karmadaquota.api import KarmadaQuota
from karmadaquota.kube.client import KubeClient

REPO = Path(__file__).resolve().parent.parent


def start_controller(bed: TestBed, tree: Path, name: str) -> subprocess.Popen[bytes]:
    """`karmadaquota controller` imported from `tree` (its working directory comes first)."""
    log = bed.home.root / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "karmadaquota.cli",
                "controller",
                f"--kubeconfig={bed.karmada_kubeconfig}",
                "--metrics-bind-address=127.0.0.1",
                f"--metrics-port={free_port()}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
        )


async def one(
    bed: TestBed, api: KubeClient, tree: Path, ns: str, args: argparse.Namespace
) -> tuple[float, float]:
    """CPU milliseconds per create of `tree`'s controller through one storm: as measured, and
    net of its idle rate over the same time."""
    count = args.count
    proc = start_controller(bed, tree, f"bench-{ns}")
    try:
        await bed.akubectl("create", "namespace", ns)
        await bed.aapply(
            product.quota(ns, "storm", {"requests.cpu": f"{count}", "pods": str(count)})
        )

        def initialised() -> bool:
            q = bed.get("karmadaquota", "storm", namespace=ns) or {}
            return "pods" in q.get("status", {}).get("used", {})

        await eventually(initialised, 120, f"KarmadaQuota in {ns} initialised")
        # what the controller spends doing nothing (Lease renewals, watches kept open), so
        # that it can be told apart from the storm's cost
        idle_from, idle_cpu = time.perf_counter(), cpu_seconds(proc.pid)
        await asyncio.sleep(args.idle)  # measuring the idle rate, not synchronisation
        idle_rate = (cpu_seconds(proc.pid) - idle_cpu) / (time.perf_counter() - idle_from)
        before, started = cpu_seconds(proc.pid), time.perf_counter()
        res = await storm(
            api,
            RB.format(ns=ns),
            lambda i: binding(ns, f"x-{i:04d}"),
            count,
            concurrency=48,
            deadline=300,
        )
        admitted = len(res.admitted)
        if admitted == 0:  # on a loaded machine some creates time out in admission: fine
            sample = next(iter(res.denied.values()), "")
            raise AssertionError(f"nothing admitted of {count}: {sample}")

        def settled() -> bool:
            q = bed.get("karmadaquota", "storm", namespace=ns) or {}
            held = KarmadaQuota.model_validate(q).status.reservations if q else []
            st = q.get("status", {})
            return st.get("used", {}).get("pods") == str(admitted) and not held

        await eventually(settled, 120, f"usage in {ns} settled", interval=0.1)
        spent = cpu_seconds(proc.pid) - before
        net = spent - idle_rate * (time.perf_counter() - started)
        return spent * 1000 / admitted, net * 1000 / admitted
    finally:
        proc.terminate()
        proc.wait(15)


async def run(args: argparse.Namespace) -> str:
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-bench-"))
    bed = TestBed.start(home, ["member1"], ephemeral=True, quiet=True)
    hook: product.WebhookProc | None = None
    trees = {"baseline": args.baseline, "this tree": REPO}
    ms: dict[str, list[float]] = {k: [] for k in trees}
    nets: dict[str, list[float]] = {k: [] for k in trees}
    try:
        await asyncio.to_thread(product.install_crd, bed)
        if args.webhook:
            hook = await product.start_webhook(bed, "bench-webhook")
            await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle)
        api = await KubeClient.connect(str(bed.karmada_kubeconfig))
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
            for label, tree in order:
                started = time.perf_counter()
                ns = f"cpu-{r}-{'b' if label == 'baseline' else 't'}"
                raw, net = await one(bed, api, tree, ns, args)
                ms[label].append(raw)
                nets[label].append(net)
                took = time.perf_counter() - started
                print(
                    f"round {r} {label}: {raw:.3f} ms/create, {net:.3f} net of idle ({took:.0f}s)"
                )
        await api.close()
    finally:
        if hook is not None:
            await asyncio.to_thread(product.unregister, bed)
            hook.proc.stop()
        bed.stop()
        shutil.rmtree(home, ignore_errors=True)
    rows = []
    for label, tree in trees.items():
        raw, net = statistics.median(ms[label]), statistics.median(nets[label])
        runs = ", ".join(f"{x:.3f}/{y:.3f}" for x, y in zip(ms[label], nets[label], strict=True))
        rows.append(f"| {label} ({tree}) | {raw:.3f} | {net:.3f} | {runs} |")
    ratio = statistics.median(ms["this tree"]) / statistics.median(ms["baseline"])
    return "\n".join(
        [
            f"controller CPU per admitted create, storms of {args.count} x {args.rounds} rounds"
            " (median)",
            "| tree | ms per create | net of idle | runs (raw/net) |",
            "|---|---|---|---|",
            *rows,
            f"ratio this/baseline (raw): {ratio:.2f}",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--baseline", required=True, type=lambda s: Path(s).resolve(), help="another checkout"
    )
    p.add_argument("--count", type=int, default=600)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle", type=float, default=5.0, help="seconds to measure the idle rate")
    p.add_argument(
        "--no-webhook",
        dest="webhook",
        action="store_false",
        help="creates are not admitted by our webhook (no reservations): the binding path alone,"
        " and every create is admitted even on a loaded machine",
    )
    print(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
