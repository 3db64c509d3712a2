"""The real test bed: a local Karmada control plane plus kwok-backed member clusters.

See `bed.TestBed` for the Python API and ``python -m e2e.testbed --help`` for the CLI.
"""

from .bed import DEFAULT_MEMBERS, ServingCert, TestBed, backend_from_env, build_binaries, down
from .cluster import NodeShape
from .layout import KARMADA, default_home
from .pki import CertificateAuthority, CertKey
from .process import StartupError

__all__ = [
    "DEFAULT_MEMBERS",
    "KARMADA",
    "CertKey",
    "CertificateAuthority",
    "NodeShape",
    "ServingCert",
    "StartupError",
    "TestBed",
    "backend_from_env",
    "build_binaries",
    "default_home",
    "down",
]
