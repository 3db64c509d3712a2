"""A process's wall clock moved from outside it: libfaketime, preloaded.

The clock-skew fault (e2e/test_faults.py) runs a webhook replica whose wall clock is ahead or
behind the others', as a skewed node's would be. libfaketime (Debian's package, installed by
`hack/build-binaries.sh faketime`) shifts what the process reads from the wall clock
(`time.time`, `datetime.now`) by a fixed offset; its monotonic clock, which asyncio's timers
read, is left alone (a skewed node's monotonic clock still runs at the normal rate). So the
product needs no test hook of its own to be tested against a skewed clock.
"""

from __future__ import annotations

import glob


def library() -> str:
    """The multi-threaded libfaketime (the webhook runs threads: TLS, DNS)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        raise RuntimeError(
            "libfaketime is not installed: run `bash hack/build-binaries.sh faketime`"
        )
    return found[0]


def skewed(offset: float) -> dict[str, str]:
    """The environment that runs a process with its wall clock `offset` seconds off."""
    return {
        "LD_PRELOAD": library(),
        "FAKETIME": f"{offset:+g}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
