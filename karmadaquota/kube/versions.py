"""resourceVersion ordering, the one rule every cache of karmadaquota follows (pure).

Kubernetes calls resourceVersions opaque, but etcd-backed API servers (all of them, Karmada's
included) issue increasing integers, which is what lets a cache refuse to go back in time.
"""

from __future__ import annotations


def parse_rv(rv: object) -> int:
    """A resourceVersion as an integer; 0 when absent or not numeric (then never ordered)."""
    try:
        return int(str(rv))
    except ValueError:
        return 0
