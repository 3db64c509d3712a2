"""The product as a new user meets it: `make up`, the commands it prints, then `make down`.

Runs the real Makefile in a fresh KARMADAQUOTA_HOME (its own bed with three members, next to
the session's bed), follows the printed "Try it" commands as a user would, and checks that
`make down` leaves no process and no listening port behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.testbed.aio import eventually
from e2e.testbed.ports import is_listening

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


def run(cmd: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", cmd],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def our_processes(home: Path) -> list[str]:
    """Command lines of live processes that mention this home (the bed and our product)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(home) in cmd:
            out.append(cmd)
    return out


def ports_of(home: Path) -> list[int]:
    """Every port the bed and karmadaquota listen on, from their state files."""
    state = json.loads((home / "state.json").read_text())
    ports = {p for cluster in state["ports"].values() for p in cluster.values()}
    product = json.loads((home / "karmadaquota.json").read_text())
    ports |= {product["webhook_port"], product["webhook_metrics"], product["controller_metrics"]}
    return sorted(int(p) for p in ports)


async def test_make_up_prints_working_commands_and_make_down_cleans_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # The interpreter running the tests (the project venv under `make test`) runs the product.
    env = {**os.environ, "KARMADAQUOTA_HOME": str(home), "PYTHON": sys.executable}
    env.pop("KARMADAQUOTA_E2E_REUSE", None)
    up = run("make up", env)
    assert up.returncode == 0, f"make up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    out = up.stdout
    try:
        assert "$ kubectl get kq -n team-a" in out
        assert re.search(r"team-a\s+.*pods: 6/20.*requests.cpu: 1500m/4", out), out[-2000:]
        assert re.search(r"Resource\s+Used\s+Hard", out), out[-2000:]
        for m in ("member1", "member2", "member3"):
            assert m in out.split("kubectl karmadaquota describe", 1)[1]
        try_it = out.split("Try it (copy-paste):", 1)[1].splitlines()
        commands = [line.strip() for line in try_it if line.strip()]
        exports = [c for c in commands if c.startswith(("export ", "alias "))]
        prelude = "shopt -s expand_aliases\n" + "\n".join(exports) + "\n"

        def step(keyword: str) -> subprocess.CompletedProcess[str]:
            (line,) = [c for c in commands if keyword in c]
            proc = run(prelude + line.split("  #", 1)[0], env, timeout=120)
            assert proc.returncode == 0, f"{line}\n{proc.stderr}"
            return proc

        step("--replicas=30")

        def refused() -> bool:
            return "exceeded quota: team-a" in step("get events").stdout

        await eventually(refused, 60, "the refused scale-up explained in the Deployment's events")
        step("--replicas=2")

        def released() -> bool:
            shown = run(prelude + "kubectl -n team-a get kq", env).stdout
            return "pods: 2/20" in shown

        await eventually(released, 60, "kubectl get kq shows the usage going down")
        ports = ports_of(home)
        assert ports, "the state file names the bed's ports"
    finally:
        down = run("make down", env)
    assert down.returncode == 0, down.stderr
    assert our_processes(home) == []
    assert [p for p in ports if is_listening(p)] == []
