"""The version matrix: the bed runs the Karmada the run asked for, and serves what we rely on.

`make test` runs the e2e suite on ``KARMADA_VERSION``, then `make e2e-previous`: the smoke
subset (tests marked ``smoke``: the documented install, storm exactness, a refusal in
Kubernetes' words, release on delete, the queue mode, member guards, and this file) on a bed
running ``KARMADA_PREVIOUS_VERSION`` (``KARMADAQUOTA_KARMADA_VERSION=previous``; both pinned in
hack/versions.env). The tests below make a matrix run fail when it would silently test the
current Karmada twice, and when a pinned Karmada lacks the field the queue mode needs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e.testbed import TestBed
from e2e.testbed.layout import Inputs

pytestmark = [pytest.mark.e2e, pytest.mark.smoke]

KARMADA_PROGRAMS = (
    "karmada-aggregated-apiserver",
    "karmada-controller-manager",
    "karmada-scheduler",
    "karmada-webhook",
)
RB_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/resourcebindings.work.karmada.io"


@pytest.fixture
def local(testbed: TestBed) -> TestBed:
    if testbed.backend != "local":
        pytest.skip("the kind backend's Karmada is whatever hack/kind-up.sh installed")
    return testbed


def test_every_karmada_process_runs_the_version_asked_for(local: TestBed) -> None:
    """What runs (the processes' own executables), not what the bed was told to run."""
    want = Inputs.discover().karmada_version  # $KARMADAQUOTA_KARMADA_VERSION, else the current
    assert local.inputs.karmada_version == want
    records = {r.name: r for r in local.records() if r.alive()}
    for program in KARMADA_PROGRAMS:
        exe = Path(f"/proc/{records[program].pid}/exe").resolve()
        assert exe == local.inputs.binary(program).resolve(), program
        out = subprocess.run(
            [str(exe), "version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        assert f'GitVersion:"{want}"' in out, out


def test_karmada_apiserver_is_the_pinned_kubernetes(local: TestBed) -> None:
    """docs/install.md states the Kubernetes every Karmada of the matrix was tested on."""
    version = json.loads(local.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == local.inputs.versions["KUBERNETES_VERSION"]


def test_bindings_serve_the_scheduling_suspension_the_queue_mode_needs(testbed: TestBed) -> None:
    """The queue mode parks a binding with spec.suspension.scheduling (Karmada >= 1.13): a
    Karmada whose schema lacks it prunes the field, so nothing could be parked there."""
    crd = testbed.rest().get(RB_CRD)
    assert crd is not None, "Karmada's ResourceBinding CRD is installed"
    served = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    (schema,) = [v["schema"]["openAPIV3Schema"] for v in served]
    suspension = schema["properties"]["spec"]["properties"]["suspension"]
    assert suspension["properties"]["scheduling"]["type"] == "boolean"
