"""The scheduling loop's own peering check: only the active replica runs a pass.

kopf pauses a standby's handlers but not our scheduling loop; the loop reads the peering
object before every pass (``gleaner.operator.peering``). The rule is tested pure, and the
shell (``replica_verdict``) over real HTTP against the Kubernetes emulator.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.clients.kube import Credentials, KubeClient
from gleaner.operator.config import OperatorConfig
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.scheduling import replica_verdict
from gleaner.operator.http import Health
from gleaner.operator.metrics import OperatorMetrics
from gleaner.operator.peering import peering_paths, peering_verdict
from gleaner.testing.kube import KubeApi, KubeEmulator

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def peer(priority: int, seen_ago_s: float, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - timedelta(seconds=seen_ago_s)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_alone_is_active() -> None:
    v = peering_verdict({"me": peer(10, 1)}, 10, NOW)
    assert v.active and "me" in v.reason and not v.paused


def test_a_live_higher_priority_peer_makes_us_standby() -> None:
    v = peering_verdict({"me": peer(10, 1), "other": peer(20, 5)}, 10, NOW)
    assert not v.active and "other" in v.reason
    assert v.paused  # kopf paused our watches: the scheduling loop lists again


def test_a_dead_higher_priority_peer_does_not() -> None:
    assert peering_verdict({"me": peer(10, 1), "other": peer(20, 61)}, 10, NOW).active


def test_lower_priority_peers_do_not_matter() -> None:
    assert peering_verdict({"me": peer(10, 1), "low": peer(3, 0)}, 10, NOW).active


def test_a_same_priority_peer_pauses_both_as_kopf_does() -> None:
    v = peering_verdict({"me": peer(10, 1), "twin": peer(10, 2)}, 10, NOW)
    assert not v.active and "share priority" in v.reason and v.paused


def test_our_own_record_missing_or_expired_means_not_active() -> None:
    for status in ({}, {"me": peer(10, 120)}, {"me": peer(10, 120), "low": peer(3, 0)}):
        verdict = peering_verdict(status, 10, NOW)
        # Not active, but no peer outranks or ties it: kopf did not pause its watches (our
        # record lapses when the event loop was busy), so the caches stay.
        assert not verdict.active and not verdict.paused


def test_garbage_entries_are_ignored() -> None:
    status = {"me": peer(10, 1), "x": "oops", "y": {"priority": "high", "lastseen": "never"}}
    assert peering_verdict(status, 10, NOW).active


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.floats(0, 200), st.integers(1, 100)),
        max_size=6,
    ),
    st.integers(0, 5),
)
def test_at_most_one_live_priority_is_ever_active(
    others: list[tuple[int, float, int]], mine: int
) -> None:
    """Across all replicas looking at the same object, at most one is active."""
    status = {f"p{i}": peer(prio, ago, life) for i, (prio, ago, life) in enumerate(others)}
    active = [p for p in {prio for prio, _, _ in others} if peering_verdict(status, p, NOW).active]
    assert len(active) <= 1
    if active:
        live = [prio for prio, ago, life in others if ago < life]
        assert active[0] == max(live)


def test_paths_cluster_wide_and_namespaced() -> None:
    assert peering_paths("gleaner", ()) == ["/apis/kopf.dev/v1/clusterkopfpeerings/gleaner"]
    assert peering_paths("gleaner", ("a", "b")) == [
        "/apis/kopf.dev/v1/namespaces/a/kopfpeerings/gleaner",
        "/apis/kopf.dev/v1/namespaces/b/kopfpeerings/gleaner",
    ]


def _verdict(kube: KubeEmulator, config: OperatorConfig) -> tuple[bool, str]:
    async def run() -> tuple[bool, str]:
        client = KubeClient(Credentials.load())
        ctx = OperatorContext(
            config=config, client=client, metrics=OperatorMetrics(), health=Health()
        )
        try:
            v = await replica_verdict(ctx)
        finally:
            await client.close()
        return v.active, v.reason

    return asyncio.run(run())


@pytest.mark.timeout(60)
def test_replica_verdict_reads_the_peering_object_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with KubeEmulator(tmp_path) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        api = KubeApi(kube)
        now = datetime.now(UTC)

        def write_status(status: dict[str, Any]) -> None:
            api.custom.patch_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", "gleaner", {"status": status}
            )

        def fresh(priority: int) -> dict[str, Any]:
            return {"priority": priority, "lifetime": 60, "lastseen": now.isoformat()}

        config = OperatorConfig(peering="gleaner", peering_priority=100)
        write_status({"me": fresh(100)})
        assert _verdict(kube, config) == (True, "active as me")
        write_status({"me": fresh(100), "newcomer": fresh(200)})
        active, reason = _verdict(kube, config)
        assert not active and "newcomer" in reason
        # Standalone never asks.
        assert _verdict(kube, OperatorConfig(peering=None))[0]
        # A namespaced replica reads its namespace's object, where it has no record yet.
        active, reason = _verdict(
            kube, OperatorConfig(peering="gleaner", namespaces=("default",), peering_priority=100)
        )
        assert not active and "missing" in reason
