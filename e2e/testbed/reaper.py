"""Reaper: stops an ephemeral test bed when the process that owns it dies.

``python -m e2e.testbed.reaper <owner-pid> <home>`` blocks on a pidfd of the owner
(no polling) and, once the owner is gone, without having stopped its bed (e.g. SIGKILL, OOM),
runs `bed.down(home)`. The owner stops the reaper first when it stops the bed normally.
"""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path


def wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m e2e.testbed.reaper <owner-pid> <home>", file=sys.stderr)
        return 2
    owner, home = int(argv[0]), Path(argv[1])
    wait_for_exit(owner)
    from .bed import down

    # An ephemeral bed's data is worthless once its owner is gone; its logs stay.
    stopped = down(home, purge=True)
    print(f"reaper: owner {owner} exited; stopped {', '.join(stopped) or 'nothing'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
