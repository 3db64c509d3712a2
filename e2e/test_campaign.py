"""The adversarial campaign: generated bindings created, updated and deleted concurrently through
the real karmada-apiserver and two webhook replicas against overlapping quotas; afterwards the
quota invariant is checked from the API alone (see e2e/testbed/campaign.py).

Seeded: the seed is printed (shown on failure); `KARMADAQUOTA_SEED=<n>` replays a run.
`KARMADAQUOTA_LONG=1` runs the larger local size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from e2e.testbed import TestBed, campaign
from karmadaquota.kube.client import KubeClient

pytestmark = pytest.mark.e2e

TTL_S = 20


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[campaign.Stack]:
    async with campaign.stack(testbed, controllers=1, ttl=f"{TTL_S}s") as s:
        yield s


@pytest.fixture(scope="module")
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


async def test_generated_storm_never_over_admits_and_usage_converges(
    testbed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    namespace: str,
    record_property: Callable[[str, Any], None],
) -> None:
    seed = campaign.seed_from_env()
    ops, names, concurrency = (3000, 300, 32) if campaign.long_run() else (400, 60, 16)
    print(f"campaign seed={seed} ops={ops} names={names} (replay: KARMADAQUOTA_SEED={seed})")
    record_property("seed", seed)
    await campaign.create_quotas(api, namespace)

    stats = await campaign.run(
        api, namespace, testbed.members, seed, ops, concurrency=concurrency, names=names
    )
    print(stats.summary())
    verdict, seconds = await campaign.converge(api, namespace, timeout=TTL_S + 60)
    print(f"converged {seconds:.1f}s after the storm")
    record_property("converge_seconds", round(seconds, 1))

    # the campaign exercised what it claims to: admissions, quota refusals, negative values
    assert stats.outcomes["create:ok"] > 0, stats.summary()
    messages = " ".join(stats.messages)
    assert "exceeded quota" in messages, stats.summary()
    assert "must be greater than or equal to" in messages, stats.summary()
    # and never failed inside: a refusal is a decision, not a crash
    assert "quota admission failed" not in messages, stats.summary()
    assert verdict.converged

    # what the programs logged through all of it: decisions, never objects or credentials
    for proc in [*(w.proc for w in stack.webhooks), *stack.controllers]:
        text = proc.log.read_text(errors="replace")
        # field paths do appear in error messages; these appear only in whole objects
        for leak in ("BEGIN ", "PRIVATE KEY", "Bearer ", "managedFields", "TaintManager"):
            assert leak not in text, f"{proc.log} contains {leak!r}"
