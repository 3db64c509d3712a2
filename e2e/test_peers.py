"""Karmada's FederatedResourceQuota enforcement beside karmadaquota, on a bed of its own (the
`FederatedQuotaEnforcement` gate is off in the shared bed, as in Karmada's defaults).

Small storms of `bench.bench_peers`. Asserted: karmadaquota admits exactly what its quota
allows, with no over-admission and no false rejection, both for raw scheduled-binding creates
and on the user's path (Deployments + PropagationPolicy, counted in the member). The FRQ
figures are printed, not asserted: they are Karmada's, and they vary with load.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bench_peers import GATE, measure, report
from e2e.testbed import TestBed, backend_from_env

MEMBER = "member1"


@pytest.fixture(scope="module")
def peer_bed() -> Iterator[TestBed]:
    if backend_from_env() != "local":
        pytest.skip("needs a local bed started with the FederatedQuotaEnforcement gate")
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-e2e-peers-"))
    bed = TestBed.start(home, [MEMBER], ephemeral=True, quiet=True, karmada_feature_gates=[GATE])
    try:
        yield bed
    finally:
        bed.stop()
        shutil.rmtree(home, ignore_errors=True)


async def test_karmadaquota_is_exact_where_frq_is_measured(
    peer_bed: TestBed, capsys: pytest.CaptureFixture[str]
) -> None:
    count, deployments, settle, deadline = 20, 10, 15.0, 180.0
    results = await measure(peer_bed, MEMBER, count, deployments, settle, deadline)
    with capsys.disabled():
        print("\n" + report(count, deployments, settle, deadline, results))
    for storm in ("bindings", "user path"):
        ours = results[storm]["karmadaquota"]
        assert (ours.admitted, ours.over, ours.false_rejections) == (ours.allowed, 0, 0), storm
        assert ours.allowed == (count if storm == "bindings" else deployments) * 3 // 5
        unlimited = results[storm]["no quota"]
        assert unlimited.admitted == unlimited.objects, f"{storm}: no quota admits everything"
