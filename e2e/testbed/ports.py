"""Free TCP ports on 127.0.0.1.

Ports are drawn at random from below the kernel's ephemeral range, so that a port we hand to a
server cannot meanwhile be taken as the local port of some outgoing connection (the test bed
opens thousands of those). Each candidate is checked by binding it; ports handed out by this
process are never handed out twice.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_LOCK = threading.Lock()
_HANDED_OUT: set[int] = set()
_FLOOR = 20000


def _ephemeral_start() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, _FLOOR + 1000)


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def is_listening(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """One free port on 127.0.0.1, never returned before by this process."""
    high = _ephemeral_start()
    rng = random.SystemRandom()
    with _LOCK:
        for _ in range(2000):
            port = rng.randrange(_FLOOR, high)
            if port in _HANDED_OUT or not is_free(port):
                continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port found on 127.0.0.1 in [{_FLOOR}, {high})")


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]
