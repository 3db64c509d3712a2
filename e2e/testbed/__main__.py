"""CLI: ``python -m e2e.testbed up|down|status|env``.

``up`` is idempotent: on a healthy bed with the same members it returns at once. The bed keeps
running after ``up`` exits; ``down`` stops it from any process via the state file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from .bed import TestBed, backend_from_env, down
from .cluster import NodeShape
from .layout import Home, default_home
from .process import StartupError

CLI_MEMBERS = "member1,member2,member3"


def _members(value: str) -> list[str]:
    members = [m.strip() for m in value.split(",") if m.strip()]
    if not members:
        raise argparse.ArgumentTypeError("at least one member")
    return members


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.testbed", description=__doc__)
    parser.add_argument(
        "--home", type=Path, default=None, help="state dir (default: $KARMADAQUOTA_HOME)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the test bed (or return if it is already up)")
    up.add_argument(
        "--members",
        type=_members,
        default=_members(os.environ.get("KARMADAQUOTA_MEMBERS", CLI_MEMBERS)),
        help=f"comma-separated member names (default: {CLI_MEMBERS})",
    )
    up.add_argument("--nodes", type=int, default=NodeShape.count, help="fake nodes per member")
    up.add_argument("--quiet", action="store_true")
    sub.add_parser("down", help="stop every process of the test bed")
    status = sub.add_parser("status", help="show processes, ports and health")
    status.add_argument("--json", action="store_true")
    sub.add_parser("env", help="print shell exports for the kubeconfigs")
    args = parser.parse_args(argv)
    home: Path = args.home or default_home()

    try:
        if args.command == "up":
            if backend_from_env() == "kind":
                print("KARMADAQUOTA_TESTBED=kind: run hack/kind-up.sh instead", file=sys.stderr)
                return 2
            bed = TestBed.up(
                home, args.members, nodes=NodeShape(count=args.nodes), quiet=args.quiet
            )
            took = "already up" if bed.reused else f"started in {bed.start_seconds}s"
            print(f"{bed.describe()}\n{took}; {bed.memory_summary()}")
            return 0
        if args.command == "down":
            stopped = down(home)
            print(
                f"stopped {len(stopped)} processes" + (f": {', '.join(stopped)}" if stopped else "")
            )
            return 0
        bed = TestBed.kind(home) if backend_from_env() == "kind" else TestBed.attach(home)
        if args.command == "env":
            for k, v in bed.env().items():
                print(f"export {k}={shlex.quote(v)}")
            return 0
        return _status(bed, Home(home), args.json)
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; every process started was stopped", file=sys.stderr)
        return 130


def _status(bed: TestBed, home: Home, as_json: bool) -> int:
    healthy = bed.healthy()
    mem = bed.memory()
    records = bed.records()
    if as_json:
        state = json.loads(home.state_file.read_text()) if home.state_file.exists() else {}
        state["healthy"] = healthy
        state["memory_kib"] = {k: {"rss": v[0], "peak": v[1]} for k, v in mem.items()}
        print(json.dumps(state, indent=2, sort_keys=True))
        return 0 if healthy else 1
    print(bed.describe())
    for r in records:
        rss, peak = mem.get(r.name, (0, 0))
        state = "running" if r.alive() else "stopped"
        mib = f"rss {rss // 1024:>5} MiB  peak {peak // 1024:>5} MiB"
        print(f"  {r.name:<36} pid {r.pid:<8} {state:<8} {mib}")
    print(f"healthy: {healthy}; {bed.memory_summary()}")
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
